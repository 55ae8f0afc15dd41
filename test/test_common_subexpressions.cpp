// Common subexpressions at prepare: a node with the op, attributes, affinity and inputs of an
// earlier one (constant inputs compared by content, as two Constants holding the same weights)
// is that node; anything that differs keeps both.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

TensorDesc float_desc(const std::vector<int64_t>& dims) { return test::make_desc(ElementType::Float32, dims); }

std::vector<float> random_values(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

// Two branches over x, each a Conv (3x3, pad 1) with its own weight Constant, optionally each
// followed by a BatchNormalization with its own constant parameters; outputs y1, y2 and their
// sum.
struct Branches {
    std::vector<float> w1, w2;   // the two weight tensors (4 x 3 x 3 x 3)
    bool batchnorm = false;
    std::vector<float> scale2;   // the second BatchNormalization's scale (default: the first's)
};

// The two branches' outputs y1, y2 and their sum; finalizes m.
void add_outputs(Model* m, const NodeId* out) {
    NodeId sum;
    InputRef add[] = {InputRef::by_id(out[0]), InputRef::by_id(out[1])};
    REQUIRE(m->add_node("Add", "add", add, 1, &sum) == Status::Ok);
    REQUIRE(m->add_output("y1", InputRef::by_id(out[0])) == Status::Ok);
    REQUIRE(m->add_output("y2", InputRef::by_id(out[1])) == Status::Ok);
    REQUIRE(m->add_output("sum", InputRef::by_id(sum)) == Status::Ok);
    Status s = m->finalize();
    INFO(std::string(m->graph.last_error()));
    REQUIRE(s == Status::Ok);
}

void build_branches(Model* m, const Branches& b) {
    NodeId x;
    REQUIRE(m->add_input("x", float_desc({1, 3, 6, 6}), &x) == Status::Ok);
    std::vector<float> scale = random_values(4, 7), var(4, 1.5f);
    const std::vector<float> shift = random_values(4, 8), mean = random_values(4, 9);
    for (float& v : scale) v = 1.0f + 0.5f * v;
    NodeId out[2];
    for (int k = 0; k < 2; ++k) {
        const std::string tag = std::to_string(k + 1);
        NodeId w, conv;
        REQUIRE(m->add_constant(("w" + tag).c_str(), float_desc({4, 3, 3, 3}), (k ? b.w2 : b.w1).data(), &w) == Status::Ok);
        InputRef in[] = {InputRef::by_id(x), InputRef::by_id(w)};
        REQUIRE(m->add_node("Conv", ("conv" + tag).c_str(), in, 1, &conv) == Status::Ok);
        const int64_t pads[] = {1, 1, 1, 1};
        REQUIRE(m->set_ints(conv, "pads", pads) == Status::Ok);
        out[k] = conv;
        if (!b.batchnorm) continue;
        NodeId s, t, mu, v, bn;
        const std::vector<float>& sc = k && !b.scale2.empty() ? b.scale2 : scale;
        REQUIRE(m->add_constant(("scale" + tag).c_str(), float_desc({4}), sc.data(), &s) == Status::Ok);
        REQUIRE(m->add_constant(("shift" + tag).c_str(), float_desc({4}), shift.data(), &t) == Status::Ok);
        REQUIRE(m->add_constant(("mean" + tag).c_str(), float_desc({4}), mean.data(), &mu) == Status::Ok);
        REQUIRE(m->add_constant(("var" + tag).c_str(), float_desc({4}), var.data(), &v) == Status::Ok);
        InputRef bin[] = {InputRef::by_id(conv), InputRef::by_id(s), InputRef::by_id(t), InputRef::by_id(mu), InputRef::by_id(v)};
        REQUIRE(m->add_node("BatchNormalization", ("bn" + tag).c_str(), bin, 1, &bn) == Status::Ok);
        out[k] = bn;
    }
    add_outputs(m, out);
}

struct Run {
    uint32_t folded = 0, convs = 0;   // nodes folded or removed; Conv nodes in the prepared model
    std::vector<std::vector<float>> outputs;
};

Run compile_and_run(const Model& m, const char* device) {
    Core core;
    CompiledModel compiled;
    Status s = core.compile_model(m, device, {}, &compiled);
    INFO(std::string(core.last_error()));
    REQUIRE(s == Status::Ok);
    Run r;
    r.folded = compiled.prepared()->folded_count();
    const Graph& g = compiled.prepared()->model.graph;
    for (NodeId i = 0; i < g.node_count(); ++i) r.convs += g.node(i).op == StringView("Conv") ? 1 : 0;
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    const std::vector<float> x = random_values((size_t)request.input(0).elements(), 3);
    std::memcpy(request.input(0).data_as<float>(), x.data(), x.size() * sizeof(float));
    REQUIRE(request.infer() == Status::Ok);
    for (uint32_t i = 0; i < compiled.output_count(); ++i) {
        const Tensor& t = request.output(i);
        r.outputs.emplace_back(t.data_as<float>(), t.data_as<float>() + t.elements());
    }
    return r;
}

// Conv of x (the input compile_and_run feeds) by w, 3x3 with pad p, at index [o][y][x].
float conv_at(const std::vector<float>& w, int64_t p, int64_t o, int64_t y, int64_t xo) {
    const std::vector<float> x = random_values(3 * 6 * 6, 3);
    double s = 0;
    for (int64_t c = 0; c < 3; ++c)
        for (int64_t ky = 0; ky < 3; ++ky)
            for (int64_t kx = 0; kx < 3; ++kx) {
                const int64_t iy = y + ky - p, ix = xo + kx - p;
                if (iy >= 0 && iy < 6 && ix >= 0 && ix < 6) s += (double)w[((o * 3 + c) * 3 + ky) * 3 + kx] * x[(c * 6 + iy) * 6 + ix];
            }
    return (float)s;
}

}  // namespace

