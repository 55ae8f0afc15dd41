// Fused epilogues (runtime.h >>gemm epilogue): a Conv or ConvTranspose on the CPU device's JIT
// GEMM followed by an elementwise island runs as one step, the island applied to each block
// of the GEMM's output. The fused step must give exactly what the unfused steps give (the
// same GEMM, then the island through the same vector model: bitwise equal, NaN and Inf
// included), for every epilogue kind and every shape class of the GEMM conv paths (1x1 on
// NCHW, k x k over padded or phase planes, strided 1x1 (im2col), dilated, grouped, M and N
// tails, several blocks, GEMM parts), at 1 and 2 threads, on the suite's ISA; infer() allocates
// nothing and the profile shows one step. The GEMM itself is checked against a double
// reference in test_gemm.cpp, and once more here with a tail (bound 1e-5 sum |w||x|).
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

std::vector<float> uniform_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-scale, scale);
    std::vector<float> v((size_t)n);
    for (float& f : v) f = uniform(rng);
    return v;
}

using test::count_of;

struct ConvSpec {
    const char* what;
    bool transpose;
    Shape x, w;
    int64_t group;
    Shape strides, dilations, pads;
};

// The island after the conv: builds it on y (the conv's output, shape y_shape) and returns
// its last node.
struct Tail {
    const char* what;
    std::function<NodeId(OpTest&, InputRef, const Shape&)> build;
};

Shape conv_output_shape(const ConvSpec& cs) {
    const int sp = (int)cs.x.size() - 2;
    Shape y = {cs.x[0], cs.transpose ? cs.w[1] * cs.group : cs.w[0]};
    for (int i = 0; i < sp; ++i) {
        int64_t s = cs.strides.empty() ? 1 : cs.strides[i], d = cs.dilations.empty() ? 1 : cs.dilations[i];
        int64_t pb = cs.pads.empty() ? 0 : cs.pads[i], pe = cs.pads.empty() ? 0 : cs.pads[sp + i];
        int64_t extent = (cs.w[2 + i] - 1) * d + 1;
        y.push_back(cs.transpose ? s * (cs.x[2 + i] - 1) + extent - pb - pe : (cs.x[2 + i] + pb + pe - extent) / s + 1);
    }
    return y;
}

struct Run {
    std::vector<float> y;
    std::string kernels;
    size_t steps = 0;
    size_t arena_bytes = 0;   // activations of a request
};

// The model `build` makes (it returns the output node) on CPU with `isa`, FUSION on or off.
Run run_model(const std::function<NodeId(OpTest&)>& build, const char* isa, bool fusion, uint32_t threads) {
    OpTest t;
    NodeId last = build(t);
    std::string name = t.fresh("out");
    REQUIRE(t.model.add_output(StringView(name.data(), name.size()), InputRef::by_id(last, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}, {"ISA", StringView(isa)},
                            {"FUSION", fusion ? "YES" : "NO"}};
    test::CompiledRun run;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 4), &run);
    Run r;
    r.kernels = run.kernels;
    r.steps = run.steps;
    r.arena_bytes = run.compiled.arena_bytes();
    const Tensor& out = run.request.output(run.compiled.output_count() - 1);   // `last`'s
    r.y.assign(out.data_as<float>(), out.data_as<float>() + out.elements());
    return r;
}

// The conv of cs on input x (constant weights and bias).
NodeId add_conv(OpTest& t, const ConvSpec& cs, const std::vector<float>& x, uint32_t seed) {
    std::vector<float> w = uniform_floats(count_of(cs.w), seed), bias = uniform_floats(conv_output_shape(cs)[1], seed + 1);
    NodeId conv = t.op(cs.transpose ? "ConvTranspose" : "Conv",
                       {t.input(cs.x, x), t.constant(cs.w, w), t.constant(Shape{conv_output_shape(cs)[1]}, bias)});
    if (cs.group != 1) t.set_int("group", cs.group);
    if (!cs.strides.empty()) t.set_ints("strides", cs.strides);
    if (!cs.dilations.empty()) t.set_ints("dilations", cs.dilations);
    if (!cs.pads.empty()) t.set_ints("pads", cs.pads);
    return conv;
}

