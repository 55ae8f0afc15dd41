// Conv prologues (runtime.h >>conv prologue): the elementwise island whose only reader is a 1x1
// Conv (DenseNet's BatchNormalization and Relu) runs inside the Conv's step, each unit
// transforming the channels x positions it reads into its thread's scratch. The fused step
// must give exactly what the unfused steps give (same GEMM, the island through the same vector
// model), on both 1x1 paths (B read by rows; AVX-512's pixel tiles), with M, N and K tails,
// several units, GEMM parts, groups and batches, at 1 and 2 threads on the suite's ISA.
// Islands a Conv cannot take stay their own step, before the Conv.
#include <doctest/doctest.h>
#include <algorithm>
#include <functional>
#include <string>
#include <vector>
#include "op_test.h"
#include "test_helpers.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using test::count_of;
using test::random_floats;
using Shape = std::vector<int64_t>;

struct Run {
    std::vector<unsigned char> y;
    std::string kernels;
    size_t steps = 0;
};

// The model build(t) makes, its last node the output, on CPU at the suite's ISA.
Run run_model(const std::function<NodeId(OpTest&)>& build, bool fusion, uint32_t threads) {
    OpTest t;
    build(t);
    test::CpuRun run = test::run_last_node_on_cpu(t, threads, fusion);
    return Run{run.bytes, run.kernels, (size_t)std::count(run.kernels.begin(), run.kernels.end(), ' ')};
}

// The island before the conv: built on x (shape xs), returns its last node.
struct Island {
    const char* what;
    std::function<NodeId(OpTest&, InputRef, const Shape&)> build;
};

Shape per_channel(const Shape& xs) {
    Shape per = {1, xs[1]};
    for (size_t i = 2; i < xs.size(); ++i) per.push_back(1);
    return per;
}

std::vector<Island> every_island() {
    return {
        {"BatchNormalization + Relu", [](OpTest& t, InputRef x, const Shape& xs) {
             const int64_t c = xs[1];
             std::vector<float> var = random_floats(c, 13, 0.5f);
             for (float& v : var) v += 1.0f;
             NodeId bn = t.op("BatchNormalization", {x, t.constant(Shape{c}, random_floats(c, 10)), t.constant(Shape{c}, random_floats(c, 11)),
                                                     t.constant(Shape{c}, random_floats(c, 12)), t.constant(Shape{c}, var)});
             return t.op("Relu", {InputRef::by_id(bn, 0)});
         }},
        {"Relu", [](OpTest& t, InputRef x, const Shape&) { return t.op("Relu", {x}); }},
        {"per-channel scale first (Mul(s, x)), Clip 0..6", [](OpTest& t, InputRef x, const Shape& xs) {
             NodeId mul = t.op("Mul", {t.constant(per_channel(xs), random_floats(xs[1], 14)), x});
             return t.op("Clip", {InputRef::by_id(mul, 0), t.constant(Shape{}, std::vector<float>{0.0f}),
                                  t.constant(Shape{}, std::vector<float>{6.0f})});
         }},
        {"a second input of X's shape (Add, then HardSwish)", [](OpTest& t, InputRef x, const Shape& xs) {
             NodeId add = t.op("Add", {t.input(xs, random_floats(count_of(xs), 15)), x});
             return t.op("HardSwish", {InputRef::by_id(add, 0)});
         }},
    };
}

struct ConvSpec {
    const char* what;
    Shape x, w;
    int64_t group;
};

std::vector<ConvSpec> every_1x1() {
    return {
        {"M and N tails", {1, 16, 9, 11}, {19, 16, 1, 1}, 1},
        {"several units of positions", {1, 64, 30, 30}, {40, 64, 1, 1}, 1},
        {"a batch of 2, grouped", {2, 32, 8, 8}, {32, 16, 1, 1}, 2},
        {"one small unit (GEMM parts)", {1, 72, 5, 5}, {40, 72, 1, 1}, 1},
        {"K past a K block", {1, 1100, 4, 5}, {24, 1100, 1, 1}, 1},
        {"7 x 7, 32 maps (AVX-512: pixel tiles)", {2, 64, 7, 7}, {32, 64, 1, 1}, 1},
        {"14 x 14, 48 maps (AVX-512: pixel tiles)", {1, 96, 14, 14}, {48, 96, 1, 1}, 1},
    };
}

NodeId add_conv(OpTest& t, InputRef x, const ConvSpec& cs, uint32_t seed) {
    NodeId conv = t.op("Conv", {x, t.constant(cs.w, random_floats(count_of(cs.w), seed, 0.3f)),
                                t.constant(Shape{cs.w[0]}, random_floats(cs.w[0], seed + 1))});
    if (cs.group != 1) t.set_int("group", cs.group);
    return conv;
}

// Fusion needs the JIT GEMM tiles (AVX2, AVX-512, NEON).
bool has_tiles() {
    const Isa isa = default_isa();
    return isa == Isa::Avx2 || isa == Isa::Avx512 || isa == Isa::Neon;
}
}  // namespace