TEST_CASE("common subexpressions: two Convs of one input by equal weight Constants are one node") {
    Branches b;
    b.w1 = b.w2 = random_values(4 * 27, 1);
    Model m;
    build_branches(&m, b);
    for (const char* device : {"CPU", "TEMPLATE"}) {
        INFO(device);
        Run r = compile_and_run(m, device);
        CHECK(r.convs == 1);
        CHECK(r.folded == 1);
        REQUIRE(r.outputs.size() == 3);
        REQUIRE(r.outputs[0].size() == 4 * 36);
        CHECK(std::memcmp(r.outputs[0].data(), r.outputs[1].data(), r.outputs[0].size() * sizeof(float)) == 0);
        for (int64_t o = 0; o < 4; ++o)
            for (int64_t y = 0; y < 6; ++y)
                for (int64_t x = 0; x < 6; ++x) {
                    const size_t i = (size_t)((o * 6 + y) * 6 + x);
                    const float want = conv_at(b.w1, 1, o, y, x);
                    CHECK(std::fabs(r.outputs[0][i] - want) <= 1e-5f * (1 + std::fabs(want)));
                    CHECK(r.outputs[2][i] == r.outputs[0][i] + r.outputs[0][i]);
                }
    }
}

TEST_CASE("common subexpressions: weights that differ in one element keep both Convs") {
    Branches b;
    b.w1 = b.w2 = random_values(4 * 27, 1);
    b.w2.back() += 0.5f;
    Model m;
    build_branches(&m, b);
    Run r = compile_and_run(m, "CPU");
    CHECK(r.convs == 2);
    CHECK(r.folded == 0);
    const size_t last = 4 * 36 - 1;   // map 3, the last pixel: tap (2, 2) of channel 2 is outside the padded plane
    const size_t centre = (size_t)((3 * 6 + 2) * 6 + 2);
    CHECK(r.outputs[0][last] == r.outputs[1][last]);
    CHECK(std::fabs(r.outputs[1][centre] - conv_at(b.w2, 1, 3, 2, 2)) <= 1e-5f * (1 + std::fabs(conv_at(b.w2, 1, 3, 2, 2))));
    CHECK(r.outputs[0][centre] != r.outputs[1][centre]);
}