// Conv + tail.
Run run_conv_tail(const ConvSpec& cs, const Tail& tail, const std::vector<float>& x, uint32_t seed, const char* isa,
                  bool fusion, uint32_t threads) {
    return run_model([&](OpTest& t) {
        return tail.build(t, InputRef::by_id(add_conv(t, cs, x, seed), 0), conv_output_shape(cs));
    }, isa, fusion, threads);
}

// Bitwise equal, any NaN matching any NaN.
int64_t count_different(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    int64_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const bool same = std::isnan(a[i]) ? std::isnan(b[i]) : std::memcmp(&a[i], &b[i], sizeof(float)) == 0;
        if (!same && bad++ < 5) MESSAGE("y[" << i << "] = " << a[i] << " fused, " << b[i] << " unfused");
    }
    return bad;
}

// The target of this run: TESSEL_ISA (the Makefile runs the suite once per ISA the machine
// has, and the unfused steps' reference kernels follow it too). Fusion needs JIT GEMM tiles
// (AVX2, AVX-512, NEON).
std::vector<std::pair<const char*, bool>> machine_isas() {
    const Isa isa = default_isa();
    return {{isa_name(isa), isa == Isa::Avx2 || isa == Isa::Avx512 || isa == Isa::Neon}};
}

InputRef scalar(OpTest& t, float v) { return t.constant(Shape{}, std::vector<float>{v}); }

std::vector<Tail> every_tail() {
    std::vector<Tail> tails;
    auto unary = [](const char* op) {
        return [op](OpTest& t, InputRef y, const Shape&) { return t.op(op, {y}); };
    };
    tails.push_back({"Relu", unary("Relu")});
    tails.push_back({"Clip 0..6", [](OpTest& t, InputRef y, const Shape&) {
                         InputRef lo = scalar(t, 0.0f), hi = scalar(t, 6.0f);
                         return t.op("Clip", {y, lo, hi});
                     }});
    tails.push_back({"HardSwish", unary("HardSwish")});
    tails.push_back({"HardSigmoid", [](OpTest& t, InputRef y, const Shape&) {
                         NodeId n = t.op("HardSigmoid", {y});
                         t.set_float("alpha", 0.25f);
                         t.set_float("beta", 0.4f);
                         return n;
                     }});
    tails.push_back({"Sigmoid", unary("Sigmoid")});
    tails.push_back({"Swish as x sigmoid(x)", [](OpTest& t, InputRef y, const Shape&) {
                         NodeId sig = t.op("Sigmoid", {y});
                         return t.op("Mul", {y, InputRef::by_id(sig, 0)});
                     }});
    tails.push_back({"Gelu", unary("Gelu")});
    tails.push_back({"residual Add + Relu", [](OpTest& t, InputRef y, const Shape& ys) {
                         InputRef skip = t.input(ys, uniform_floats(count_of(ys), 77));
                         NodeId add = t.op("Add", {y, skip});
                         return t.op("Relu", {InputRef::by_id(add, 0)});
                     }});
    tails.push_back({"per-channel Mul + Add (a BatchNormalization's scale and shift)", [](OpTest& t, InputRef y, const Shape& ys) {
                         Shape per = {1, ys[1]};
                         for (size_t i = 2; i < ys.size(); ++i) per.push_back(1);
                         NodeId mul = t.op("Mul", {y, t.constant(per, uniform_floats(ys[1], 78))});
                         return t.op("Add", {InputRef::by_id(mul, 0), t.constant(per, uniform_floats(ys[1], 79))});
                     }});
    return tails;
}

