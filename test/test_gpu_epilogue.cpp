// The GPU's fused epilogues: the island that alone reads a Conv's or Gemm's result runs in
// the node's kernel (its body printed as an OpenCL function, the same body IR the islands
// print): bias + Relu, Clip, a residual Add of another value, broadcast operands. Outputs
// equal the CPU's; a result read elsewhere too (a second reader, a model output) is not fused.
// The tiled Conv and Gemm (local-memory tiles, TILED_KERNELS) with and without epilogues, at
// sizes that leave partial tiles, equal the CPU's too.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

struct Built {
    Model model;
    std::vector<std::vector<float>> constants;
    int count = 0;
    NodeId constant(std::vector<int64_t> dims, std::mt19937* rng) {
        size_t n = 1;
        for (int64_t d : dims) n *= (size_t)d;
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        constants.emplace_back(n);
        for (float& v : constants.back()) v = dist(*rng);
        NodeId id;
        std::string name = "c" + std::to_string(count++);
        REQUIRE(model.add_constant(StringView(name.data(), name.size()), test::make_desc(ElementType::Float32, dims), constants.back().data(), &id) ==
                Status::Ok);
        return id;
    }
    NodeId node(const char* op, std::vector<InputRef> inputs) {
        std::string name = std::string("n") + std::to_string(count++) + op;
        NodeId id;
        REQUIRE(model.add_node(op, StringView(name.data(), name.size()), Span<const InputRef>(inputs.data(), inputs.size()), 1, &id) == Status::Ok);
        return id;
    }
};

// Outputs and the kernel name of each profiled GPU step.
using test::gpu_here;

void check_equal(const Model& model, const std::vector<std::vector<float>>& inputs, const std::vector<std::string>& want_kernels,
                 const char* tiles = "NO") {
    std::vector<std::string> kernels;
    std::vector<std::vector<float>> gpu = test::compile_and_infer(model, "GPU", inputs, &kernels, tiles);
    std::vector<std::vector<float>> cpu = test::compile_and_infer(model, "CPU", inputs);
    std::string got, want;
    for (const std::string& k : kernels) got += k + " ";
    for (const std::string& k : want_kernels) want += k + " ";
    CHECK(got == want);
    REQUIRE(gpu.size() == cpu.size());
    for (size_t o = 0; o < cpu.size(); ++o) {
        REQUIRE(gpu[o].size() == cpu[o].size());
        for (size_t i = 0; i < cpu[o].size(); ++i) {
            INFO("output " << o << " element " << i);
            CHECK(std::fabs(gpu[o][i] - cpu[o][i]) <= 1e-5f + 1e-5f * std::fabs(cpu[o][i]));
        }
    }
}

}  // namespace

