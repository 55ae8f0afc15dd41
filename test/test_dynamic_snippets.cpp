// runtime.h >>plan reuse: snippets: the plans of a model with free input dims share one compiled
// snippet per distinct island body met twice (islands and GEMM epilogues), across plans and
// across the repeated blocks of one plan, and (>>cpu program recipe) one CPU program recipe per
// pattern of equal, 0 and 1 dims met twice. A plan must still equal a compile at its shape, step
// for step and bit for bit, also at shapes that change the Conv path, what fuses and which
// tiles apply; and a request alternating known signatures allocates nothing.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "alloc_counter.h"
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

// x[N,8,H,W] -> BLOCKS x (Conv 3x3 pads 1 -> Add bias -> Relu -> Mul scale -> Sigmoid), the
// blocks alike (their islands have one body at a shape), then Sub(last, x) -> Tanh: an island
// that no GEMM step takes.
void build_blocks(Model* m, int blocks) {
    NodeId x;
    REQUIRE(m->add_input("x", test::make_desc(ElementType::Float32, {-1, 8, -1, -1}), &x) == Status::Ok);
    std::vector<float> w(8 * 8 * 9), b(8), s(8);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.02f * (float)((i * 5) % 11) - 0.1f;
    for (size_t i = 0; i < 8; ++i) { b[i] = 0.01f * (float)i; s[i] = 1.0f - 0.05f * (float)i; }
    NodeId p = x;
    for (int k = 0; k < blocks; ++k) {
        std::string n = std::to_string(k);
        NodeId wn, bn, sn, conv, add, relu, mul, sig;
        REQUIRE(m->add_constant(StringView(("w" + n).c_str()), test::make_desc(ElementType::Float32, {8, 8, 3, 3}), w.data(), &wn) == Status::Ok);
        REQUIRE(m->add_constant(StringView(("b" + n).c_str()), test::make_desc(ElementType::Float32, {1, 8, 1, 1}), b.data(), &bn) == Status::Ok);
        REQUIRE(m->add_constant(StringView(("s" + n).c_str()), test::make_desc(ElementType::Float32, {1, 8, 1, 1}), s.data(), &sn) == Status::Ok);
        InputRef cin[] = {InputRef::by_id(p), InputRef::by_id(wn)};
        REQUIRE(m->add_node("Conv", StringView(("conv" + n).c_str()), cin, 1, &conv) == Status::Ok);
        int64_t pads[] = {1, 1, 1, 1};
        REQUIRE(m->set_ints(conv, "pads", pads) == Status::Ok);
        InputRef ain[] = {InputRef::by_id(conv), InputRef::by_id(bn)};
        REQUIRE(m->add_node("Add", StringView(("add" + n).c_str()), ain, 1, &add) == Status::Ok);
        InputRef rin[] = {InputRef::by_id(add)};
        REQUIRE(m->add_node("Relu", StringView(("relu" + n).c_str()), rin, 1, &relu) == Status::Ok);
        InputRef min[] = {InputRef::by_id(relu), InputRef::by_id(sn)};
        REQUIRE(m->add_node("Mul", StringView(("mul" + n).c_str()), min, 1, &mul) == Status::Ok);
        InputRef sin[] = {InputRef::by_id(mul)};
        REQUIRE(m->add_node("Sigmoid", StringView(("sig" + n).c_str()), sin, 1, &sig) == Status::Ok);
        p = sig;
    }
    NodeId sub, tanh;
    InputRef subin[] = {InputRef::by_id(p), InputRef::by_id(x)};
    REQUIRE(m->add_node("Sub", "sub", subin, 1, &sub) == Status::Ok);
    InputRef tin[] = {InputRef::by_id(sub)};
    REQUIRE(m->add_node("Tanh", "tanh", tin, 1, &tanh) == Status::Ok);
    REQUIRE(m->add_output("y", InputRef::by_id(tanh)) == Status::Ok);
    REQUIRE(m->add_output("mid", InputRef::by_id(p)) == Status::Ok);
    REQUIRE(m->finalize() == Status::Ok);
}

Tensor image(const std::vector<int64_t>& dims) {
    Tensor t;
    REQUIRE(t.allocate(ElementType::Float32, Span<const int64_t>(dims.data(), dims.size())) == Status::Ok);
    float* p = t.data_as<float>();
    for (uint64_t i = 0; i < t.elements(); ++i) p[i] = 0.03f * (float)((i * 13) % 41) - 0.6f;
    return t;
}

struct Result {
    std::vector<std::pair<std::string, std::string>> steps;   // (node, kernel) per profiled step
    std::vector<std::vector<float>> outputs;
    std::vector<std::vector<int64_t>> shapes;
};

