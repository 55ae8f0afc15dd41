// runtime.h nn op kernels (Conv, ConvTranspose, MatMul, Gemm, norms, pools, softmax,
// reductions, ArgMax, Resize): each kernel is driven directly through prepare/run on a
// one-node model and compared with a naive double-precision implementation written here,
// and each kind of bad input is checked for its exact Status.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

using Shape = std::vector<int64_t>;

using test::count_of;

using test::random_floats;

using test::make_desc;

// One input of the node under test.
struct In {
    TensorDesc desc;
    std::vector<float> f;
    std::vector<int64_t> i;
    bool constant = false;   // a Constant node: its data is a compile-time value
    bool absent = false;
};

In tensor(const Shape& shape, std::vector<float> values) {
    In in;
    in.desc = make_desc(ElementType::Float32, shape);
    in.f = std::move(values);
    return in;
}
In random_tensor(const Shape& shape, uint32_t seed) { return tensor(shape, random_floats(count_of(shape), seed)); }
In constant_floats(const Shape& shape, std::vector<float> values) {
    In in = tensor(shape, std::move(values));
    in.constant = true;
    return in;
}
In int64s(const Shape& shape, std::vector<int64_t> values, bool constant = true) {
    In in;
    in.desc = make_desc(ElementType::Int64, shape);
    in.i = std::move(values);
    in.constant = constant;
    return in;
}
In absent() {
    In in;
    in.absent = true;
    return in;
}

struct Outcome {
    Status status = Status::Ok;
    std::string error;
    std::vector<TensorDesc> descs;
    std::vector<std::vector<float>> f;
    std::vector<std::vector<int64_t>> i;
    Shape shape(size_t k = 0) const { return Shape(descs[k].dims, descs[k].dims + descs[k].rank); }
};

using Attributes = std::function<void(Model&, NodeId)>;

// Builds a one-node model, then prepares and runs the op's built-in kernel on it. Runs with
// `threads` scratch slots; when prepare allows it, runs again in place and checks the result
// is the same.
Outcome run_op(const char* op, const std::vector<In>& inputs, const Attributes& attributes = nullptr,
               uint32_t num_outputs = 1, uint32_t opset = 17, uint32_t threads = 2) {
    Outcome r;
    Model model;
    model.opset = opset;
    std::vector<InputRef> refs;
    for (size_t k = 0; k < inputs.size(); ++k) {
        std::string name = "in" + std::to_string(k);
        NodeId id = kNoNode;
        const In& in = inputs[k];
        if (in.absent) { refs.push_back(model.absent()); continue; }
        const void* data = in.desc.type == ElementType::Int64 ? (const void*)in.i.data() : (const void*)in.f.data();
        Status s = in.constant ? model.add_constant(StringView(name.c_str()), in.desc, data, &id)
                               : model.add_input(StringView(name.c_str()), in.desc, &id);
        REQUIRE(s == Status::Ok);
        refs.push_back(InputRef::by_id(id));
    }
    NodeId node = kNoNode;
    REQUIRE(model.add_node(op, "node", Span<const InputRef>(refs.data(), refs.size()), num_outputs, &node) == Status::Ok);
    if (attributes) attributes(model, node);
    std::vector<std::string> output_names;
    for (uint32_t k = 0; k < num_outputs; ++k) output_names.push_back("y" + std::to_string(k));
    for (uint32_t k = 0; k < num_outputs; ++k)
        REQUIRE(model.add_output(StringView(output_names[k].c_str()), InputRef::by_id(node, k)) == Status::Ok);
    REQUIRE(model.finalize() == Status::Ok);

    const OpKernel* kernel = find_builtin_kernel(op);
    REQUIRE(kernel != nullptr);
    std::vector<TensorDesc> in_descs;
    std::vector<const void*> values;
    for (const In& in : inputs) {
        in_descs.push_back(in.absent ? TensorDesc() : in.desc);
        values.push_back(!in.constant ? nullptr : in.desc.type == ElementType::Int64 ? (const void*)in.i.data()
                                                                                   : (const void*)in.f.data());
    }
    r.descs.resize(num_outputs);
    Arena arena;
    PrepareContext pc;
    pc.graph = &model.graph;
    pc.node = node;
    pc.opset = opset;
    pc.num_inputs = (uint32_t)inputs.size();
    pc.inputs = in_descs.data();
    pc.values = values.data();
    pc.num_outputs = num_outputs;
    pc.outputs = r.descs.data();
    pc.arena = &arena;
    pc.threads = threads;
    r.status = kernel->prepare(pc);
    r.error = pc.error;
    if (r.status != Status::Ok) return r;

    std::vector<TensorView> views(inputs.size()), outs(num_outputs);
    for (size_t k = 0; k < inputs.size(); ++k) {
        views[k].desc = in_descs[k];
        views[k].data = inputs[k].absent ? nullptr
                        : inputs[k].desc.type == ElementType::Int64 ? (void*)inputs[k].i.data() : (void*)inputs[k].f.data();
    }
    r.f.resize(num_outputs);
    r.i.resize(num_outputs);
    for (uint32_t k = 0; k < num_outputs; ++k) {
        uint64_t n = 0;
        REQUIRE(desc_elements(r.descs[k], &n));
        outs[k].desc = r.descs[k];
        if (r.descs[k].type == ElementType::Int64) {
            r.i[k].assign(n + 1, -7);
            outs[k].data = r.i[k].data();
        } else {
            REQUIRE(r.descs[k].type == ElementType::Float32);
            r.f[k].assign(n + 1, NAN);   // one guard element past the end
            outs[k].data = r.f[k].data();
        }
    }
    std::vector<float> scratch(pc.scratch_bytes / 4 + 32, NAN);
    char error[kErrorMessageBytes] = {};
    RunContext rc;
    rc.graph = &model.graph;
    rc.node = node;
    rc.state = pc.state;
    rc.num_inputs = (uint32_t)inputs.size();
    rc.inputs = views.data();
    rc.num_outputs = num_outputs;
    rc.outputs = outs.data();
    rc.scratch = (void*)(((uintptr_t)scratch.data() + 63) & ~(uintptr_t)63);
    rc.threads = threads;
    rc.error = error;
    r.status = kernel->run(rc);
    r.error = error;
    for (uint32_t k = 0; k < num_outputs; ++k) {  // the guard is untouched, then dropped
        if (r.descs[k].type == ElementType::Int64) { CHECK(r.i[k].back() == -7); r.i[k].pop_back(); }
        else { CHECK(std::isnan(r.f[k].back())); r.f[k].pop_back(); }
    }
    if (r.status == Status::Ok && pc.in_place && r.descs[0].type == ElementType::Float32) {
        std::vector<float> shared = inputs[0].f;
        REQUIRE(shared.size() == r.f[0].size());
        views[0].data = shared.data();
        outs[0].data = shared.data();
        REQUIRE(kernel->run(rc) == Status::Ok);
        CHECK(std::memcmp(shared.data(), r.f[0].data(), shared.size() * 4) == 0);
    }
    return r;
}

// |got - want| <= tol * max(1, |want|), element by element.
void check_close(const std::vector<float>& got, const std::vector<double>& want, double tol = 1e-5) {
    REQUIRE(got.size() == want.size());
    size_t bad = 0;
    for (size_t k = 0; k < got.size(); ++k) {
        double err = std::fabs((double)got[k] - want[k]);
        if (!(err <= tol * std::max(1.0, std::fabs(want[k])))) {
            if (bad++ < 5) FAIL_CHECK("element " << k << ": got " << got[k] << ", want " << want[k]);
        }
    }
    CHECK(bad == 0);
}

Attributes ints_attr(const char* name, Shape v) {
    return [name, v](Model& m, NodeId n) { REQUIRE(m.set_ints(n, name, Span<const int64_t>(v.data(), v.size())) == Status::Ok); };
}
Attributes int_attr(const char* name, int64_t v) {
    return [name, v](Model& m, NodeId n) { REQUIRE(m.set_int(n, name, v) == Status::Ok); };
}
Attributes float_attr(const char* name, float v) {
    return [name, v](Model& m, NodeId n) { REQUIRE(m.set_float(n, name, v) == Status::Ok); };
}
Attributes string_attr(const char* name, std::string v) {
    return [name, v](Model& m, NodeId n) {
        StringView s = m.arena.copy_string(StringView(v.data(), v.size()));
        REQUIRE(m.set_string(n, name, s) == Status::Ok);
    };
}
Attributes all(std::vector<Attributes> list) {
    return [list](Model& m, NodeId n) { for (const Attributes& a : list) a(m, n); };
}

// ---- naive references (double precision, canonical 3 spatial dims with leading 1s)

struct Geometry {
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1},
            pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
};

// Spatial dims from the end of `shape` (2 leading dims N, C), explicit pads.
Geometry geometry(const Shape& x, const Shape& kernel, Shape strides, Shape dilations, Shape pads) {
    Geometry g;
    size_t n = x.size() - 2;
    for (size_t i = 0; i < n; ++i) {
        size_t j = 3 - n + i;
        g.in[j] = x[2 + i];
        g.k[j] = kernel[i];
        if (!strides.empty()) g.s[j] = strides[i];
        if (!dilations.empty()) g.d[j] = dilations[i];
        if (!pads.empty()) { g.pb[j] = pads[i]; g.pe[j] = pads[n + i]; }
    }
    return g;
}

struct Ref {
    Shape shape;
    std::vector<double> v;
};

