// The GPU's Conv and Gemm kernels at each output block (4, 2 or 1 maps or columns per
// work-item), against the CPU within the rounding bound of a K-term dot product: both sums
// are within K * 2^-24 * sum|terms| of the exact one, and sum|terms| is the CPU's result on
// the absolute values of the inputs and weights.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "alloc_counter.h"
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

using test::kSanitizer;

struct Weights {
    std::vector<float> conv_a, bias_a, conv_b, conv_c, bias_c, gemm_d, c_d, gemm_e, c_e;
};

// x[1,8,7,9]: Conv 3x3 8->8 maps with bias (4 maps per item), Conv 1x1 8->12 with bias (4).
// x2[2,4,6,5]: Conv 3x3 stride 2, 2 groups of 2 maps (2 per item).
// a[5,7]: Gemm by [7,8] plus a row c (4 columns per item). at[7,5]: Gemm transA, transB by
// [6,7], c[5,6], alpha and beta (2 columns). b1[3,5]: Gemm by [5,3] (1 column).
void build(Model* m, const Weights& w) {
    m->opset = 17;
    NodeId x, x2, a, at, b1;
    REQUIRE(m->add_input("x", test::make_desc(ElementType::Float32, {1, 8, 7, 9}), &x) == Status::Ok);
    REQUIRE(m->add_input("x2", test::make_desc(ElementType::Float32, {2, 4, 6, 5}), &x2) == Status::Ok);
    REQUIRE(m->add_input("a", test::make_desc(ElementType::Float32, {5, 7}), &a) == Status::Ok);
    REQUIRE(m->add_input("at", test::make_desc(ElementType::Float32, {7, 5}), &at) == Status::Ok);
    REQUIRE(m->add_input("b1", test::make_desc(ElementType::Float32, {3, 5}), &b1) == Status::Ok);
    auto constant = [&](const char* name, std::vector<int64_t> dims, const std::vector<float>& v) {
        NodeId id;
        REQUIRE(m->add_constant(name, test::make_desc(ElementType::Float32, dims), v.data(), &id) == Status::Ok);
        return InputRef::by_id(id);
    };
    int count = 0;
    auto add = [&](const char* op, std::vector<InputRef> inputs) {
        std::string name = std::string("k") + std::to_string(count++) + op;
        NodeId id;
        REQUIRE(m->add_node(op, StringView(name.data(), name.size()), Span<const InputRef>(inputs.data(), inputs.size()), 1, &id) == Status::Ok);
        std::string out = "out_" + name;
        REQUIRE(m->add_output(StringView(out.data(), out.size()), InputRef::by_id(id)) == Status::Ok);
        return id;
    };
    auto ints = [&](NodeId id, const char* key, std::vector<int64_t> v) {
        REQUIRE(m->set_ints(id, key, Span<const int64_t>(v.data(), v.size())) == Status::Ok);
    };
    NodeId conv_a = add("Conv", {InputRef::by_id(x), constant("wa", {8, 8, 3, 3}, w.conv_a), constant("ba", {8}, w.bias_a)});
    ints(conv_a, "pads", {1, 1, 1, 1});
    NodeId conv_b = add("Conv", {InputRef::by_id(x2), constant("wb", {4, 2, 3, 3}, w.conv_b)});
    REQUIRE(m->set_int(conv_b, "group", 2) == Status::Ok);
    ints(conv_b, "strides", {2, 2});
    ints(conv_b, "pads", {0, 1, 1, 0});
    add("Conv", {InputRef::by_id(x), constant("wc", {12, 8, 1, 1}, w.conv_c), constant("bc", {12}, w.bias_c)});
    add("Gemm", {InputRef::by_id(a), constant("wd", {7, 8}, w.gemm_d), constant("cd", {8}, w.c_d)});
    NodeId gemm_e = add("Gemm", {InputRef::by_id(at), constant("we", {6, 7}, w.gemm_e), constant("ce", {5, 6}, w.c_e)});
    REQUIRE(m->set_int(gemm_e, "transA", 1) == Status::Ok);
    REQUIRE(m->set_int(gemm_e, "transB", 1) == Status::Ok);
    REQUIRE(m->set_float(gemm_e, "alpha", 0.75f) == Status::Ok);
    REQUIRE(m->set_float(gemm_e, "beta", 1.5f) == Status::Ok);
    add("Gemm", {InputRef::by_id(b1), constant("wf", {5, 3}, w.gemm_d)});   // the first 15 of gemm_d's weights
    REQUIRE(m->finalize() == Status::Ok);
}