Result run(InferRequest& request, const Tensor& x) {
    REQUIRE(request.set_input(0, x) == Status::Ok);
    Status s = request.infer();
    INFO(std::string(request.last_error()));
    REQUIRE(s == Status::Ok);
    Result r;
    for (const ProfileEntry& e : request.profiling_info()) r.steps.emplace_back(test::to_string(e.node), std::string(e.kernel));
    for (uint32_t i = 0; i < 2; ++i) {
        const Tensor& t = request.output(i);
        r.outputs.emplace_back(t.data_as<float>(), t.data_as<float>() + t.elements());
        r.shapes.emplace_back(t.shape().data, t.shape().data + t.rank());
    }
    return r;
}

// A plan's result `got` on x against a compile of m at x's shape: the same steps and kernels,
// output shapes and outputs, bit for bit.
void check_equals_compile_at(Core& core, const Model& m, const char* device, Span<const ConfigEntry> config, const Tensor& x,
                             const Result& got) {
    InputShape fixed_shape[] = {{"x", x.shape()}};
    CompiledModel fixed;
    REQUIRE(core.compile_model(m, device, config, &fixed, fixed_shape) == Status::Ok);
    REQUIRE(!fixed.has_free_dims());
    InferRequest fixed_request;
    REQUIRE(fixed.create_request(&fixed_request) == Status::Ok);
    Result want = run(fixed_request, x);
    CHECK(got.steps == want.steps);
    CHECK(got.shapes == want.shapes);
    for (size_t k = 0; k < 2; ++k) {
        REQUIRE(got.outputs[k].size() == want.outputs[k].size());
        CHECK(std::memcmp(got.outputs[k].data(), want.outputs[k].data(), got.outputs[k].size() * sizeof(float)) == 0);
    }
}

// The snippets the model's plans share after an infer at `dims` (a plan, unless cached).
uint32_t shared_snippets_after_infer(const CompiledModel& dynamic, InferRequest& request, const std::vector<int64_t>& dims) {
    Tensor x = image(dims);
    REQUIRE(request.set_input(0, x) == Status::Ok);
    Status s = request.infer();
    INFO(std::string(request.last_error()));
    REQUIRE(s == Status::Ok);
    return dynamic.shared_snippets();
}

}  // namespace

TEST_CASE("dynamic snippets: plans sharing island snippets equal a compile at each shape, bit for bit") {
    Model m;
    build_blocks(&m, 3);
    // Shapes that change the plan: ones (broadcasts and one-element tests), a wide image (the
    // Conv's padded-copy path and more tiles), the batch, and a shape seen before.
    const std::vector<std::vector<int64_t>> shapes = {{1, 8, 6, 10}, {2, 8, 1, 1}, {1, 8, 1, 37}, {3, 8, 19, 45},
                                                      {1, 8, 6, 10}, {2, 8, 33, 7}, {1, 8, 1, 1}};
    for (const char* isa : {"auto", "ref"}) {
        for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
            INFO(std::string(device) << " ISA " << isa);
            ConfigEntry config[] = {{"PERF_COUNT", "YES"}, {"SHAPE_CACHE_SIZE", "2"}, {"CPU:ISA", isa}, {"TEMPLATE:SUPPORTED_OPS", "Relu"}};
            Span<const ConfigEntry> entries(config, device[0] == 'H' ? 4 : 3);
            Core core;
            CompiledModel dynamic;
            Status s = core.compile_model(m, device, entries, &dynamic);
            INFO(std::string(core.last_error()));
            REQUIRE(s == Status::Ok);
            REQUIRE(dynamic.has_free_dims());
            InferRequest request;
            REQUIRE(dynamic.create_request(&request) == Status::Ok);
            for (const std::vector<int64_t>& dims : shapes) {
                CAPTURE(dims[0]);
                CAPTURE(dims[2]);
                CAPTURE(dims[3]);
                Tensor x = image(dims);
                check_equals_compile_at(core, m, device, entries, x, run(request, x));
            }
        }
    }
}