Ref conv_ref(const Shape& xs, const std::vector<float>& x, const Shape& ws, const std::vector<float>& w,
             const std::vector<float>* bias, int64_t group, Geometry g) {
    int64_t N = xs[0], C = xs[1], M = ws[0], Cg = C / group, Mg = M / group;
    for (int i = 0; i < 3; ++i) g.out[i] = (g.in[i] + g.pb[i] + g.pe[i] - (g.k[i] - 1) * g.d[i] - 1) / g.s[i] + 1;
    Ref r;
    r.shape = {N, M};
    for (size_t i = 3 - (xs.size() - 2); i < 3; ++i) r.shape.push_back(g.out[i]);
    r.v.assign((size_t)count_of(r.shape), 0.0);
    size_t at = 0;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m)
            for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
                for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
                    for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
                        double sum = bias ? (*bias)[(size_t)m] : 0.0;
                        int64_t grp = m / Mg;
                        for (int64_t c = 0; c < Cg; ++c)
                            for (int64_t a = 0; a < g.k[0]; ++a)
                                for (int64_t b = 0; b < g.k[1]; ++b)
                                    for (int64_t e = 0; e < g.k[2]; ++e) {
                                        int64_t i0 = o0 * g.s[0] - g.pb[0] + a * g.d[0], i1 = o1 * g.s[1] - g.pb[1] + b * g.d[1],
                                                i2 = o2 * g.s[2] - g.pb[2] + e * g.d[2];
                                        if (i0 < 0 || i1 < 0 || i2 < 0 || i0 >= g.in[0] || i1 >= g.in[1] || i2 >= g.in[2]) continue;
                                        double xv = x[(size_t)((((n * C + grp * Cg + c) * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2)];
                                        double wv = w[(size_t)((((m * Cg + c) * g.k[0] + a) * g.k[1] + b) * g.k[2] + e)];
                                        sum += xv * wv;
                                    }
                        r.v[at++] = sum;
                    }
    return r;
}

void check_conv(const Shape& xs, const Shape& ws, bool bias, int64_t group, Shape strides, Shape dilations, Shape pads,
                uint32_t seed, std::string auto_pad = "", Shape ref_pads = {}) {
    In x = random_tensor(xs, seed), w = random_tensor(ws, seed + 1), b = random_tensor({ws[0]}, seed + 2);
    std::vector<Attributes> attrs = {int_attr("group", group)};
    if (!strides.empty()) attrs.push_back(ints_attr("strides", strides));
    if (!dilations.empty()) attrs.push_back(ints_attr("dilations", dilations));
    if (!pads.empty()) attrs.push_back(ints_attr("pads", pads));
    if (!auto_pad.empty()) attrs.push_back(string_attr("auto_pad", auto_pad));
    std::vector<In> inputs = {x, w};
    if (bias) inputs.push_back(b);
    Outcome out = run_op("Conv", inputs, all(attrs));
    REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
    Shape kernel(ws.begin() + 2, ws.end());
    Ref ref = conv_ref(xs, x.f, ws, w.f, bias ? &b.f : nullptr, group,
                       geometry(xs, kernel, strides, dilations, ref_pads.empty() ? pads : ref_pads));
    CHECK(out.shape() == ref.shape);
    check_close(out.f[0], ref.v);
}

}  // namespace

TEST_CASE("nn ops: the kernel table has every nn op") {
    for (const char* op : {"Conv", "ConvTranspose", "MatMul", "Gemm", "BatchNormalization", "InstanceNormalization",
                           "LayerNormalization", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Softmax",
                           "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
                           "ArgMax", "ArgMin", "Resize"}) {
        const OpKernel* k = find_builtin_kernel(op);
        REQUIRE_MESSAGE(k != nullptr, op);
        CHECK((k->prepare != nullptr));
        CHECK((k->run != nullptr));
    }
}

TEST_CASE("nn ops: Conv 2-D with strides, dilations, asymmetric pads and bias") {
    check_conv({2, 3, 7, 6}, {4, 3, 3, 2}, true, 1, {2, 1}, {1, 2}, {1, 0, 2, 1}, 1);
    check_conv({1, 5, 9, 11}, {7, 5, 3, 3}, false, 1, {}, {}, {1, 1, 1, 1}, 2);
}

TEST_CASE("nn ops: Conv groups, depthwise and 1x1") {
    check_conv({2, 4, 8, 7}, {6, 2, 3, 3}, true, 2, {1, 2}, {}, {1, 1, 0, 0}, 3);          // 2 groups
    check_conv({1, 6, 9, 9}, {6, 1, 3, 3}, true, 6, {2, 2}, {2, 2}, {2, 2, 2, 2}, 4);      // depthwise
    check_conv({1, 4, 5, 5}, {8, 1, 3, 3}, false, 4, {}, {}, {1, 1, 1, 1}, 5);            // channel multiplier 2
    check_conv({2, 5, 7, 19}, {5, 1, 3, 5}, true, 5, {}, {}, {1, 2, 0, 1}, 17);           // depthwise, stride 1
    check_conv({1, 3, 23}, {6, 1, 4}, false, 3, {2}, {3}, {3, 2}, 18);                    // depthwise 1-D
    check_conv({1, 2, 4, 5, 6}, {2, 1, 2, 3, 3}, true, 2, {1, 1, 2}, {}, {1, 0, 1, 0, 1, 1}, 19);  // depthwise 3-D
    check_conv({1, 1, 9, 8}, {5, 1, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}, 29);            // one channel, 5 maps: GEMM
    check_conv({2, 5, 6, 7}, {3, 5, 1, 1}, true, 1, {}, {}, {}, 6);                        // direct 1x1
    check_conv({1, 3, 6, 6}, {2, 3, 1, 1}, false, 1, {2, 2}, {}, {}, 7);                   // strided 1x1 (im2col)
}

TEST_CASE("nn ops: Conv large enough for several column blocks and k blocks") {
    check_conv({1, 32, 21, 23}, {19, 32, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}, 8);  // 483 positions, depth 288
    check_conv({2, 40, 20, 20}, {17, 40, 1, 1}, true, 1, {}, {}, {}, 9);            // direct, 400 positions
}

TEST_CASE("nn ops: Conv, ConvTranspose and MatMul give the same bits for any thread count") {
    In x = random_tensor({2, 8, 19, 23}, 300), w = random_tensor({6, 4, 3, 3}, 301), dw = random_tensor({8, 1, 3, 3}, 302);
    In wt = random_tensor({8, 3, 3, 3}, 303);
    for (uint32_t threads : {1u, 3u, 8u}) {
        CAPTURE(threads);
        Outcome one = run_op("Conv", {x, w}, all({int_attr("group", 2), ints_attr("pads", {1, 1, 1, 1})}), 1, 17, 1);
        Outcome many = run_op("Conv", {x, w}, all({int_attr("group", 2), ints_attr("pads", {1, 1, 1, 1})}), 1, 17, threads);
        REQUIRE(one.status == Status::Ok);
        REQUIRE(many.status == Status::Ok);
        CHECK(one.f[0] == many.f[0]);
        one = run_op("Conv", {x, dw}, int_attr("group", 8), 1, 17, 1);
        many = run_op("Conv", {x, dw}, int_attr("group", 8), 1, 17, threads);
        CHECK(one.f[0] == many.f[0]);
        one = run_op("ConvTranspose", {x, wt}, ints_attr("strides", {2, 2}), 1, 17, 1);
        many = run_op("ConvTranspose", {x, wt}, ints_attr("strides", {2, 2}), 1, 17, threads);
        CHECK(one.f[0] == many.f[0]);
        one = run_op("MatMul", {x, random_tensor({23, 40}, 304)}, nullptr, 1, 17, 1);
        many = run_op("MatMul", {x, random_tensor({23, 40}, 304)}, nullptr, 1, 17, threads);
        CHECK(one.f[0] == many.f[0]);
    }
}

TEST_CASE("nn ops: Conv 1-D and 3-D") {
    check_conv({2, 3, 17}, {5, 3, 4}, true, 1, {3}, {2}, {2, 1}, 10);
    check_conv({1, 2, 5, 6, 4}, {3, 2, 2, 3, 2}, true, 1, {1, 2, 1}, {2, 1, 1}, {0, 1, 1, 1, 0, 0}, 11);
    check_conv({1, 4, 4, 5, 3}, {4, 2, 3, 1, 2}, false, 2, {}, {}, {1, 0, 1, 1, 0, 0}, 12);
}

TEST_CASE("nn ops: Conv auto_pad") {
    // SAME_UPPER: out = ceil(in / stride); total pad 1 for in 7, k 3, s 2 (begin 0, end 1)
    check_conv({1, 2, 7, 8}, {3, 2, 3, 3}, true, 1, {2, 2}, {}, {}, 13, "SAME_UPPER", {1, 0, 1, 1});
    check_conv({1, 2, 7, 8}, {3, 2, 3, 3}, true, 1, {2, 2}, {}, {}, 14, "SAME_LOWER", {1, 1, 1, 0});
    check_conv({1, 2, 7, 8}, {3, 2, 3, 3}, true, 1, {2, 2}, {}, {5, 5, 5, 5}, 15, "VALID", {0, 0, 0, 0});
    check_conv({1, 2, 6, 5}, {3, 2, 4, 2}, false, 1, {}, {}, {}, 16, "SAME_UPPER", {1, 0, 2, 1});
}