TEST_CASE("gpu epilogue: Conv + bias + Relu, Conv + Clip + residual Add, Gemm + broadcast Mul run as one kernel each") {
    if (!gpu_here()) return;
    std::mt19937 rng(35);
    Built b;
    NodeId x, a;
    REQUIRE(b.model.add_input("x", test::make_desc(ElementType::Float32, {1, 4, 7, 6}), &x) == Status::Ok);
    REQUIRE(b.model.add_input("a", test::make_desc(ElementType::Float32, {5, 6}), &a) == Status::Ok);
    NodeId w1 = b.constant({4, 4, 3, 3}, &rng), b1 = b.constant({4}, &rng);
    NodeId conv = b.node("Conv", {InputRef::by_id(x), InputRef::by_id(w1), InputRef::by_id(b1)});
    REQUIRE(b.model.set_ints(conv, "pads", Span<const int64_t>(std::vector<int64_t>{1, 1, 1, 1}.data(), 4)) == Status::Ok);
    NodeId relu = b.node("Relu", {InputRef::by_id(conv)});
    // Conv 1x1 -> Clip -> Add(x): a residual read from the model's input.
    NodeId w2 = b.constant({4, 4, 1, 1}, &rng);
    NodeId conv2 = b.node("Conv", {InputRef::by_id(relu), InputRef::by_id(w2)});
    NodeId lo = b.constant({}, &rng), hi = b.constant({}, &rng);
    b.constants[b.constants.size() - 2][0] = -0.25f;
    b.constants.back()[0] = 0.5f;
    NodeId clip = b.node("Clip", {InputRef::by_id(conv2), InputRef::by_id(lo), InputRef::by_id(hi)});
    NodeId add = b.node("Add", {InputRef::by_id(clip), InputRef::by_id(x)});
    REQUIRE(b.model.add_output("y", InputRef::by_id(add)) == Status::Ok);
    // Gemm -> Mul by a row broadcast over the rows.
    NodeId gw = b.constant({6, 3}, &rng), row = b.constant({3}, &rng);
    NodeId gemm = b.node("Gemm", {InputRef::by_id(a), InputRef::by_id(gw)});
    NodeId mul = b.node("Mul", {InputRef::by_id(gemm), InputRef::by_id(row)});
    REQUIRE(b.model.add_output("z", InputRef::by_id(mul)) == Status::Ok);
    REQUIRE(b.model.finalize() == Status::Ok);
    std::vector<float> xv(4 * 7 * 6), av(5 * 6);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : xv) v = dist(rng);
    for (float& v : av) v = dist(rng);
    check_equal(b.model, {xv, av}, {"opencl:Conv+1", "opencl:Gemm+1", "opencl:Conv+2"});
}

TEST_CASE("gpu epilogue: a result read twice, or a model output, keeps its own step") {
    if (!gpu_here()) return;
    std::mt19937 rng(36);
    Built b;
    NodeId x;
    REQUIRE(b.model.add_input("x", test::make_desc(ElementType::Float32, {1, 3, 5, 5}), &x) == Status::Ok);
    NodeId w = b.constant({3, 3, 1, 1}, &rng);
    NodeId conv = b.node("Conv", {InputRef::by_id(x), InputRef::by_id(w)});
    NodeId relu = b.node("Relu", {InputRef::by_id(conv)});
    NodeId sig = b.node("Sigmoid", {InputRef::by_id(conv)});   // a second island reads conv
    NodeId conv2 = b.node("Conv", {InputRef::by_id(relu), InputRef::by_id(w)});
    NodeId neg = b.node("Neg", {InputRef::by_id(conv2)});
    REQUIRE(b.model.add_output("s", InputRef::by_id(sig)) == Status::Ok);
    REQUIRE(b.model.add_output("c", InputRef::by_id(conv2)) == Status::Ok);   // a model output
    REQUIRE(b.model.add_output("y", InputRef::by_id(neg)) == Status::Ok);
    REQUIRE(b.model.finalize() == Status::Ok);
    std::vector<float> xv(3 * 5 * 5);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : xv) v = dist(rng);
    std::vector<std::string> kernels;
    std::vector<std::vector<float>> gpu = test::compile_and_infer(b.model, "GPU", {xv}, &kernels);
    std::vector<std::vector<float>> cpu = test::compile_and_infer(b.model, "CPU", {xv});
    size_t fused = 0;
    for (const std::string& k : kernels) fused += k.find('+') != std::string::npos;
    CHECK(fused == 0);
    for (size_t o = 0; o < cpu.size(); ++o)
        for (size_t i = 0; i < cpu[o].size(); ++i) CHECK(std::fabs(gpu[o][i] - cpu[o][i]) <= 1e-5f + 1e-5f * std::fabs(cpu[o][i]));
}

TEST_CASE("gpu tiles: TILED_KERNELS is auto, YES or NO") {
    Core core;
    Device* gpu = core.device("GPU");
    StringView value;
    REQUIRE(gpu->get_config("TILED_KERNELS", &value) == Status::Ok);
    CHECK(test::to_string(value) == "auto");
    CHECK(gpu->set_config("TILED_KERNELS", "maybe") == Status::InvalidArgument);
    CHECK(std::string(gpu->last_error()) == "GPU: TILED_KERNELS must be auto, YES or NO");
    CHECK(gpu->set_config("TILED_KERNELS", "NO") == Status::Ok);
}