TEST_CASE("dynamic snippets: plans at shapes of one pattern of equal, 0 and 1 dims emit their programs from one kept recipe") {
    Model m;
    build_blocks(&m, 3);
    ConfigEntry config[] = {{"PERF_COUNT", "YES"}, {"SHAPE_CACHE_SIZE", "1"}};
    Core core;
    CompiledModel dynamic;
    REQUIRE(core.compile_model(m, "CPU", config, &dynamic) == Status::Ok);
    CHECK(dynamic.cpu_recipes() == 0);   // the plan at every free dim 1: a pattern met once
    InferRequest request;
    REQUIRE(dynamic.create_request(&request) == Status::Ok);
    // N, H and W apart from each other, from the model's other dims (C = 8, the kernels' 3) and
    // from 0 and 1 are one pattern; H equal to C is another, and so are a batch of 1 and a batch
    // equal to the kernels' 3. A pattern's recipe is kept at its second plan and used from its
    // third on. (dims, recipes kept, programs emitted from one)
    struct Plan { std::vector<int64_t> dims; uint32_t kept, used; };
    const Plan plans[] = {{{2, 8, 5, 9}, 0, 0},   {{4, 8, 6, 10}, 1, 0},  {{5, 8, 17, 11}, 1, 1}, {{7, 8, 6, 9}, 1, 2},
                          {{2, 8, 8, 9}, 1, 2},   {{4, 8, 8, 10}, 2, 2},  {{1, 8, 5, 9}, 2, 2},   {{1, 8, 6, 10}, 3, 2},
                          {{6, 8, 7, 12}, 3, 3},  {{5, 8, 8, 9}, 3, 4},   {{3, 8, 5, 9}, 3, 4},   {{1, 8, 7, 11}, 3, 5}};
    for (const Plan& plan : plans) {
        const std::vector<int64_t>& dims = plan.dims;
        CAPTURE(dims[0]);
        CAPTURE(dims[2]);
        CAPTURE(dims[3]);
        Tensor x = image(dims);
        Result got = run(request, x);
        CHECK(dynamic.cpu_recipes() == plan.kept);
        CHECK(dynamic.cpu_recipe_programs() == plan.used);
        check_equals_compile_at(core, m, "CPU", config, x, got);
    }
}

TEST_CASE("dynamic snippets: a body met twice is kept once, across the blocks of a plan and across plans") {
    // Two blocks: each island body appears once per plan (the first block's, and the last
    // block's, which takes the Sub and Tanh after it). Five: the first body four times.
    Model two, five;
    build_blocks(&two, 2);
    build_blocks(&five, 5);
    Core core;
    ConfigEntry config[] = {{"SHAPE_CACHE_SIZE", "1"}};
    CompiledModel a, b;
    REQUIRE(core.compile_model(two, "CPU", config, &a) == Status::Ok);
    REQUIRE(core.compile_model(five, "CPU", config, &b) == Status::Ok);
    // The plans at every free dim 1: a body met once is not kept; the alike blocks' is.
    CHECK(a.shared_snippets() == 0);
    const uint32_t at_ones = b.shared_snippets();
    CHECK(at_ones >= 1);
    InferRequest ra, rb;
    REQUIRE(a.create_request(&ra) == Status::Ok);
    REQUIRE(b.create_request(&rb) == Status::Ok);
    // A new shape: the alike blocks' body at it is kept, the last block's not yet.
    uint32_t first = shared_snippets_after_infer(b, rb, {1, 8, 6, 10});
    CHECK(first > at_ones);
    uint32_t second = shared_snippets_after_infer(b, rb, {2, 8, 5, 9});
    CHECK(second > first);
    // Planned again (the one-entry cache evicted it): the bodies met once before are kept
    // now; a third plan adds nothing.
    uint32_t again = shared_snippets_after_infer(b, rb, {1, 8, 6, 10});
    CHECK(again > second);
    uint32_t settled = shared_snippets_after_infer(b, rb, {2, 8, 5, 9});
    CHECK(shared_snippets_after_infer(b, rb, {1, 8, 6, 10}) == settled);
    CHECK(shared_snippets_after_infer(b, rb, {2, 8, 5, 9}) == settled);
    // The same for the two-block model: nothing kept until a shape comes back.
    CHECK(shared_snippets_after_infer(a, ra, {1, 8, 6, 10}) == 0);
    CHECK(shared_snippets_after_infer(a, ra, {2, 8, 5, 9}) == 0);
    CHECK(shared_snippets_after_infer(a, ra, {1, 8, 6, 10}) >= 2);
}

TEST_CASE("dynamic snippets: a request alternating two signatures allocates nothing after their first infers") {
    Model m;
    build_blocks(&m, 3);
    Core core;
    ConfigEntry config[] = {{"SHAPE_CACHE_SIZE", "2"}};
    CompiledModel dynamic;
    REQUIRE(core.compile_model(m, "CPU", config, &dynamic) == Status::Ok);
    InferRequest request;
    REQUIRE(dynamic.create_request(&request) == Status::Ok);
    Tensor x1 = image({1, 8, 6, 10}), x2 = image({2, 8, 9, 4});
    std::vector<float> first_y;
    for (int k = 0; k < 2; ++k) {
        REQUIRE(request.set_input(0, k ? x2 : x1) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
        if (!k) first_y.assign(request.output(0).data_as<float>(), request.output(0).data_as<float>() + request.output(0).elements());
    }
    uint64_t before = tessel_test::allocation_count();
    for (int k = 0; k < 6; ++k) {
        REQUIRE(request.set_input(0, k % 2 ? x2 : x1) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
    }
    CHECK(tessel_test::allocation_count() == before);
    REQUIRE(request.set_input(0, x1) == Status::Ok);
    REQUIRE(request.infer() == Status::Ok);
    CHECK(std::memcmp(request.output(0).data(), first_y.data(), first_y.size() * sizeof(float)) == 0);
}