namespace {

Ref conv_transpose_ref(const Shape& xs, const std::vector<float>& x, const Shape& ws, const std::vector<float>& w,
                       const std::vector<float>* bias, int64_t group, Geometry g, const Shape& out_spatial) {
    int64_t N = xs[0], C = xs[1], Cg = C / group, Mg = ws[1], M = Mg * group;
    size_t n = xs.size() - 2;
    for (size_t i = 0; i < n; ++i) g.out[3 - n + i] = out_spatial[i];
    Ref r;
    r.shape = {N, M};
    for (int64_t d : out_spatial) r.shape.push_back(d);
    r.v.assign((size_t)count_of(r.shape), 0.0);
    int64_t out_plane = g.out[0] * g.out[1] * g.out[2];
    for (int64_t b = 0; b < N; ++b)
        for (int64_t m = 0; m < M; ++m)
            for (int64_t p = 0; p < out_plane; ++p) r.v[(size_t)((b * M + m) * out_plane + p)] = bias ? (*bias)[(size_t)m] : 0.0;
    for (int64_t b = 0; b < N; ++b)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t i0 = 0; i0 < g.in[0]; ++i0)
                for (int64_t i1 = 0; i1 < g.in[1]; ++i1)
                    for (int64_t i2 = 0; i2 < g.in[2]; ++i2) {
                        double xv = x[(size_t)((((b * C + c) * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2)];
                        int64_t grp = c / Cg;
                        for (int64_t m = 0; m < Mg; ++m)
                            for (int64_t a = 0; a < g.k[0]; ++a)
                                for (int64_t e = 0; e < g.k[1]; ++e)
                                    for (int64_t f = 0; f < g.k[2]; ++f) {
                                        int64_t o0 = i0 * g.s[0] - g.pb[0] + a * g.d[0], o1 = i1 * g.s[1] - g.pb[1] + e * g.d[1],
                                                o2 = i2 * g.s[2] - g.pb[2] + f * g.d[2];
                                        if (o0 < 0 || o1 < 0 || o2 < 0 || o0 >= g.out[0] || o1 >= g.out[1] || o2 >= g.out[2]) continue;
                                        double wv = w[(size_t)((((c * Mg + m) * g.k[0] + a) * g.k[1] + e) * g.k[2] + f)];
                                        r.v[(size_t)((((b * M + grp * Mg + m) * g.out[0] + o0) * g.out[1] + o1) * g.out[2] + o2)] += xv * wv;
                                    }
                    }
    return r;
}

// ref_pads: the pads the spec's arithmetic gives; out_spatial: the expected output dims.
void check_conv_transpose(const Shape& xs, const Shape& ws, bool bias, int64_t group, std::vector<Attributes> attrs,
                          Shape strides, Shape dilations, Shape ref_pads, Shape out_spatial, uint32_t seed) {
    In x = random_tensor(xs, seed), w = random_tensor(ws, seed + 1), b = random_tensor({ws[1] * group}, seed + 2);
    attrs.push_back(int_attr("group", group));
    if (!strides.empty()) attrs.push_back(ints_attr("strides", strides));
    if (!dilations.empty()) attrs.push_back(ints_attr("dilations", dilations));
    std::vector<In> inputs = {x, w};
    if (bias) inputs.push_back(b);
    Outcome out = run_op("ConvTranspose", inputs, all(attrs));
    REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
    Shape kernel(ws.begin() + 2, ws.end());
    Ref ref = conv_transpose_ref(xs, x.f, ws, w.f, bias ? &b.f : nullptr, group,
                                 geometry(xs, kernel, strides, dilations, ref_pads), out_spatial);
    CHECK(out.shape() == ref.shape);
    check_close(out.f[0], ref.v);
}

}  // namespace

TEST_CASE("nn ops: ConvTranspose strides, pads, output_padding, dilations, groups") {
    // out = s (in - 1) + output_padding + (k - 1) d + 1 - pads
    check_conv_transpose({2, 3, 4, 5}, {3, 2, 3, 3}, true, 1, {ints_attr("pads", {1, 0, 0, 1})}, {2, 2}, {}, {1, 0, 0, 1},
                         {2 * 3 + 3 - 1, 2 * 4 + 3 - 1}, 20);
    check_conv_transpose({1, 4, 3, 3}, {4, 3, 2, 3}, true, 2,
                         {ints_attr("output_padding", {1, 0}), ints_attr("pads", {0, 1, 0, 1})}, {2, 1}, {1, 2}, {0, 1, 0, 1},
                         {2 * 2 + 1 + 2, 2 + 5 - 2}, 21);
    check_conv_transpose({1, 2, 7}, {2, 3, 3}, false, 1, {}, {3}, {}, {0, 0}, {3 * 6 + 3}, 22);
    check_conv_transpose({1, 2, 3, 2, 2}, {2, 2, 2, 2, 2}, true, 1, {}, {2, 1, 2}, {}, {0, 0, 0, 0, 0, 0}, {6, 3, 4}, 23);
    // many input positions: several GEMM blocks per group
    check_conv_transpose({1, 3, 20, 17}, {3, 4, 3, 3}, true, 1, {ints_attr("pads", {1, 1, 1, 1})}, {}, {}, {1, 1, 1, 1},
                         {20, 17}, 24);
}

TEST_CASE("nn ops: ConvTranspose output_shape and auto_pad") {
    // full output 2*(4-1)+3 = 9; output_shape 8 -> total pad 1 -> begin 1 (not SAME_UPPER), end 0
    check_conv_transpose({1, 2, 4, 4}, {2, 2, 3, 3}, true, 1, {ints_attr("output_shape", {8, 9})}, {2, 2}, {}, {1, 0, 0, 0},
                         {8, 9}, 25);
    check_conv_transpose({1, 2, 4, 4}, {2, 2, 3, 3}, false, 1, {ints_attr("output_shape", {1, 2, 8, 7})}, {2, 2}, {},
                         {1, 1, 0, 1}, {8, 7}, 26);
    // output_shape beyond the full output: total pad -1 and -2 split by floor division -> end pads
    // -1 and -1 (begin 0 and -1): extra positions get the bias only
    check_conv_transpose({1, 1, 3, 3}, {1, 2, 3, 3}, true, 1, {ints_attr("output_shape", {10, 9})}, {3, 2}, {},
                         {0, -1, -1, -1}, {10, 9}, 29);
    // SAME_UPPER: output in * stride = 8, total 1 -> begin 0, end 1
    check_conv_transpose({1, 2, 4, 4}, {2, 2, 3, 3}, true, 1, {string_attr("auto_pad", "SAME_UPPER")}, {2, 2}, {},
                         {0, 0, 1, 1}, {8, 8}, 27);
    check_conv_transpose({1, 2, 4, 4}, {2, 2, 3, 3}, true, 1, {string_attr("auto_pad", "SAME_LOWER")}, {2, 2}, {},
                         {1, 1, 0, 0}, {8, 8}, 28);
}

namespace {

// NumPy matmul of dense row-major operands.
Ref matmul_ref(Shape as, const std::vector<float>& a, Shape bs, const std::vector<float>& b) {
    bool av = as.size() == 1, bv = bs.size() == 1;
    if (av) as.insert(as.begin(), 1);
    if (bv) bs.push_back(1);
    int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
    Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
    size_t rank = std::max(ab.size(), bb.size());
    while (ab.size() < rank) ab.insert(ab.begin(), 1);
    while (bb.size() < rank) bb.insert(bb.begin(), 1);
    Shape ob(rank);
    for (size_t i = 0; i < rank; ++i) ob[i] = std::max(ab[i], bb[i]);
    Ref r;
    r.shape = ob;
    if (!av) r.shape.push_back(M);
    if (!bv) r.shape.push_back(N);
    int64_t batches = count_of(ob);
    for (int64_t t = 0; t < batches; ++t) {
        int64_t ai = 0, bi = 0, rest = t, am = 1, bm = 1;
        for (size_t i = rank; i-- > 0;) {
            int64_t digit = rest % ob[i];
            rest /= ob[i];
            ai += (ab[i] == 1 ? 0 : digit) * am;
            bi += (bb[i] == 1 ? 0 : digit) * bm;
            am *= ab[i];
            bm *= bb[i];
        }
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
                double s = 0;
                for (int64_t k = 0; k < K; ++k) s += (double)a[(size_t)((ai * M + i) * K + k)] * b[(size_t)((bi * K + k) * N + j)];
                r.v.push_back(s);
            }
    }
    return r;
}

void check_matmul(const Shape& as, const Shape& bs, uint32_t seed) {
    In a = random_tensor(as, seed), b = random_tensor(bs, seed + 1);
    Outcome out = run_op("MatMul", {a, b});
    REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
    Ref ref = matmul_ref(as, a.f, bs, b.f);
    CHECK(out.shape() == ref.shape);
    check_close(out.f[0], ref.v);
}

}  // namespace

TEST_CASE("nn ops: MatMul batched, broadcast and 1-D operands") {
    check_matmul({5, 7}, {7, 9}, 30);
    check_matmul({2, 1, 5, 7}, {3, 7, 9}, 31);
    check_matmul({3, 6, 4}, {4, 17}, 32);
    check_matmul({4}, {4, 5}, 33);
    check_matmul({2, 3, 4}, {4}, 34);
    check_matmul({6}, {6}, 35);
    check_matmul({4}, {2, 4, 3}, 36);
    check_matmul({37, 300}, {300, 290}, 37);  // k and column blocks, row tails
    check_matmul({1, 3, 0}, {0, 2}, 38);       // empty inner dim: zeros
    check_matmul({2, 21, 53}, {53, 1}, 39);    // matrix times vector (dot products)
    check_matmul({3, 1, 21, 5}, {1, 2, 5, 1}, 41);
    check_matmul({2, 21, 3}, {3}, 42);
}

TEST_CASE("nn ops: Gemm transA, transB, alpha, beta, broadcast C") {
    struct Case { bool ta, tb; float alpha, beta; Shape c; };
    for (int64_t M : {19, 1, 7, 8}) {   // under 8 rows of A with transB: dot products
    const int64_t K = 23 + M, N = 21 + 2 * M;
    uint32_t seed = 40 + (uint32_t)M;
    CAPTURE(M);
    for (Case k : {Case{false, false, 1.0f, 1.0f, {M, N}}, Case{true, false, 0.5f, 2.0f, {N}}, Case{false, true, 1.5f, -1.0f, {M, 1}},
                   Case{true, true, -2.0f, 0.25f, {1}}, Case{false, true, 1.0f, 1.0f, {}}, Case{true, false, 1.0f, 3.0f, {1, N}}}) {
        CAPTURE(seed);
        In a = random_tensor(k.ta ? Shape{K, M} : Shape{M, K}, seed), b = random_tensor(k.tb ? Shape{N, K} : Shape{K, N}, seed + 1);
        In c = random_tensor(k.c, seed + 2);
        std::vector<In> inputs = {a, b};
        if (!k.c.empty()) inputs.push_back(c);   // {}: no C
        Outcome out = run_op("Gemm", inputs,
                             all({int_attr("transA", k.ta), int_attr("transB", k.tb), float_attr("alpha", k.alpha),
                                  float_attr("beta", k.beta)}));
        REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
        CHECK(out.shape() == Shape{M, N});
        std::vector<double> want;
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
                double s = 0;
                for (int64_t p = 0; p < K; ++p)
                    s += (double)a.f[(size_t)(k.ta ? p * M + i : i * K + p)] * b.f[(size_t)(k.tb ? j * K + p : p * N + j)];
                s *= k.alpha;
                if (k.c.size()) {
                    int64_t ci = k.c.size() == 1 ? (k.c[0] == 1 ? 0 : j) : (k.c[0] == 1 ? 0 : i) * k.c[1] + (k.c[1] == 1 ? 0 : j);
                    s += k.beta * c.f[(size_t)ci];
                }
                want.push_back(s);
            }
        check_close(out.f[0], want);
        seed += 4;
    }
    }
}