TEST_CASE("common subexpressions: an attribute that differs keeps both Convs") {
    const std::vector<float> w = random_values(4 * 27, 1);
    Model m;
    NodeId x, w1, w2, c1, c2;
    REQUIRE(m.add_input("x", float_desc({1, 3, 6, 6}), &x) == Status::Ok);
    REQUIRE(m.add_constant("w1", float_desc({4, 3, 3, 3}), w.data(), &w1) == Status::Ok);
    REQUIRE(m.add_constant("w2", float_desc({4, 3, 3, 3}), w.data(), &w2) == Status::Ok);
    InputRef in1[] = {InputRef::by_id(x), InputRef::by_id(w1)}, in2[] = {InputRef::by_id(x), InputRef::by_id(w2)};
    REQUIRE(m.add_node("Conv", "conv1", in1, 1, &c1) == Status::Ok);
    REQUIRE(m.add_node("Conv", "conv2", in2, 1, &c2) == Status::Ok);
    const int64_t pads1[] = {1, 1, 1, 1}, pads2[] = {1, 1, 1, 2};   // one more column of padding on the right
    REQUIRE(m.set_ints(c1, "pads", pads1) == Status::Ok);
    REQUIRE(m.set_ints(c2, "pads", pads2) == Status::Ok);
    REQUIRE(m.add_output("y1", InputRef::by_id(c1)) == Status::Ok);
    REQUIRE(m.add_output("y2", InputRef::by_id(c2)) == Status::Ok);
    REQUIRE(m.finalize() == Status::Ok);
    Run r = compile_and_run(m, "CPU");
    CHECK(r.convs == 2);
    CHECK(r.folded == 0);
    REQUIRE(r.outputs[1].size() == 4 * 6 * 7);
    for (size_t y = 0; y < 6; ++y)   // the columns both compute agree
        for (size_t x = 0; x < 6; ++x) CHECK(r.outputs[1][y * 7 + x] == r.outputs[0][y * 6 + x]);
}

TEST_CASE("common subexpressions: Conv + BatchNormalization pairs merge only when the folded weights are equal") {
    Branches b;
    b.w1 = b.w2 = random_values(4 * 27, 1);
    b.batchnorm = true;
    Model same;
    build_branches(&same, b);
    Run r = compile_and_run(same, "CPU");
    CHECK(r.convs == 1);
    CHECK(r.folded == 3);   // the first BatchNormalization folded, the second pair merged
    CHECK(std::memcmp(r.outputs[0].data(), r.outputs[1].data(), r.outputs[0].size() * sizeof(float)) == 0);
    b.scale2 = random_values(4, 7);
    for (float& v : b.scale2) v = 1.0f + 0.5f * v;
    b.scale2[2] += 0.25f;   // the second pair's weights differ in map 2
    Model other;
    build_branches(&other, b);
    Run o = compile_and_run(other, "CPU");
    CHECK(o.convs == 2);
    CHECK(o.folded == 2);
    for (size_t i = 0; i < 36; ++i) CHECK(o.outputs[0][i] == r.outputs[0][i]);                      // map 0: equal parameters
    CHECK(std::memcmp(&o.outputs[1][2 * 36], &r.outputs[0][2 * 36], 36 * sizeof(float)) != 0);   // map 2 differs
}

TEST_CASE("common subexpressions: equal elementwise nodes merge, different attribute values do not") {
    for (float alpha2 : {0.1f, 0.2f}) {
        Model m;
        NodeId x, a, b, sum;
        REQUIRE(m.add_input("x", float_desc({2, 8}), &x) == Status::Ok);
        InputRef in[] = {InputRef::by_id(x)};
        REQUIRE(m.add_node("LeakyRelu", "a", in, 1, &a) == Status::Ok);
        REQUIRE(m.add_node("LeakyRelu", "b", in, 1, &b) == Status::Ok);
        REQUIRE(m.set_float(a, "alpha", 0.1f) == Status::Ok);
        REQUIRE(m.set_float(b, "alpha", alpha2) == Status::Ok);
        InputRef add[] = {InputRef::by_id(a), InputRef::by_id(b)};
        REQUIRE(m.add_node("Sub", "difference", add, 1, &sum) == Status::Ok);
        REQUIRE(m.add_output("y", InputRef::by_id(sum)) == Status::Ok);
        REQUIRE(m.finalize() == Status::Ok);
        Run r = compile_and_run(m, "TEMPLATE");
        const bool equal = alpha2 == 0.1f;
        CHECK(r.folded == (equal ? 1u : 0u));
        const std::vector<float> x0 = random_values(16, 3);
        for (size_t i = 0; i < 16; ++i) {   // each product rounded, as the kernels round them (no fused multiply-add)
            volatile float a_i = 0.1f * x0[i], b_i = alpha2 * x0[i];
            CHECK(r.outputs[0][i] == (x0[i] < 0 ? a_i - b_i : 0.0f));
        }
    }
}