std::vector<ConvSpec> every_conv() {
    return {
        {"1x1 on NCHW, M and N tails", false, {1, 16, 9, 11}, {19, 16, 1, 1}, 1, {}, {}, {}},
        {"3x3 padded (padded planes)", false, {1, 8, 13, 17}, {16, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
        {"3x3 dilated, asymmetric pads", false, {2, 5, 12, 10}, {7, 5, 3, 3}, 1, {}, {2, 2}, {2, 1, 0, 2}},
        {"3x3 strided (phase planes)", false, {1, 6, 15, 14}, {9, 6, 3, 3}, 1, {2, 2}, {}, {1, 1, 1, 1}},
        {"strides 3 x 2, dilated, asymmetric pads", false, {1, 4, 17, 16}, {6, 4, 3, 3}, 1, {3, 2}, {2, 1}, {2, 1, 1, 2}},
        {"7x7 stride 2 (a ResNet stem)", false, {1, 3, 23, 21}, {8, 3, 7, 7}, 1, {2, 2}, {}, {3, 3, 3, 3}},
        {"1x1 strided (im2col)", false, {2, 12, 9, 9}, {20, 12, 1, 1}, 1, {2, 2}, {}, {}},
        {"grouped 3x3", false, {1, 8, 10, 10}, {16, 4, 3, 3}, 2, {}, {}, {1, 1, 1, 1}},
        {"several blocks of positions", false, {1, 64, 30, 30}, {21, 64, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
        {"one small unit (GEMM parts)", false, {1, 64, 5, 5}, {40, 64, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
        {"1x1, K of 72 (a residual in the tiles' store)", false, {1, 72, 7, 9}, {19, 72, 1, 1}, 1, {}, {}, {}},
        {"3x3, K of 72 under 4 maps (packed panels, residual in the store)", false, {1, 8, 9, 10}, {20, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
        {"3x3, K of 1440 over 64 maps (B packed a K block at a time, the store's operations on the last)", false, {1, 160, 7, 9},
         {72, 160, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
        {"3x3, 32 maps over 7 x 7 (AVX-512: pixel tiles, transposed into Y with the store's operations)", false, {1, 16, 7, 7},
         {32, 16, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
        {"3x3 strided, 2 groups of 16 maps, rows of 19 (pixel tiles)", false, {2, 32, 9, 38}, {32, 16, 3, 3}, 2, {2, 2}, {}, {1, 1, 1, 1}},
        {"1x1 on 7 x 7, 32 maps (pixel tiles across rows)", false, {1, 64, 7, 7}, {32, 64, 1, 1}, 1, {}, {}, {}},
        {"1-D", false, {2, 3, 17}, {5, 3, 4}, 1, {}, {2}, {2, 1}},
        {"ConvTranspose 2x2/2", true, {1, 8, 7, 9}, {8, 6, 2, 2}, 1, {2, 2}, {}, {}},
        {"ConvTranspose 3x3/2 padded, grouped", true, {1, 6, 5, 4}, {6, 3, 3, 3}, 2, {2, 2}, {}, {1, 1, 1, 1}},
    };
}

void check_fused(const std::function<Run(const char*, bool, uint32_t)>& run) {
    for (const auto& isa : machine_isas())
        for (uint32_t threads : {1u, 2u}) {
            const std::string isa_name = isa.first;
            CAPTURE(isa_name);
            CAPTURE(threads);
            Run fused = run(isa.first, true, threads);
            Run plain = run(isa.first, false, threads);
            INFO(fused.kernels);
            // Without JIT GEMM tiles there is nothing to fuse: the islands then run as snippets
            // against reference steps (Sse41 rounds FMA steps), which test_snippets covers.
            if (isa.second) CHECK(count_different(fused.y, plain.y) == 0);
            // With JIT GEMM tiles the conv and its island are one step (the fusion happened).
            CHECK((fused.kernels.find("+epilogue:") != std::string::npos) == isa.second);
            if (isa.second) CHECK(fused.steps == 1);
            CHECK(plain.kernels.find("+epilogue:") == std::string::npos);
        }
}
}  // namespace

TEST_CASE("epilogue: every tail on every conv shape class equals the unfused steps, one step") {
    const std::vector<Tail> tails = every_tail();
    uint32_t seed = 900;
    for (const ConvSpec& cs : every_conv())
        for (const Tail& tail : tails) {
            const std::string conv = cs.what, epilogue = tail.what;
            CAPTURE(conv);
            CAPTURE(epilogue);
            std::vector<float> x = uniform_floats(count_of(cs.x), seed);
            check_fused([&](const char* isa, bool fusion, uint32_t threads) {
                return run_conv_tail(cs, tail, x, seed + 1, isa, fusion, threads);
            });
            seed += 2;
        }
}

TEST_CASE("epilogue: NaN and Inf reach the epilogue as they reach the unfused island") {
    const std::vector<Tail> tails = every_tail();
    for (const ConvSpec& cs : {ConvSpec{"3x3 padded", false, {1, 8, 9, 10}, {12, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
                               ConvSpec{"3x3 padded, 16 maps (pixel tiles)", false, {1, 8, 9, 10}, {16, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}}}) {
        const std::string conv = cs.what;
        CAPTURE(conv);
        std::vector<float> x = uniform_floats(count_of(cs.x), 950);
        x[3] = NAN;
        x[40] = INFINITY;
        x[41] = -INFINITY;
        x[200] = 1e30f;
        for (const Tail& tail : tails) {
            const std::string epilogue = tail.what;
            CAPTURE(epilogue);
            check_fused([&](const char* isa, bool fusion, uint32_t threads) {
                return run_conv_tail(cs, tail, x, 951, isa, fusion, threads);
            });
        }
    }
}

TEST_CASE("epilogue: the fused result against a double reference (conv bound 1e-5 sum |w||x|)") {
    // Conv 3x3 padded + Relu, in double: relu(bias + sum w x).
    const Shape xs = {1, 7, 11, 12}, ws = {10, 7, 3, 3};
    std::vector<float> x = uniform_floats(count_of(xs), 960), w = uniform_floats(count_of(ws), 961);
    std::vector<float> bias = uniform_floats(10, 962);
    const ConvSpec cs = {"3x3", false, xs, ws, 1, {}, {}, {1, 1, 1, 1}};
    Tail relu = {"Relu", [](OpTest& t, InputRef y, const Shape&) { return t.op("Relu", {y}); }};
    for (const auto& isa : machine_isas()) {
        const std::string isa_name = isa.first;
        CAPTURE(isa_name);
        Run fused = run_conv_tail(cs, relu, x, 961, isa.first, true, 1);
        REQUIRE(fused.y.size() == (size_t)(10 * 11 * 12));
        int64_t bad = 0;
        for (int64_t m = 0; m < 10; ++m)
            for (int64_t oy = 0; oy < 11; ++oy)
                for (int64_t ox = 0; ox < 12; ++ox) {
                    double sum = bias[(size_t)m], mag = std::fabs(sum);
                    for (int64_t c = 0; c < 7; ++c)
                        for (int64_t ky = 0; ky < 3; ++ky)
                            for (int64_t kx = 0; kx < 3; ++kx) {
                                int64_t iy = oy - 1 + ky, ix = ox - 1 + kx;
                                if (iy < 0 || iy >= 11 || ix < 0 || ix >= 12) continue;
                                double p = (double)x[(size_t)((c * 11 + iy) * 12 + ix)] * w[(size_t)(((m * 7 + c) * 3 + ky) * 3 + kx)];
                                sum += p;
                                mag += std::fabs(p);
                            }
                    double want = sum > 0 ? sum : 0, got = fused.y[(size_t)((m * 11 + oy) * 12 + ox)];
                    if (!(std::fabs(got - want) <= 1e-5 * mag + 1e-30) && bad++ < 5) MESSAGE("got " << got << ", want " << want);
                }
        CHECK(bad == 0);
    }
}

TEST_CASE("epilogue: a residual made in the model gives its buffer to the output where the tiles store each element once") {
    // The residual a Softmax's output that dies at the Add: where the tiles add it as they store
    // each final value (K in one block), the fused output takes its buffer; where they store K
    // blocks' partial sums first, or the island runs after them, it must not (the sums would
    // overwrite the residual), and the results still equal the unfused steps'. Against the same
    // model with the residual also a graph output (kept: never shared).
    auto run = [](const ConvSpec& cs, const std::vector<float>& x, uint32_t seed, const char* isa, bool fusion, uint32_t threads,
                  bool kept) {
        return run_model([&](OpTest& t) {   // the Softmax first: ready when the conv's step runs
            const Shape ys = conv_output_shape(cs);
            NodeId soft = t.op("Softmax", {t.input(ys, uniform_floats(count_of(ys), 975))});
            t.set_int("axis", 1);
            if (kept) REQUIRE(t.model.add_output("skip", InputRef::by_id(soft, 0)) == Status::Ok);
            NodeId add = t.op("Add", {InputRef::by_id(add_conv(t, cs, x, seed), 0), InputRef::by_id(soft, 0)});
            return t.op("Relu", {InputRef::by_id(add, 0)});
        }, isa, fusion, threads);
    };
    uint32_t seed = 976;
    for (const ConvSpec& cs : every_conv()) {
        if (cs.transpose) continue;
        const std::string conv = cs.what;
        CAPTURE(conv);
        std::vector<float> x = uniform_floats(count_of(cs.x), seed);
        for (const auto& isa : machine_isas())
            for (uint32_t threads : {1u, 2u}) {
                const std::string isa_name = isa.first;
                CAPTURE(isa_name);
                CAPTURE(threads);
                Run fused = run(cs, x, seed + 1, isa.first, true, threads, false);
                Run plain = run(cs, x, seed + 1, isa.first, false, threads, false);
                Run kept = run(cs, x, seed + 1, isa.first, true, threads, true);
                INFO(fused.kernels);
                CHECK(count_different(fused.y, plain.y) == 0);
                CHECK(count_different(fused.y, kept.y) == 0);
                // K of 72 in one block, the residual in the store; K of 1440 in two blocks or more.
                const bool shared = fused.arena_bytes < kept.arena_bytes;
                if (conv.find("1x1, K of 72") != std::string::npos) CHECK(shared == isa.second);
                if (conv.find("K of 1440") != std::string::npos || !isa.second) CHECK(!shared);
                CHECK(fused.arena_bytes <= kept.arena_bytes);
            }
        seed += 2;
    }
}

TEST_CASE("epilogue: a residual made in the model gives its buffer to a MatMul's output where K is one block") {
    struct Product { const char* what; Shape a; int64_t n; bool shares; };
    const Product products[] = {
        {"37x72 by 72x45", {37, 72}, 45, true},
        {"batch 2 x 29x72 by 72x70", {2, 29, 72}, 70, true},
        {"20x1440 by 1440x40 (K blocks: partial sums stored first)", {20, 1440}, 40, false},
    };
    uint32_t seed = 990;
    for (const Product& pr : products) {
        const std::string product = pr.what;
        CAPTURE(product);
        const int64_t k = pr.a.back();
        std::vector<float> a = uniform_floats(count_of(pr.a), seed), b = uniform_floats(k * pr.n, seed + 1);
        Shape ys = pr.a;
        ys.back() = pr.n;
        auto run = [&](const char* isa, bool fusion, uint32_t threads, bool kept) {
            return run_model([&](OpTest& t) {   // MatMul + Softmax(r) (made first), then Relu
                NodeId soft = t.op("Softmax", {t.input(ys, uniform_floats(count_of(ys), seed + 2))});
                if (kept) REQUIRE(t.model.add_output("skip", InputRef::by_id(soft, 0)) == Status::Ok);
                NodeId mm = t.op("MatMul", {t.input(pr.a, a), t.constant(Shape{k, pr.n}, b)});
                NodeId add = t.op("Add", {InputRef::by_id(soft, 0), InputRef::by_id(mm, 0)});
                return t.op("Relu", {InputRef::by_id(add, 0)});
            }, isa, fusion, threads);
        };
        for (const auto& isa : machine_isas())
            for (uint32_t threads : {1u, 2u}) {
                const std::string isa_name = isa.first;
                CAPTURE(isa_name);
                CAPTURE(threads);
                Run fused = run(isa.first, true, threads, false), plain = run(isa.first, false, threads, false);
                Run kept = run(isa.first, true, threads, true);
                INFO(fused.kernels);
                CHECK(count_different(fused.y, plain.y) == 0);
                CHECK(count_different(fused.y, kept.y) == 0);
                CHECK((fused.arena_bytes < kept.arena_bytes) == (pr.shares && isa.second));
            }
        seed += 3;
    }
}

TEST_CASE("epilogue: islands that cannot be an epilogue stay their own step") {
    const ConvSpec cs = {"3x3", false, {1, 4, 6, 6}, {8, 4, 3, 3}, 1, {}, {}, {1, 1, 1, 1}};
    std::vector<float> x = uniform_floats(count_of(cs.x), 970);
    // The conv's output also read outside the island (by a second island): no epilogue.
    Tail two_readers = {"two readers", [](OpTest& t, InputRef y, const Shape&) {
                            NodeId a = t.op("Relu", {y});
                            NodeId pool = t.op("GlobalAveragePool", {y});
                            return t.op("Add", {InputRef::by_id(a, 0), InputRef::by_id(pool, 0)});
                        }};
    // An island broadcasting the conv's output to a larger shape: no epilogue.
    Tail broadcast = {"broadcast beyond the output", [](OpTest& t, InputRef y, const Shape& ys) {
                          Shape big = ys;
                          big[0] = 2;
                          return t.op("Add", {y, t.input(big, uniform_floats(count_of(big), 971))});
                      }};
    for (const Tail* tail : {&two_readers, &broadcast})
        for (const auto& isa : machine_isas()) {
            const std::string epilogue = tail->what, isa_name = isa.first;
            CAPTURE(epilogue);
            CAPTURE(isa_name);
            Run fused = run_conv_tail(cs, *tail, x, 972, isa.first, true, 1);
            Run plain = run_conv_tail(cs, *tail, x, 972, isa.first, false, 1);
            INFO(fused.kernels);
            CHECK(fused.kernels.find("+epilogue:") == std::string::npos);
            if (isa.second) CHECK(count_different(fused.y, plain.y) == 0);
        }
}

TEST_CASE("epilogue: MatMul and Gemm with their tails (bias, GELU, residual, Relu), tails of M and N, batches") {
    const std::vector<Tail> tails = every_tail();
    struct Product { const char* what; bool gemm; Shape a; int64_t n; };
    const Product products[] = {
        {"MatMul 37x50 by 50x45", false, {37, 50}, 45},
        {"MatMul batch 2 x 29x64 by 64x70", false, {2, 29, 64}, 70},
        {"MatMul one small product (GEMM parts)", false, {16, 40}, 120},
        {"Gemm transB 33x20 by (47x20)'", true, {33, 20}, 47},
    };
    uint32_t seed = 980;
    for (const Product& pr : products)
        for (const Tail& tail : tails) {
            const std::string product = pr.what, epilogue = tail.what;
            CAPTURE(product);
            CAPTURE(epilogue);
            const int64_t k = pr.a.back();
            std::vector<float> a = uniform_floats(count_of(pr.a), seed), b = uniform_floats(k * pr.n, seed + 1);
            std::vector<float> bias = uniform_floats(pr.n, seed + 2);
            Shape y_shape = pr.a;
            y_shape.back() = pr.n;
            // The per-channel tail reads dim 1: for a product, make it a per-column constant.
            if (epilogue.find("per-channel") != std::string::npos && y_shape.size() != 3) continue;
            check_fused([&](const char* isa, bool fusion, uint32_t threads) {
                return run_model([&](OpTest& t) {
                    NodeId y;
                    if (pr.gemm) {
                        y = t.op("Gemm", {t.input(pr.a, a), t.constant(Shape{pr.n, k}, b), t.constant(Shape{pr.n}, bias)});
                        t.set_int("transB", 1);
                    } else {
                        NodeId mm = t.op("MatMul", {t.input(pr.a, a), t.constant(Shape{k, pr.n}, b)});
                        y = t.op("Add", {InputRef::by_id(mm, 0), t.constant(Shape{pr.n}, bias)});
                        // MatMul + bias Add + tail: the Add is the epilogue's first member
                        return tail.build(t, InputRef::by_id(y, 0), y_shape);
                    }
                    return tail.build(t, InputRef::by_id(y, 0), y_shape);
                }, isa, fusion, threads);
            });
            seed += 3;
        }
}