TEST_CASE("nn ops: BatchNormalization and InstanceNormalization") {
    Shape xs = {2, 3, 4, 5};
    In x = random_tensor(xs, 50), scale = random_tensor({3}, 51), bias = random_tensor({3}, 52), mean = random_tensor({3}, 53);
    In var = random_tensor({3}, 54);
    for (float& v : var.f) v = std::fabs(v) + 0.1f;
    Outcome out = run_op("BatchNormalization", {x, scale, bias, mean, var}, float_attr("epsilon", 1e-3f));
    REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
    std::vector<double> want;
    for (size_t e = 0; e < x.f.size(); ++e) {
        size_t c = e / 20 % 3;
        want.push_back((x.f[e] - (double)mean.f[c]) / std::sqrt((double)var.f[c] + (double)1e-3f) * scale.f[c] + bias.f[c]);
    }
    check_close(out.f[0], want);

    // training mode: the batch's statistics, and the running ones as outputs 1 and 2
    out = run_op("BatchNormalization", {x, scale, bias, mean, var},
                 all({int_attr("training_mode", 1), float_attr("momentum", 0.75f)}), 3);
    REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
    REQUIRE(out.shape(1) == Shape{3});
    REQUIRE(out.shape(2) == Shape{3});
    want.clear();
    std::vector<double> batch_mean(3, 0.0), batch_var(3, 0.0), running_mean, running_var;
    for (size_t e = 0; e < x.f.size(); ++e) batch_mean[e / 20 % 3] += x.f[e] / 40.0;
    for (size_t e = 0; e < x.f.size(); ++e) {
        double d = x.f[e] - batch_mean[e / 20 % 3];
        batch_var[e / 20 % 3] += d * d / 40.0;
    }
    for (size_t e = 0; e < x.f.size(); ++e) {
        size_t c = e / 20 % 3;
        want.push_back((x.f[e] - batch_mean[c]) / std::sqrt(batch_var[c] + (double)1e-5f) * scale.f[c] + bias.f[c]);
    }
    for (size_t c = 0; c < 3; ++c) {
        running_mean.push_back(mean.f[c] * 0.75 + batch_mean[c] * 0.25);
        running_var.push_back(var.f[c] * 0.75 + batch_var[c] * 0.25);
    }
    check_close(out.f[0], want);
    check_close(out.f[1], running_mean);
    check_close(out.f[2], running_var);

    out = run_op("InstanceNormalization", {x, scale, bias});
    REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
    want.clear();
    for (size_t plane = 0; plane < 6; ++plane) {
        double m = 0, v = 0;
        for (size_t i = 0; i < 20; ++i) m += x.f[plane * 20 + i] / 20.0;
        for (size_t i = 0; i < 20; ++i) v += (x.f[plane * 20 + i] - m) * (x.f[plane * 20 + i] - m) / 20.0;
        for (size_t i = 0; i < 20; ++i)
            want.push_back((x.f[plane * 20 + i] - m) / std::sqrt(v + (double)1e-5f) * scale.f[plane % 3] + bias.f[plane % 3]);
    }
    check_close(out.f[0], want);
}

TEST_CASE("nn ops: LayerNormalization axis, broadcast Scale and B, Mean and InvStdDev outputs") {
    Shape xs = {2, 3, 4, 5};
    In x = random_tensor(xs, 60);
    for (int axis : {-1, 1, 2}) {
        CAPTURE(axis);
        int a = axis < 0 ? axis + 4 : axis;
        Shape row(xs.begin() + a, xs.end());
        int64_t inner = count_of(row), outer = count_of(xs) / inner;
        Shape scale_shape = row;
        scale_shape[0] = 1;    // broadcast along the first normalized dim
        In scale = random_tensor(scale_shape, 61), bias = random_tensor({row.back()}, 62);
        Outcome out = run_op("LayerNormalization", {x, scale, bias}, all({int_attr("axis", axis), float_attr("epsilon", 1e-4f)}), 3);
        REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
        Shape stat_shape = xs;
        for (size_t d = (size_t)a; d < 4; ++d) stat_shape[d] = 1;
        CHECK(out.shape(1) == stat_shape);
        CHECK(out.shape(2) == stat_shape);
        std::vector<double> want, means, invs;
        int64_t scale_inner = inner / row[0];
        for (int64_t r = 0; r < outer; ++r) {
            double m = 0, v = 0;
            for (int64_t i = 0; i < inner; ++i) m += x.f[(size_t)(r * inner + i)] / (double)inner;
            for (int64_t i = 0; i < inner; ++i) v += std::pow(x.f[(size_t)(r * inner + i)] - m, 2) / (double)inner;
            double inv = 1.0 / std::sqrt(v + (double)1e-4f);
            means.push_back(m);
            invs.push_back(inv);
            for (int64_t i = 0; i < inner; ++i)
                want.push_back((x.f[(size_t)(r * inner + i)] - m) * inv * scale.f[(size_t)(i % scale_inner)] +
                               bias.f[(size_t)(i % row.back())]);
        }
        check_close(out.f[0], want);
        check_close(out.f[1], means);
        check_close(out.f[2], invs);
    }
    Outcome out = run_op("LayerNormalization", {x, random_tensor({5}, 63)});  // no B, one output
    REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
    CHECK(out.shape() == xs);
}

namespace {

// Max or average pool reference; ceil_mode, count_include_pad; indices for max.
Ref pool_ref(const Shape& xs, const std::vector<float>& x, bool max, Geometry g, bool ceil_mode, bool include_pad,
             std::vector<int64_t>* indices) {
    size_t n = xs.size() - 2;
    for (int i = 0; i < 3; ++i) {
        int64_t ext = (g.k[i] - 1) * g.d[i] + 1, span = g.in[i] + g.pb[i] + g.pe[i] - ext;
        g.out[i] = (int64_t)(ceil_mode ? std::ceil((double)span / (double)g.s[i]) : std::floor((double)span / (double)g.s[i])) + 1;
        if (ceil_mode && (g.out[i] - 1) * g.s[i] >= g.in[i] + g.pb[i]) --g.out[i];
    }
    Ref r;
    r.shape = {xs[0], xs[1]};
    for (size_t i = 3 - n; i < 3; ++i) r.shape.push_back(g.out[i]);
    int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
    for (int64_t plane = 0; plane < xs[0] * xs[1]; ++plane)
        for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
            for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
                for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
                    double best = -INFINITY, sum = 0;
                    int64_t best_at = -1, valid = 0, padded = 0;
                    for (int64_t a = 0; a < g.k[0]; ++a)
                        for (int64_t b = 0; b < g.k[1]; ++b)
                            for (int64_t e = 0; e < g.k[2]; ++e) {
                                int64_t i[3] = {o0 * g.s[0] - g.pb[0] + a * g.d[0], o1 * g.s[1] - g.pb[1] + b * g.d[1],
                                                o2 * g.s[2] - g.pb[2] + e * g.d[2]};
                                bool in_pad = true, inside = true;
                                for (int d = 0; d < 3; ++d) {
                                    in_pad = in_pad && i[d] < g.in[d] + g.pe[d];
                                    inside = inside && i[d] >= 0 && i[d] < g.in[d];
                                }
                                padded += in_pad;
                                if (!inside) continue;
                                int64_t at = plane * in_plane + (i[0] * g.in[1] + i[1]) * g.in[2] + i[2];
                                double v = x[(size_t)at];
                                if (v > best) { best = v; best_at = at; }
                                sum += v;
                                ++valid;
                            }
                    r.v.push_back(max ? best : sum / (double)(include_pad ? padded : valid));
                    if (indices) indices->push_back(best_at);
                }
    return r;
}

void check_pool(bool max, const Shape& xs, Shape kernel, Shape strides, Shape dilations, Shape pads, bool ceil_mode,
                bool include_pad, uint32_t seed, std::string auto_pad = "", Shape ref_pads = {}) {
    In x = random_tensor(xs, seed);
    std::vector<Attributes> attrs = {ints_attr("kernel_shape", kernel), int_attr("ceil_mode", ceil_mode)};
    if (!strides.empty()) attrs.push_back(ints_attr("strides", strides));
    if (!dilations.empty()) attrs.push_back(ints_attr("dilations", dilations));
    if (!pads.empty()) attrs.push_back(ints_attr("pads", pads));
    if (!auto_pad.empty()) attrs.push_back(string_attr("auto_pad", auto_pad));
    if (!max) attrs.push_back(int_attr("count_include_pad", include_pad));
    Outcome out = run_op(max ? "MaxPool" : "AveragePool", {x}, all(attrs), max ? 2 : 1);
    REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
    std::vector<int64_t> indices;
    Ref ref = pool_ref(xs, x.f, max, geometry(xs, kernel, strides, dilations, ref_pads.empty() ? pads : ref_pads),
                       ceil_mode, include_pad, max ? &indices : nullptr);
    CHECK(out.shape() == ref.shape);
    check_close(out.f[0], ref.v);
    if (max) {
        CHECK(out.shape(1) == ref.shape);
        CHECK(out.i[1] == indices);
    }
}

}  // namespace