TEST_CASE("gpu tiles: Conv (groups, strides, pads, dilations) and Gemm (transposes, C) by local-memory tiles equal CPU") {
    if (!gpu_here()) return;
    std::mt19937 rng(37);
    Built b;
    NodeId x, a;
    REQUIRE(b.model.add_input("x", test::make_desc(ElementType::Float32, {2, 6, 9, 7}), &x) == Status::Ok);
    REQUIRE(b.model.add_input("a", test::make_desc(ElementType::Float32, {21, 19}), &a) == Status::Ok);
    // 2 groups of 3 channels -> 2 x 17 maps, 3x2 kernel: K = 18, 17 maps, 63 or fewer positions.
    NodeId w1 = b.constant({34, 3, 3, 2}, &rng), b1 = b.constant({34}, &rng);
    NodeId conv = b.node("Conv", {InputRef::by_id(x), InputRef::by_id(w1), InputRef::by_id(b1)});
    REQUIRE(b.model.set_int(conv, "group", 2) == Status::Ok);
    REQUIRE(b.model.set_ints(conv, "pads", Span<const int64_t>(std::vector<int64_t>{1, 0, 2, 1}.data(), 4)) == Status::Ok);
    REQUIRE(b.model.set_ints(conv, "dilations", Span<const int64_t>(std::vector<int64_t>{1, 2}.data(), 2)) == Status::Ok);
    NodeId relu = b.node("Relu", {InputRef::by_id(conv)});
    REQUIRE(b.model.add_output("y", InputRef::by_id(relu)) == Status::Ok);
    NodeId w2 = b.constant({20, 6, 3, 3}, &rng);
    NodeId conv2 = b.node("Conv", {InputRef::by_id(x), InputRef::by_id(w2)});
    REQUIRE(b.model.set_ints(conv2, "strides", Span<const int64_t>(std::vector<int64_t>{2, 1}.data(), 2)) == Status::Ok);
    REQUIRE(b.model.add_output("y2", InputRef::by_id(conv2)) == Status::Ok);
    // Gemm 21x19 (transposed A: 19x21 read as its transpose) by 19x18, C broadcast by rows.
    NodeId gw = b.constant({18, 19}, &rng), gc = b.constant({18}, &rng);
    NodeId gemm = b.node("Gemm", {InputRef::by_id(a), InputRef::by_id(gw), InputRef::by_id(gc)});
    REQUIRE(b.model.set_int(gemm, "transB", 1) == Status::Ok);
    REQUIRE(b.model.set_float(gemm, "alpha", 0.5f) == Status::Ok);
    NodeId sig = b.node("Sigmoid", {InputRef::by_id(gemm)});
    REQUIRE(b.model.add_output("z", InputRef::by_id(sig)) == Status::Ok);
    NodeId gemm_t = b.node("Gemm", {InputRef::by_id(a), InputRef::by_id(a)});   // A^T (19x21) x A (21x19)
    REQUIRE(b.model.set_int(gemm_t, "transA", 1) == Status::Ok);
    REQUIRE(b.model.add_output("z2", InputRef::by_id(gemm_t)) == Status::Ok);
    REQUIRE(b.model.finalize() == Status::Ok);
    std::vector<float> xv(2 * 6 * 9 * 7), av(21 * 19);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : xv) v = dist(rng);
    for (float& v : av) v = dist(rng);
    check_equal(b.model, {xv, av}, {"opencl:tiled-Conv+1", "opencl:tiled-Conv", "opencl:tiled-Gemm", "opencl:tiled-Gemm+1"}, "YES");
    check_equal(b.model, {xv, av}, {"opencl:Conv+1", "opencl:Conv", "opencl:Gemm", "opencl:Gemm+1"}, "NO");
}