TEST_CASE("prologue: an island before a 1x1 Conv runs in the Conv's step, equal to the unfused steps") {
    uint32_t seed = 300;
    for (const ConvSpec& cs : every_1x1())
        for (const Island& island : every_island()) {
            const std::string conv = cs.what, what = island.what;
            CAPTURE(conv);
            CAPTURE(what);
            const std::vector<float> x = random_floats(count_of(cs.x), seed, 2.0f);
            auto build = [&](OpTest& t) {
                NodeId last = island.build(t, t.input(cs.x, x), cs.x);
                return add_conv(t, InputRef::by_id(last, 0), cs, seed + 1);
            };
            for (uint32_t threads : {1u, 2u}) {
                CAPTURE(threads);
                Run fused = run_model(build, true, threads);
                Run plain = run_model(build, false, threads);
                INFO(fused.kernels);
                if (!has_tiles()) continue;   // the reference Conv: nothing to fuse into
                CHECK(fused.y == plain.y);
                CHECK(fused.kernels.find("+prologue:") != std::string::npos);
                CHECK(fused.steps == 1);
                CHECK(plain.kernels.find("+prologue:") == std::string::npos);
            }
            seed += 2;
        }
}

TEST_CASE("prologue: islands a Conv cannot take stay their own step, before it") {
    const Shape xs = {1, 24, 10, 12};
    const std::vector<float> x = random_floats(count_of(xs), 400, 2.0f);
    struct Case {
        const char* what;
        std::function<NodeId(OpTest&)> build;
        const char* kernels_start;   // the fused run's first step
        uint32_t steps;
    };
    const ConvSpec one = {"", xs, {16, 24, 1, 1}, 1};
    const std::vector<Case> cases = {
        {"a 3x3 Conv", [&](OpTest& t) {
             NodeId relu = t.op("Relu", {t.input(xs, x)});
             NodeId conv = t.op("Conv", {InputRef::by_id(relu, 0), t.constant(Shape{16, 24, 3, 3}, random_floats(16 * 24 * 9, 401, 0.3f))});
             t.set_ints("pads", {1, 1, 1, 1});
             return conv;
         }, "snippet:", 2},
        {"a strided 1x1 Conv", [&](OpTest& t) {
             NodeId relu = t.op("Relu", {t.input(xs, x)});
             NodeId conv = add_conv(t, InputRef::by_id(relu, 0), one, 402);
             t.set_ints("strides", {2, 2});
             return conv;
         }, "snippet:", 2},
        {"the island's result read by two Convs", [&](OpTest& t) {
             NodeId relu = t.op("Relu", {t.input(xs, x)});
             NodeId a = add_conv(t, InputRef::by_id(relu, 0), one, 403);
             NodeId b = add_conv(t, InputRef::by_id(relu, 0), one, 406);
             return t.op("Add", {InputRef::by_id(a, 0), InputRef::by_id(b, 0)});   // b's epilogue
         }, "snippet:", 3},
        {"the island is the previous Conv's epilogue", [&](OpTest& t) {
             NodeId first = add_conv(t, t.input(xs, x), ConvSpec{"", xs, {24, 24, 1, 1}, 1}, 404);
             NodeId relu = t.op("Relu", {InputRef::by_id(first, 0)});
             return add_conv(t, InputRef::by_id(relu, 0), one, 405);
         }, "gemm:", 2},
    };
    for (const Case& c : cases) {
        const std::string what = c.what;
        CAPTURE(what);
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(threads);
            Run fused = run_model(c.build, true, threads);
            Run plain = run_model(c.build, false, threads);
            INFO(fused.kernels);
            if (!has_tiles()) continue;
            CHECK(fused.y == plain.y);
            CHECK(fused.kernels.find("+prologue:") == std::string::npos);
            CHECK(fused.kernels.rfind(c.kernels_start, 0) == 0);
            CHECK(fused.steps == c.steps);
        }
    }
}

TEST_CASE("prologue: the same island body as an epilogue and as a prologue, one snippet each") {
    // Relu over 24 x 10 x 12 after Convs a and b (their epilogues, row strides compiled in) and
    // before Conv d (its prologue, row strides read at run time): compiled apart
    // (SnippetTuning::row_strides_at_run is part of a shared snippet's key), each runs right.
    const Shape xs = {1, 24, 10, 12};
    const ConvSpec square = {"", xs, {24, 24, 1, 1}, 1};
    auto build = [&](OpTest& t) {
        NodeId a = add_conv(t, t.input(xs, random_floats(count_of(xs), 500, 2.0f)), square, 501);
        NodeId relu_a = t.op("Relu", {InputRef::by_id(a, 0)});
        NodeId b = add_conv(t, InputRef::by_id(relu_a, 0), square, 502);
        NodeId relu_b = t.op("Relu", {InputRef::by_id(b, 0)});
        NodeId c = add_conv(t, InputRef::by_id(relu_b, 0), square, 505);
        NodeId relu_x = t.op("Relu", {t.input(xs, random_floats(count_of(xs), 503, 2.0f))});
        NodeId d = add_conv(t, InputRef::by_id(relu_x, 0), square, 504);
        NodeId cat = t.op("Concat", {InputRef::by_id(c, 0), InputRef::by_id(d, 0)});
        t.set_int("axis", 1);
        return cat;
    };
    for (uint32_t threads : {1u, 2u}) {
        CAPTURE(threads);
        Run fused = run_model(build, true, threads);
        Run plain = run_model(build, false, threads);
        INFO(fused.kernels);
        if (!has_tiles()) continue;
        CHECK(fused.y == plain.y);
        CHECK(fused.kernels.find("+epilogue:") != std::string::npos);
        CHECK(fused.kernels.find("+prologue:") != std::string::npos);
    }
}