TEST_CASE("nn ops: MaxPool pads, strides, dilations, ceil_mode, Indices") {
    check_pool(true, {2, 3, 7, 8}, {3, 3}, {2, 2}, {}, {1, 1, 1, 1}, false, false, 70);
    check_pool(true, {1, 2, 7, 8}, {3, 2}, {2, 3}, {}, {1, 0, 1, 1}, true, false, 71);
    check_pool(true, {1, 2, 9, 9}, {2, 2}, {1, 2}, {2, 2}, {1, 1, 0, 1}, true, false, 72);
    check_pool(true, {2, 3, 11}, {3}, {2}, {}, {1, 1}, false, false, 73);
    check_pool(true, {1, 2, 5, 4, 6}, {2, 2, 3}, {2, 1, 2}, {}, {0, 1, 1, 1, 0, 1}, true, false, 74);
    check_pool(true, {1, 2, 7, 6}, {3, 3}, {2, 2}, {}, {}, false, false, 75, "SAME_UPPER", {1, 0, 1, 1});
    check_pool(true, {1, 2, 7, 6}, {3, 3}, {2, 2}, {}, {}, false, false, 76, "SAME_LOWER", {1, 1, 1, 0});
    // one output: Indices not produced
    Outcome out = run_op("MaxPool", {random_tensor({1, 1, 4, 4}, 77)}, ints_attr("kernel_shape", {2, 2}));
    REQUIRE(out.status == Status::Ok);
    CHECK(out.shape() == Shape{1, 1, 3, 3});
}

TEST_CASE("nn ops: MaxPool Indices in column-major order (storage_order=1)") {
    Shape xs = {2, 3, 5, 7};
    In x = random_tensor(xs, 78);
    Outcome out = run_op("MaxPool", {x}, all({ints_attr("kernel_shape", {2, 3}), ints_attr("strides", {2, 2}),
                                                int_attr("storage_order", 1)}), 2);
    REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
    std::vector<int64_t> indices;
    pool_ref(xs, x.f, true, geometry(xs, {2, 3}, {2, 2}, {}, {}), false, false, &indices);
    for (int64_t& i : indices) {  // row-major (plane, h, w) to plane * HW + w * H + h
        int64_t plane = i / 35, h = i % 35 / 7, w = i % 7;
        i = plane * 35 + w * 5 + h;
    }
    CHECK(out.i[1] == indices);
}

TEST_CASE("nn ops: AveragePool count_include_pad and ceil_mode") {
    for (bool include : {false, true})
        for (bool ceil_mode : {false, true}) {
            CAPTURE(include);
            CAPTURE(ceil_mode);
            check_pool(false, {2, 3, 7, 8}, {3, 3}, {2, 2}, {}, {1, 1, 1, 1}, ceil_mode, include, 80);
            check_pool(false, {1, 2, 8, 7}, {2, 3}, {3, 2}, {}, {1, 0, 0, 2}, ceil_mode, include, 81);
            check_pool(false, {1, 2, 10}, {4}, {3}, {}, {2, 1}, ceil_mode, include, 82);
            check_pool(false, {1, 1, 5, 6, 4}, {2, 3, 2}, {2, 2, 1}, {}, {1, 1, 0, 0, 1, 1}, ceil_mode, include, 83);
        }
}

TEST_CASE("nn ops: GlobalAveragePool and GlobalMaxPool") {
    Shape xs = {2, 3, 5, 7};
    In x = random_tensor(xs, 90);
    Outcome avg = run_op("GlobalAveragePool", {x}), mx = run_op("GlobalMaxPool", {x});
    REQUIRE(avg.status == Status::Ok);
    REQUIRE(mx.status == Status::Ok);
    CHECK(avg.shape() == Shape{2, 3, 1, 1});
    CHECK(mx.shape() == Shape{2, 3, 1, 1});
    std::vector<double> want_avg, want_max;
    for (size_t p = 0; p < 6; ++p) {
        double s = 0, m = -INFINITY;
        for (size_t i = 0; i < 35; ++i) { s += x.f[p * 35 + i]; m = std::max(m, (double)x.f[p * 35 + i]); }
        want_avg.push_back(s / 35);
        want_max.push_back(m);
    }
    check_close(avg.f[0], want_avg);
    check_close(mx.f[0], want_max);
    Outcome one_d = run_op("GlobalAveragePool", {random_tensor({1, 2, 9}, 91)});
    REQUIRE(one_d.status == Status::Ok);
    CHECK(one_d.shape() == Shape{1, 2, 1});
}

TEST_CASE("nn ops: Softmax and LogSoftmax, coerced to 2-D before opset 13, per axis from 13") {
    Shape xs = {2, 3, 4, 5};
    In x = random_tensor(xs, 100);
    for (float& v : x.f) v *= 20.0f;  // large logits: the maximum must be subtracted
    for (bool log : {false, true})
        for (uint32_t opset : {11u, 13u})
            for (int64_t axis : {1, -1, 2, 0}) {
                CAPTURE(log);
                CAPTURE(opset);
                CAPTURE(axis);
                Outcome out = run_op(log ? "LogSoftmax" : "Softmax", {x}, int_attr("axis", axis), 1, opset);
                REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
                int a = (int)(axis < 0 ? axis + 4 : axis);
                int64_t outer = count_of(Shape(xs.begin(), xs.begin() + a));
                int64_t count = opset >= 13 ? xs[(size_t)a] : count_of(Shape(xs.begin() + a, xs.end()));
                int64_t inner = opset >= 13 ? count_of(Shape(xs.begin() + a + 1, xs.end())) : 1;
                std::vector<double> want(x.f.size());
                for (int64_t o = 0; o < outer; ++o)
                    for (int64_t i = 0; i < inner; ++i) {
                        double m = -INFINITY, s = 0;
                        for (int64_t k = 0; k < count; ++k) m = std::max(m, (double)x.f[(size_t)((o * count + k) * inner + i)]);
                        for (int64_t k = 0; k < count; ++k) s += std::exp(x.f[(size_t)((o * count + k) * inner + i)] - m);
                        for (int64_t k = 0; k < count; ++k) {
                            size_t at = (size_t)((o * count + k) * inner + i);
                            want[at] = log ? x.f[at] - m - std::log(s) : std::exp(x.f[at] - m) / s;
                        }
                    }
                check_close(out.f[0], want, 2e-5);
            }
    Outcome defaults = run_op("Softmax", {x}, nullptr, 1, 11);   // axis 1: rows of 60
    REQUIRE(defaults.status == Status::Ok);
    double row = 0;
    for (size_t i = 0; i < 60; ++i) row += defaults.f[0][i];
    CHECK(row == doctest::Approx(1.0).epsilon(1e-5));
}

namespace {

Ref reduce_ref(const char* op, const Shape& xs, const std::vector<float>& x, std::vector<int64_t> axes, bool keep) {
    std::vector<bool> reduced(xs.size(), axes.empty());
    for (int64_t a : axes) reduced[(size_t)(a < 0 ? a + (int64_t)xs.size() : a)] = true;
    Shape kept = xs;
    Ref r;
    for (size_t d = 0; d < xs.size(); ++d) {
        if (reduced[d]) kept[d] = 1;
        if (!reduced[d] || keep) r.shape.push_back(kept[d]);
    }
    std::string name = op;
    std::vector<std::vector<double>> groups((size_t)count_of(kept));
    for (int64_t e = 0; e < count_of(xs); ++e) {
        int64_t rest = e, o = 0, mul = 1;
        for (size_t d = xs.size(); d-- > 0;) {
            int64_t digit = rest % xs[d];
            rest /= xs[d];
            o += (reduced[d] ? 0 : digit) * mul;
            mul *= kept[d];
        }
        groups[(size_t)o].push_back(x[(size_t)e]);
    }
    for (const std::vector<double>& g : groups) {
        double v = name == "ReduceMax" ? -INFINITY : name == "ReduceMin" ? INFINITY : name == "ReduceProd" ? 1 : 0;
        for (double e : g) {
            if (name == "ReduceMax") v = std::max(v, e);
            else if (name == "ReduceMin") v = std::min(v, e);
            else if (name == "ReduceProd") v *= e;
            else if (name == "ReduceL2") v += e * e;
            else v += e;
        }
        if (name == "ReduceMean") v /= (double)g.size();
        if (name == "ReduceL2") v = std::sqrt(v);
        r.v.push_back(v);
    }
    return r;
}

}  // namespace

TEST_CASE("nn ops: ReduceMean/Sum/Max/Min/Prod/L2 with axes and keepdims") {
    Shape xs = {3, 4, 5, 2};
    In x = random_tensor(xs, 110);
    for (float& v : x.f) v += 1.5f;  // ReduceProd stays well scaled
    uint32_t count = 0;
    for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2"})
        for (std::vector<int64_t> axes : {std::vector<int64_t>{1}, {0, 2}, {-1, 1}, {}, {0, 1, 2, 3}, {3, 0}})
            for (bool keep : {true, false}) {
                CAPTURE(op);
                CAPTURE(keep);
                CAPTURE(axes.size());
                std::vector<Attributes> attrs = {int_attr("keepdims", keep)};
                if (!axes.empty()) attrs.push_back(ints_attr("axes", axes));
                Outcome out = run_op(op, {x}, all(attrs), 1, 11);
                REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
                Ref ref = reduce_ref(op, xs, x.f, axes, keep);
                CHECK(out.shape() == ref.shape);
                check_close(out.f[0], ref.v, 2e-5);
                ++count;
            }
    CHECK(count == 72);
}

TEST_CASE("nn ops: ReduceSum opset 13 reads axes from an input; noop_with_empty_axes") {
    Shape xs = {2, 3, 4};
    In x = random_tensor(xs, 120);
    Outcome out = run_op("ReduceSum", {x, int64s({2}, {0, -1})}, int_attr("keepdims", 0), 1, 13);
    REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
    Ref ref = reduce_ref("ReduceSum", xs, x.f, {0, 2}, false);
    CHECK(out.shape() == Shape{3});
    check_close(out.f[0], ref.v);
    // the axes attribute is not read at opset 13: absent axes input reduces everything
    out = run_op("ReduceSum", {x}, ints_attr("axes", {1}), 1, 13);
    REQUIRE(out.status == Status::Ok);
    CHECK(out.shape() == Shape{1, 1, 1});
    out = run_op("ReduceSum", {x, int64s({0}, {})}, int_attr("noop_with_empty_axes", 1), 1, 13);
    REQUIRE(out.status == Status::Ok);
    CHECK(out.shape() == xs);
    CHECK(out.f[0] == x.f);
}