namespace {
// build_branches' model with each Conv's weights DequantizeLinear(q_k, scale s_k) of int8
// constants (their floats pending until read: prepare compares such weights by their integers).
void build_int8_branches(Model* m, const std::vector<int8_t>* q, const float* s) {
    NodeId x;
    REQUIRE(m->add_input("x", float_desc({1, 3, 6, 6}), &x) == Status::Ok);
    NodeId out[2];
    for (int k = 0; k < 2; ++k) {
        const std::string tag = std::to_string(k + 1);
        NodeId qc, sc, w, conv;
        REQUIRE(m->add_constant(("q" + tag).c_str(), test::make_desc(ElementType::Int8, {4, 3, 3, 3}), q[k].data(), &qc) == Status::Ok);
        REQUIRE(m->add_constant(("s" + tag).c_str(), float_desc({}), &s[k], &sc) == Status::Ok);
        InputRef dq[] = {InputRef::by_id(qc), InputRef::by_id(sc)};
        REQUIRE(m->add_node("DequantizeLinear", ("w" + tag).c_str(), dq, 1, &w) == Status::Ok);
        InputRef in[] = {InputRef::by_id(x), InputRef::by_id(w)};
        REQUIRE(m->add_node("Conv", ("conv" + tag).c_str(), in, 1, &conv) == Status::Ok);
        const int64_t pads[] = {1, 1, 1, 1};
        REQUIRE(m->set_ints(conv, "pads", pads) == Status::Ok);
        out[k] = conv;
    }
    add_outputs(m, out);
}
}  // namespace

TEST_CASE("common subexpressions: Convs by DequantizeLinear of int8 weights merge when the integers and scales are equal") {
    std::mt19937 rng(11);
    std::vector<int8_t> q1(4 * 27);
    for (int8_t& v : q1) v = (int8_t)((int)(rng() % 101) - 50);
    struct Case { const char* what; std::vector<int8_t> q2; float s2; uint32_t convs; };
    std::vector<int8_t> one_off = q1, doubled = q1;
    one_off.back() = (int8_t)(one_off.back() + 1);
    for (int8_t& v : doubled) v = (int8_t)(2 * v);
    const Case cases[] = {
        {"equal integers and scales: one Conv", q1, 0.01f, 1},
        {"an integer differs: two Convs", one_off, 0.01f, 2},
        // the same floats from other integers and scale: compared by the integers, two Convs
        {"twice the integers at half the scale: two Convs", doubled, 0.005f, 2},
    };
    for (const Case& c : cases) {
        CAPTURE(c.what);
        const std::vector<int8_t> q[2] = {q1, c.q2};
        const float s[2] = {0.01f, c.s2};
        Model m;
        build_int8_branches(&m, q, s);
        for (const char* device : {"CPU", "TEMPLATE"}) {
            CAPTURE(device);
            Run r = compile_and_run(m, device);
            CHECK(r.convs == c.convs);
            REQUIRE(r.outputs.size() == 3);
            for (int k = 0; k < 2; ++k) {
                std::vector<float> w(q[k].size());
                for (size_t i = 0; i < w.size(); ++i) w[i] = (float)q[k][i] * s[k];
                const size_t centre = (size_t)((3 * 6 + 2) * 6 + 2);
                const float want = conv_at(w, 1, 3, 2, 2);
                CHECK(std::fabs(r.outputs[(size_t)k][centre] - want) <= 1e-5f * (1 + std::fabs(want)));
            }
        }
    }
}

TEST_CASE("common subexpressions: a blob of a model whose Convs merged imports, its outputs the same bits") {
    // the exporter's graph keeps the merged Conv's weight Constant, read by nothing; the import's
    // prepare drops it, and the partition's entry for it is skipped
    Branches b;
    b.w1 = b.w2 = random_values(4 * 27, 1);
    Model m;
    build_branches(&m, b);
    Core core;
    CompiledModel compiled;
    REQUIRE(core.compile_model(m, "CPU", {}, &compiled) == Status::Ok);
    std::string blob;
    REQUIRE(compiled.export_model(test::append_to_string, &blob) == Status::Ok);
    CompiledModel imported;
    Status s = core.import_model(blob.data(), blob.size(), &imported);
    INFO(std::string(core.last_error()));
    REQUIRE(s == Status::Ok);
    CHECK(imported.prepared()->model.graph.node_count() < compiled.prepared()->model.graph.node_count());
    const std::vector<float> x = random_values(3 * 36, 3);
    std::vector<float> y[2];
    const CompiledModel* models[2] = {&compiled, &imported};
    for (int k = 0; k < 2; ++k) {
        InferRequest request;
        REQUIRE(models[k]->create_request(&request) == Status::Ok);
        std::memcpy(request.input(0).data_as<float>(), x.data(), x.size() * sizeof(float));
        REQUIRE(request.infer() == Status::Ok);
        const Tensor& t = request.output(2);
        y[k].assign(t.data_as<float>(), t.data_as<float>() + t.elements());
    }
    REQUIRE(y[0].size() == y[1].size());
    CHECK(std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(float)) == 0);
}