std::vector<std::vector<float>> run(const Model& model, const char* device, const std::vector<std::vector<float>>& inputs, std::string* placement) {
    Core core;
    CompiledModel compiled;
    Status s = core.compile_model(model, device, {}, &compiled);
    INFO(core.last_error());
    REQUIRE(s == Status::Ok);
    for (const PlacementSummary& p : compiled.placement()) *placement += test::to_string(p.device) + ":" + std::to_string(p.nodes) + " ";
    return test::infer_floats(compiled, inputs);
}

std::vector<float> absolute(std::vector<float> v) {
    for (float& x : v) x = std::fabs(x);
    return v;
}

}  // namespace

TEST_CASE("gpu kernels: Conv and Gemm at 4, 2 and 1 maps or columns per work-item equal CPU within the dot-product bound") {
    const char* isa = std::getenv("TESSEL_ISA");
    if (kSanitizer || (isa && *isa && std::strcmp(isa, "ref"))) return;   // the driver is not instrumented; its results do not depend on the ISA
    {
        Core core;
        if (core.device("GPU")->check_available() != Status::Ok) {
            MESSAGE("GPU unavailable here: " << core.device("GPU")->last_error());
            return;
        }
    }
    std::mt19937 rng(35);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto randoms = [&](size_t n) { std::vector<float> v(n); for (float& x : v) x = dist(rng); return v; };
    Weights w{randoms(8 * 8 * 9), randoms(8), randoms(4 * 2 * 9), randoms(12 * 8), randoms(12), randoms(7 * 8), randoms(8), randoms(6 * 7), randoms(5 * 6)};
    std::vector<std::vector<float>> inputs = {randoms(8 * 63), randoms(2 * 4 * 30), randoms(35), randoms(35), randoms(15)};
    Model model;
    build(&model, w);
    std::string gpu_placement, cpu_placement, abs_placement;
    std::vector<std::vector<float>> gpu = run(model, "GPU", inputs, &gpu_placement);
    CHECK(gpu_placement == "GPU:6 ");
    std::vector<std::vector<float>> cpu = run(model, "CPU", inputs, &cpu_placement);
    Weights wa{absolute(w.conv_a), absolute(w.bias_a), absolute(w.conv_b), absolute(w.conv_c), absolute(w.bias_c),
               absolute(w.gemm_d), absolute(w.c_d), absolute(w.gemm_e), absolute(w.c_e)};
    std::vector<std::vector<float>> abs_inputs;
    for (const auto& v : inputs) abs_inputs.push_back(absolute(v));
    Model abs_model;
    build(&abs_model, wa);
    std::vector<std::vector<float>> magnitude = run(abs_model, "CPU", abs_inputs, &abs_placement);
    const float terms = 8 * 9 + 1;   // the longest dot product (Conv A, its bias included)
    REQUIRE(gpu.size() == cpu.size());
    for (size_t o = 0; o < cpu.size(); ++o) {
        INFO("output " << test::to_string(model.output((uint32_t)o).name));
        REQUIRE(gpu[o].size() == cpu[o].size());
        for (size_t i = 0; i < cpu[o].size(); ++i) {
            float bound = 2.0f * terms * std::ldexp(1.0f, -24) * 2.0f * magnitude[o][i] + 1e-30f;   // 2: alpha and beta
            INFO("at " << i << ": GPU " << gpu[o][i] << ", CPU " << cpu[o][i] << ", bound " << bound);
            CHECK(std::fabs(gpu[o][i] - cpu[o][i]) <= bound);
        }
    }
}