TEST_CASE("nn ops: ArgMax and ArgMin with keepdims and select_last_index") {
    Shape xs = {3, 4, 5};
    In x = random_tensor(xs, 130);
    for (float& v : x.f) v = std::round(v * 2.0f);   // many ties
    for (const char* op : {"ArgMax", "ArgMin"})
        for (int64_t axis : {0, 1, -1})
            for (bool keep : {true, false})
                for (bool last : {false, true}) {
                    CAPTURE(op);
                    CAPTURE(axis);
                    Outcome out = run_op(op, {x}, all({int_attr("axis", axis), int_attr("keepdims", keep), int_attr("select_last_index", last)}));
                    REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
                    CHECK(out.descs[0].type == ElementType::Int64);
                    int a = (int)(axis < 0 ? axis + 3 : axis);
                    Shape want_shape = xs;
                    if (keep) want_shape[(size_t)a] = 1;
                    else want_shape.erase(want_shape.begin() + a);
                    CHECK(out.shape() == want_shape);
                    int64_t outer = count_of(Shape(xs.begin(), xs.begin() + a)), n = xs[(size_t)a];
                    int64_t inner = count_of(Shape(xs.begin() + a + 1, xs.end()));
                    std::vector<int64_t> want;
                    for (int64_t o = 0; o < outer; ++o)
                        for (int64_t i = 0; i < inner; ++i) {
                            int64_t best = 0;
                            for (int64_t k = 0; k < n; ++k) {
                                float v = x.f[(size_t)((o * n + k) * inner + i)], b = x.f[(size_t)((o * n + best) * inner + i)];
                                bool is_max = std::string(op) == "ArgMax";
                                if (is_max ? (v > b || (last && v == b)) : (v < b || (last && v == b))) best = k;
                            }
                            want.push_back(best);
                        }
                    CHECK(out.i[0] == want);
                }
}

namespace {

// Resize reference straight from the spec: per axis the original coordinate, then the
// nearest rounding or 1-D linear interpolation between floor and floor+1 (clamped).
// length_resized is in * scale, not floored (the ONNX reference's output_width).
double original_coordinate(const std::string& mode, int64_t o, double scale, int64_t in) {
    double length = (double)in * scale;
    if (mode == "half_pixel") return (o + 0.5) / scale - 0.5;
    if (mode == "pytorch_half_pixel") return length > 1 ? (o + 0.5) / scale - 0.5 : 0.0;
    if (mode == "align_corners") return length == 1 ? 0.0 : o * (double)(in - 1) / (length - 1);
    if (mode == "tf_half_pixel_for_nn") return (o + 0.5) / scale;
    return o / scale;
}

int64_t nearest(const std::string& rounding, double x, int64_t in) {
    double r;
    if (rounding == "round_prefer_floor") r = x == std::floor(x) + 0.5 ? std::floor(x) : std::round(x);
    else if (rounding == "round_prefer_ceil") r = x == std::floor(x) + 0.5 ? std::ceil(x) : std::round(x);
    else if (rounding == "floor") r = std::floor(x);
    else r = std::ceil(x);
    return std::min(std::max((int64_t)r, (int64_t)0), in - 1);
}

Ref resize_ref(const Shape& xs, const std::vector<float>& x, const Shape& out_shape, const std::vector<double>& scales,
               bool linear, const std::string& transform, const std::string& rounding) {
    Ref r;
    r.shape = out_shape;
    size_t rank = xs.size();
    for (int64_t e = 0; e < count_of(out_shape); ++e) {
        Shape at(rank);
        int64_t rest = e;
        for (size_t d = rank; d-- > 0;) { at[d] = rest % out_shape[d]; rest /= out_shape[d]; }
        // per axis: up to two (index, weight) taps
        std::vector<std::vector<std::pair<int64_t, double>>> taps(rank);
        for (size_t d = 0; d < rank; ++d) {
            double c = original_coordinate(transform, at[d], scales[d], xs[d]);
            bool interpolate = linear && d + 2 >= rank;
            if (!interpolate) { taps[d] = {{nearest(rounding, c, xs[d]), 1.0}}; continue; }
            int64_t lo = (int64_t)std::floor(c);
            double ratio = c - (double)lo;
            auto clamp = [&](int64_t i) { return std::min(std::max(i, (int64_t)0), xs[d] - 1); };
            taps[d] = {{clamp(lo), 1.0 - ratio}, {clamp(lo + 1), ratio}};
        }
        double sum = 0;
        std::vector<size_t> pick(rank, 0);
        while (true) {
            double w = 1;
            int64_t offset = 0;
            for (size_t d = 0; d < rank; ++d) { w *= taps[d][pick[d]].second; offset = offset * xs[d] + taps[d][pick[d]].first; }
            sum += w * x[(size_t)offset];
            size_t d = rank;
            while (d-- > 0 && ++pick[d] == taps[d].size()) pick[d] = 0;
            if (d == (size_t)-1) break;
        }
        r.v.push_back(sum);
    }
    return r;
}

void check_resize(const Shape& xs, const std::vector<float>& scales, const Shape& sizes, bool linear,
                  const std::string& transform, const std::string& rounding, uint32_t seed, uint32_t opset = 13) {
    In x = random_tensor(xs, seed);
    std::vector<In> inputs = {x};
    if (opset == 10) inputs.push_back(constant_floats({(int64_t)scales.size()}, scales));
    else {
        inputs.push_back(absent());
        inputs.push_back(scales.empty() ? absent() : constant_floats({(int64_t)scales.size()}, scales));
        if (!sizes.empty()) inputs.push_back(int64s({(int64_t)sizes.size()}, sizes));
    }
    Outcome out = run_op("Resize", inputs,
                         all({string_attr("mode", linear ? "linear" : "nearest"),
                              string_attr("coordinate_transformation_mode", transform), string_attr("nearest_mode", rounding)}),
                         1, opset);
    REQUIRE_MESSAGE(out.status == Status::Ok, out.error);
    Shape out_shape = sizes;
    std::vector<double> s;
    for (size_t d = 0; d < xs.size(); ++d) {
        if (sizes.empty()) out_shape.push_back((int64_t)std::floor(xs[d] * (double)scales[d]));
        s.push_back(sizes.empty() ? (double)scales[d] : (double)sizes[d] / (double)xs[d]);
    }
    Ref ref = resize_ref(xs, x.f, out_shape, s, linear, opset == 10 ? "asymmetric" : transform, opset == 10 ? "floor" : rounding);
    CHECK(out.shape() == ref.shape);
    check_close(out.f[0], ref.v);
}

}  // namespace

TEST_CASE("nn ops: Resize nearest, every nearest_mode and coordinate transformation") {
    uint32_t seed = 140;
    for (const char* transform : {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"})
        for (const char* rounding : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}) {
            CAPTURE(transform);
            CAPTURE(rounding);
            check_resize({1, 2, 4, 5}, {1.0f, 1.0f, 2.0f, 1.5f}, {}, false, transform, rounding, seed++);
            check_resize({2, 3, 7}, {1.0f, 1.0f, 0.6f}, {}, false, transform, rounding, seed++);
            check_resize({1, 1, 3, 4}, {}, {1, 1, 7, 3}, false, transform, rounding, seed++);
            check_resize({2, 2, 3, 2, 2}, {}, {2, 1, 5, 4, 3}, false, transform, rounding, seed++);
        }
    for (const char* rounding : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}) {   // Resize-11 only
        CAPTURE(rounding);
        check_resize({1, 2, 4, 5}, {1.0f, 1.0f, 2.0f, 1.5f}, {}, false, "tf_half_pixel_for_nn", rounding, seed++, 11);
        check_resize({1, 1, 3, 4}, {}, {1, 1, 7, 3}, false, "tf_half_pixel_for_nn", rounding, seed++, 11);
    }
}

TEST_CASE("nn ops: Resize linear for 2-D and 4-D inputs") {
    uint32_t seed = 200;
    for (const char* transform : {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"}) {
        CAPTURE(transform);
        check_resize({2, 3, 4, 5}, {1.0f, 1.0f, 2.0f, 1.5f}, {}, true, transform, "round_prefer_floor", seed++);
        check_resize({1, 2, 6, 7}, {1.0f, 1.0f, 0.5f, 0.75f}, {}, true, transform, "round_prefer_floor", seed++);
        check_resize({5, 3}, {}, {8, 1}, true, transform, "round_prefer_floor", seed++);
        check_resize({1, 1, 3, 3}, {}, {1, 1, 1, 5}, true, transform, "round_prefer_floor", seed++);
        check_resize({1, 1, 2, 4}, {1.0f, 1.0f, 0.6f, 0.6f}, {}, true, transform, "round_prefer_floor", seed++);  // length 2.4
    }
}

TEST_CASE("nn ops: Resize-10 is Upsample (asymmetric, nearest rounds down)") {
    check_resize({1, 2, 3, 4}, {1.0f, 1.0f, 2.5f, 1.7f}, {}, false, "", "", 220, 10);
    check_resize({1, 2, 3, 4}, {1.0f, 1.0f, 2.5f, 1.7f}, {}, true, "", "", 221, 10);
}

// ---- bad inputs: the exact Status (and no crash) for each kind

namespace {
Status prepare_status(const char* op, const std::vector<In>& inputs, const Attributes& attributes = nullptr,
                      uint32_t num_outputs = 1, uint32_t opset = 17) {
    return run_op(op, inputs, attributes, num_outputs, opset).status;
}
}  // namespace

TEST_CASE("nn ops: Conv and ConvTranspose refuse bad inputs") {
    In x = random_tensor({1, 4, 6, 6}, 1), w = random_tensor({4, 2, 3, 3}, 2);
    CHECK(prepare_status("Conv", {x, w}, int_attr("group", 2)) == Status::Ok);
    CHECK(prepare_status("Conv", {x, w}, int_attr("group", 0)) == Status::InvalidArgument);
    CHECK(prepare_status("Conv", {x, w}, int_attr("group", -2)) == Status::InvalidArgument);
    CHECK(prepare_status("Conv", {x, w}) == Status::InvalidArgument);                    // 4 channels, W wants 2
    CHECK(prepare_status("Conv", {x, random_tensor({3, 2, 3, 3}, 3)}, int_attr("group", 2)) == Status::InvalidArgument);
    CHECK(prepare_status("Conv", {x, w}, all({int_attr("group", 2), ints_attr("strides", {0, 1})})) == Status::InvalidArgument);
    CHECK(prepare_status("Conv", {x, w}, all({int_attr("group", 2), ints_attr("strides", {1})})) == Status::InvalidArgument);
    CHECK(prepare_status("Conv", {x, w}, all({int_attr("group", 2), ints_attr("dilations", {1, 0})})) == Status::InvalidArgument);
    CHECK(prepare_status("Conv", {x, w}, all({int_attr("group", 2), ints_attr("pads", {-1, 0, 0, 0})})) == Status::InvalidArgument);
    CHECK(prepare_status("Conv", {x, w}, all({int_attr("group", 2), ints_attr("dilations", {1, INT64_MAX / 2})})) == Status::InvalidArgument);
    CHECK(prepare_status("Conv", {x, w}, all({int_attr("group", 2), ints_attr("pads", {0, INT64_MAX, 0, 0})})) == Status::InvalidArgument);
    CHECK(prepare_status("Conv", {x, w}, all({int_attr("group", 2), string_attr("auto_pad", "SAME")})) == Status::InvalidArgument);
    CHECK(prepare_status("Conv", {x, w}, all({int_attr("group", 2), ints_attr("kernel_shape", {3, 2})})) == Status::InvalidArgument);
    CHECK(prepare_status("Conv", {x, random_tensor({4, 2, 7, 3}, 4)}, int_attr("group", 2)) == Status::InvalidArgument);  // window > input
    CHECK(prepare_status("Conv", {x, w, random_tensor({3}, 5)}, int_attr("group", 2)) == Status::InvalidArgument);   // bias size
    CHECK(prepare_status("Conv", {x}) == Status::InvalidArgument);                                                   // input count
    CHECK(prepare_status("Conv", {random_tensor({4, 6, 6}, 6), w}) == Status::InvalidArgument);                      // rank
    CHECK(prepare_status("Conv", {int64s({1, 4, 6, 6}, std::vector<int64_t>(144, 1), false), w}) == Status::Unsupported);
    CHECK(prepare_status("Conv", {random_tensor({1, 1, 2, 2, 2, 2}, 7), random_tensor({1, 1, 1, 1, 1, 1}, 8)}) == Status::Unsupported);

    In wt = random_tensor({4, 3, 3, 3}, 9);
    CHECK(prepare_status("ConvTranspose", {x, wt}) == Status::Ok);
    CHECK(prepare_status("ConvTranspose", {x, wt}, int_attr("group", 0)) == Status::InvalidArgument);
    CHECK(prepare_status("ConvTranspose", {x, wt}, int_attr("group", 3)) == Status::InvalidArgument);
    CHECK(prepare_status("ConvTranspose", {x, random_tensor({3, 3, 3, 3}, 10)}) == Status::InvalidArgument);
    CHECK(prepare_status("ConvTranspose", {x, wt}, ints_attr("strides", {0, 1})) == Status::InvalidArgument);
    CHECK(prepare_status("ConvTranspose", {x, wt}, ints_attr("output_padding", {1, 0})) == Status::InvalidArgument);  // >= stride 1
    CHECK(prepare_status("ConvTranspose", {x, wt}, ints_attr("output_shape", {-1, 8})) == Status::InvalidArgument);
    CHECK(prepare_status("ConvTranspose", {x, wt}, ints_attr("output_shape", {8})) == Status::InvalidArgument);
    CHECK(prepare_status("ConvTranspose", {x, wt}, ints_attr("pads", {5, 5, 5, 5})) == Status::InvalidArgument);
    CHECK(prepare_status("ConvTranspose", {x, wt}, ints_attr("strides", {INT64_MAX, 1})) == Status::InvalidArgument);
    CHECK(prepare_status("ConvTranspose", {x, wt}, ints_attr("output_shape", {INT64_MAX, 8})) == Status::InvalidArgument);
}

TEST_CASE("nn ops: MatMul and Gemm refuse bad inputs") {
    CHECK(prepare_status("MatMul", {random_tensor({3, 4}, 1), random_tensor({5, 2}, 2)}) == Status::InvalidArgument);
    CHECK(prepare_status("MatMul", {random_tensor({2, 3, 4}, 1), random_tensor({3, 4, 2}, 2)}) == Status::InvalidArgument);
    CHECK(prepare_status("MatMul", {random_tensor({}, 1), random_tensor({3}, 2)}) == Status::InvalidArgument);
    CHECK(prepare_status("MatMul", {random_tensor({3, 4}, 1)}) == Status::InvalidArgument);
    CHECK(prepare_status("MatMul", {random_tensor({3, 4}, 1), int64s({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}, false)}) == Status::Unsupported);
    In a = random_tensor({3, 4}, 1), b = random_tensor({4, 5}, 2);
    CHECK(prepare_status("Gemm", {a, b, random_tensor({5}, 3)}) == Status::Ok);
    CHECK(prepare_status("Gemm", {a, b, random_tensor({4}, 3)}) == Status::InvalidArgument);
    CHECK(prepare_status("Gemm", {a, b, random_tensor({1, 3, 5}, 3)}) == Status::InvalidArgument);
    CHECK(prepare_status("Gemm", {a, b}, int_attr("transB", 1)) == Status::InvalidArgument);
    CHECK(prepare_status("Gemm", {random_tensor({3}, 1), b}) == Status::InvalidArgument);
    CHECK(prepare_status("Gemm", {a, b}, nullptr, 1, 9) == Status::InvalidArgument);   // C required before opset 11
    CHECK(prepare_status("Gemm", {a, b}, nullptr, 1, 11) == Status::Ok);
}

TEST_CASE("nn ops: normalizations refuse bad inputs") {
    In x = random_tensor({2, 3, 4}, 1), p = random_tensor({3}, 2), q = random_tensor({4}, 3);
    CHECK(prepare_status("BatchNormalization", {x, p, p, p, p}) == Status::Ok);
    CHECK(prepare_status("BatchNormalization", {x, p, p, q, p}) == Status::InvalidArgument);
    CHECK(prepare_status("BatchNormalization", {x, p, p, p}) == Status::InvalidArgument);
    CHECK(prepare_status("BatchNormalization", {x, p, p, p, p}, int_attr("training_mode", 1), 3) == Status::Ok);
    CHECK(prepare_status("BatchNormalization", {x, p, p, p, p}, int_attr("training_mode", 1), 4) == Status::InvalidArgument);
    CHECK(prepare_status("BatchNormalization", {x, p, p, p, p}, nullptr, 3) == Status::InvalidArgument);
    CHECK(prepare_status("BatchNormalization", {x, p, p, p, p}, nullptr, 3, 9) == Status::Unsupported);
    CHECK(prepare_status("BatchNormalization", {x, p, p, p, p}, int_attr("spatial", 0), 1, 7) == Status::Unsupported);
    CHECK(prepare_status("InstanceNormalization", {x, p, q}) == Status::InvalidArgument);
    CHECK(prepare_status("InstanceNormalization", {random_tensor({2, 3}, 4), p, p}) == Status::InvalidArgument);
    CHECK(prepare_status("LayerNormalization", {x, q}, int_attr("axis", 3)) == Status::InvalidArgument);
    CHECK(prepare_status("LayerNormalization", {x, q}, int_attr("axis", -4)) == Status::InvalidArgument);
    CHECK(prepare_status("LayerNormalization", {x, p}) == Status::InvalidArgument);      // scale 3 vs row 4
    CHECK(prepare_status("LayerNormalization", {x, random_tensor({2, 4}, 5)}) == Status::InvalidArgument);
    CHECK(prepare_status("LayerNormalization", {x, q, q}, nullptr, 4) == Status::InvalidArgument);
}

TEST_CASE("nn ops: pools refuse bad inputs") {
    In x = random_tensor({1, 2, 6, 6}, 1);
    CHECK(prepare_status("MaxPool", {x}) == Status::InvalidArgument);                                  // no kernel_shape
    CHECK(prepare_status("MaxPool", {x}, ints_attr("kernel_shape", {2})) == Status::InvalidArgument);
    CHECK(prepare_status("MaxPool", {x}, ints_attr("kernel_shape", {0, 2})) == Status::InvalidArgument);
    CHECK(prepare_status("MaxPool", {x}, all({ints_attr("kernel_shape", {2, 2}), ints_attr("strides", {0, 1})})) == Status::InvalidArgument);
    CHECK(prepare_status("MaxPool", {x}, all({ints_attr("kernel_shape", {2, 2}), ints_attr("pads", {2, 0, 0, 0})})) == Status::InvalidArgument);
    CHECK(prepare_status("MaxPool", {x}, all({ints_attr("kernel_shape", {2, 2}), int_attr("ceil_mode", 2)})) == Status::InvalidArgument);
    CHECK(prepare_status("MaxPool", {x}, ints_attr("kernel_shape", {7, 2})) == Status::InvalidArgument);
    CHECK(prepare_status("MaxPool", {x}, ints_attr("kernel_shape", {INT64_MAX, 2})) == Status::InvalidArgument);
    CHECK(prepare_status("AveragePool", {x}, ints_attr("kernel_shape", {2, 2}), 2) == Status::InvalidArgument);
    CHECK(prepare_status("AveragePool", {random_tensor({2, 6}, 2)}, ints_attr("kernel_shape", {2})) == Status::InvalidArgument);
    CHECK(prepare_status("GlobalAveragePool", {random_tensor({2, 6}, 2)}) == Status::InvalidArgument);
    CHECK(prepare_status("GlobalMaxPool", {int64s({1, 1, 2}, {1, 2}, false)}) == Status::Unsupported);
}

TEST_CASE("nn ops: softmax, reductions and ArgMax refuse bad inputs") {
    In x = random_tensor({2, 3, 4}, 1);
    CHECK(prepare_status("Softmax", {x}, int_attr("axis", 3)) == Status::InvalidArgument);
    CHECK(prepare_status("LogSoftmax", {x}, int_attr("axis", -4), 1, 11) == Status::InvalidArgument);
    CHECK(prepare_status("Softmax", {random_tensor({}, 2)}) == Status::InvalidArgument);
    CHECK(prepare_status("ReduceMean", {x}, ints_attr("axes", {3}), 1, 11) == Status::InvalidArgument);
    CHECK(prepare_status("ReduceMax", {x}, ints_attr("axes", {1, -2}), 1, 11) == Status::InvalidArgument);  // repeated
    CHECK(prepare_status("ReduceSum", {x, int64s({1}, {1}, false)}, nullptr, 1, 13) == Status::Unsupported);  // not constant
    CHECK(prepare_status("ReduceSum", {x, int64s({1}, {5})}, nullptr, 1, 13) == Status::InvalidArgument);
    CHECK(prepare_status("ReduceSum", {x, constant_floats({1}, {1.0f})}, nullptr, 1, 13) == Status::InvalidArgument);
    CHECK(prepare_status("ReduceSum", {x, int64s({1}, {1})}, nullptr, 1, 11) == Status::InvalidArgument);   // no axes input before 13
    CHECK(prepare_status("ArgMax", {x}, int_attr("axis", 3)) == Status::InvalidArgument);
    CHECK(prepare_status("ArgMin", {random_tensor({2, 0}, 3)}, int_attr("axis", 1)) == Status::InvalidArgument);
    CHECK(prepare_status("ArgMax", {int64s({2}, {1, 2}, false)}) == Status::Unsupported);
}

TEST_CASE("nn ops: Resize refuses bad inputs and data-dependent shapes") {
    In x = random_tensor({1, 1, 2, 2}, 1);
    In scales = constant_floats({4}, {1, 1, 2, 2});
    In dynamic_scales = tensor({4}, {1, 1, 2, 2});
    CHECK(prepare_status("Resize", {x, absent(), scales}) == Status::Ok);
    Outcome out = run_op("Resize", {x, absent(), dynamic_scales});
    CHECK(out.status == Status::Unsupported);
    CHECK(out.error.find("data-dependent shape") != std::string::npos);
    CHECK(prepare_status("Resize", {x, absent(), absent(), int64s({4}, {1, 1, 3, 3}, false)}) == Status::Unsupported);
    CHECK(prepare_status("Resize", {x, absent(), absent()}) == Status::InvalidArgument);                  // neither
    CHECK(prepare_status("Resize", {x, absent(), scales, int64s({4}, {1, 1, 3, 3})}) == Status::InvalidArgument);  // both
    CHECK(prepare_status("Resize", {x, absent(), constant_floats({3}, {1, 2, 2})}) == Status::InvalidArgument);
    CHECK(prepare_status("Resize", {x, absent(), constant_floats({4}, {1, 1, 0, 2})}) == Status::InvalidArgument);
    CHECK(prepare_status("Resize", {x, absent(), absent(), int64s({4}, {1, 1, -1, 3})}) == Status::InvalidArgument);
    CHECK(prepare_status("Resize", {x, absent(), absent(), int64s({4}, {1, 1, INT64_MAX, 3})}) == Status::LimitExceeded);
    CHECK(prepare_status("Resize", {x, absent(), constant_floats({4}, {1, 1, 1e30f, 2})}) == Status::LimitExceeded);
    CHECK(prepare_status("Resize", {x, absent(), constant_floats({4}, {1, 1, NAN, 2})}) == Status::InvalidArgument);
    CHECK(prepare_status("Resize", {x, absent(), scales}, string_attr("mode", "cubic")) == Status::Ok);
    CHECK(prepare_status("Resize", {x, absent(), scales}, string_attr("mode", "area")) == Status::Unsupported);
    CHECK(prepare_status("Resize", {x, absent(), scales}, string_attr("nearest_mode", "up")) == Status::InvalidArgument);
    CHECK(prepare_status("Resize", {x, absent(), scales}, string_attr("coordinate_transformation_mode", "tf_crop_and_resize")) ==
          Status::InvalidArgument);   // without its roi
    CHECK(prepare_status("Resize", {x, absent(), scales}, string_attr("coordinate_transformation_mode", "tf_half_pixel_for_nn")) ==
          Status::Unsupported);
    CHECK(prepare_status("Resize", {x, absent(), constant_floats({4}, {2, 1, 2, 2})}, string_attr("mode", "linear")) ==
          Status::Unsupported);   // linear over N
    CHECK(prepare_status("Resize", {random_tensor({2, 2, 2}, 2), absent(), constant_floats({3}, {1, 2, 2})},
                         string_attr("mode", "linear")) == Status::Unsupported);
    CHECK(prepare_status("Resize", {x, scales}, nullptr, 1, 9) == Status::Unsupported);   // no Resize before opset 10
}

TEST_CASE("nn ops: a BatchNormalization with constant parameters is a Mul and an Add, fused with the Relu after it") {
    // x -> BatchNormalization(constant scale, B, mean, var) -> Relu, at rank 4 (a tail of 7 x 9
    // planes) and rank 2; with `collide`, a node already named "bn.bn_mul" keeps the BN whole.
    for (int rank : {4, 2})
        for (bool collide : {false, true}) {
            CAPTURE(rank);
            CAPTURE(collide);
            const std::vector<int64_t> dims = rank == 4 ? std::vector<int64_t>{2, 5, 7, 9} : std::vector<int64_t>{6, 5};
            const size_t inner = rank == 4 ? 63 : 1;
            std::mt19937 rng(7);
            std::uniform_real_distribution<float> dist(-2.0f, 2.0f), positive(0.25f, 2.0f);
            std::vector<float> params[4];
            for (int k = 0; k < 4; ++k) {
                params[k].resize(5);
                for (float& v : params[k]) v = k == 3 ? positive(rng) : dist(rng);
            }
            Model m;
            NodeId x, bn, relu;
            REQUIRE(m.add_input("x", test::make_desc(ElementType::Float32, dims), &x) == Status::Ok);
            NodeId p[4];
            const char* names[4] = {"scale", "b", "mean", "var"};
            for (int k = 0; k < 4; ++k)
                REQUIRE(m.add_constant(names[k], test::make_desc(ElementType::Float32, {5}), params[k].data(), &p[k]) == Status::Ok);
            InputRef in[5] = {InputRef::by_id(x), InputRef::by_id(p[0]), InputRef::by_id(p[1]), InputRef::by_id(p[2]), InputRef::by_id(p[3])};
            REQUIRE(m.add_node("BatchNormalization", "bn", in, 1, &bn) == Status::Ok);
            REQUIRE(m.set_float(bn, "epsilon", 1e-3f) == Status::Ok);
            InputRef rin[1] = {InputRef::by_id(bn)};
            REQUIRE(m.add_node("Relu", "relu", rin, 1, &relu) == Status::Ok);
            REQUIRE(m.add_output("y", InputRef::by_id(relu)) == Status::Ok);
            if (collide) {
                NodeId same;
                InputRef xin[1] = {InputRef::by_id(x)};
                REQUIRE(m.add_node("Identity", "bn.bn_mul", xin, 1, &same) == Status::Ok);
                REQUIRE(m.add_output("z", InputRef::by_id(same)) == Status::Ok);
            }
            REQUIRE(m.finalize() == Status::Ok);
            std::vector<float> xs((size_t)(dims[0] * 5) * inner);
            for (float& v : xs) v = dist(rng);
            Core core;
            CompiledModel compiled;
            ConfigEntry config[] = {{"PERF_COUNT", "YES"}};
            REQUIRE(core.compile_model(m, "CPU", config, &compiled) == Status::Ok);
            const Graph& pg = compiled.prepared()->model.graph;
            const NodeId prepared_bn = pg.find("bn");
            REQUIRE(prepared_bn != kNoNode);
            CHECK(test::to_string(pg.node(prepared_bn).op) == (collide ? "BatchNormalization" : "Add"));
            if (!collide) CHECK(test::to_string(pg.node(pg.find("bn.bn_mul")).op) == "Mul");
            CHECK((pg.find("scale") == kNoNode) == !collide);   // read by the BatchNormalization only
            InferRequest request;
            REQUIRE(compiled.create_request(&request) == Status::Ok);
            std::memcpy(request.input(0).data(), xs.data(), xs.size() * sizeof(float));
            REQUIRE(request.infer() == Status::Ok);
            const float* y = request.output(0).data_as<float>();
            for (size_t e = 0; e < xs.size(); ++e) {
                const size_t c = e / inner % 5;
                const double want = std::max(0.0, (xs[e] - (double)params[2][c]) / std::sqrt((double)params[3][c] + (double)1e-3f) * params[0][c] +
                                                      params[1][c]);
                CHECK(std::fabs(y[e] - want) <= 1e-5 * (1.0 + std::fabs(want)));
            }
            std::string kernels;
            for (const ProfileEntry& e : request.profiling_info()) kernels += test::to_string(e.kernel) + " ";
            INFO(kernels);
            if (collide) CHECK(kernels.find("BatchNormalization") != std::string::npos);
            else CHECK(kernels.find("BatchNormalization") == std::string::npos);
            if (!collide) CHECK(kernels.find(":3 ") != std::string::npos);   // Mul, Add and Relu in one snippet
        }
}
