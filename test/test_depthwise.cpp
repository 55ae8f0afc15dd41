// Depthwise Conv: snippets.h's DepthwiseConv (padded phase-split copy, JIT row tiles on AVX2
// and AVX-512, the portable loop elsewhere) and the CPU device's depthwise step, on every ISA
// the machine has (the CPU device's ISA config), against a naive double-precision convolution;
// the reference Conv kernel (TEMPLATE device) is held to the same bound. An elementwise tail
// after it runs as its fused epilogue (runtime.h >>gemm epilogue), equal to the unfused steps.
// Error bound: the taps are summed in order but with FMA, so each element is bounded by its
// own magnitude: |got - want| <= 1e-5 * (sum |w||x| + |bias|) + 1e-30.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

using test::random_floats;

using test::count_of;

// A Conv with one input channel per group: x N x C x [H x] W, `multiplier` maps per channel.
struct DwCase {
    Shape x;
    int64_t multiplier;
    Shape kernel, strides, dilations, pads;   // pads: begins then ends (empty: none)
    bool bias;
    int64_t group = 0;                        // 0: C (depthwise); 1: a one-channel plain conv
};

struct Expected {
    Shape shape;
    std::vector<double> want, bound;
};

Expected naive_depthwise(const DwCase& dc, const std::vector<float>& x, const std::vector<float>& w,
                         const std::vector<float>& bias) {
    const int sp = (int)dc.x.size() - 2;
    const int64_t batch = dc.x[0], channels = dc.x[1], maps = channels * dc.multiplier;
    int64_t in[2] = {1, 1}, k[2] = {1, 1}, s[2] = {1, 1}, d[2] = {1, 1}, pb[2] = {0, 0}, out[2] = {1, 1};
    for (int i = 0; i < sp; ++i) {
        int j = 2 - sp + i;
        in[j] = dc.x[2 + i];
        k[j] = dc.kernel[i];
        if (!dc.strides.empty()) s[j] = dc.strides[i];
        if (!dc.dilations.empty()) d[j] = dc.dilations[i];
        int64_t pe = 0;
        if (!dc.pads.empty()) { pb[j] = dc.pads[i]; pe = dc.pads[sp + i]; }
        out[j] = (in[j] + pb[j] + pe - ((k[j] - 1) * d[j] + 1)) / s[j] + 1;
    }
    Expected e;
    e.shape = {batch, maps};
    for (int i = 0; i < sp; ++i) e.shape.push_back(out[2 - sp + i]);
    e.want.assign((size_t)(batch * maps * out[0] * out[1]), 0.0);
    e.bound.assign(e.want.size(), 0.0);
    size_t at = 0;
    for (int64_t n = 0; n < batch; ++n)
        for (int64_t m = 0; m < maps; ++m)
            for (int64_t o0 = 0; o0 < out[0]; ++o0)
                for (int64_t o1 = 0; o1 < out[1]; ++o1, ++at) {
                    double sum = bias.empty() ? 0.0 : bias[(size_t)m], mag = std::fabs(sum);
                    const int64_t c = m / dc.multiplier;
                    for (int64_t k0 = 0; k0 < k[0]; ++k0)
                        for (int64_t k1 = 0; k1 < k[1]; ++k1) {
                            int64_t i0 = o0 * s[0] - pb[0] + k0 * d[0], i1 = o1 * s[1] - pb[1] + k1 * d[1];
                            if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1]) continue;
                            double p = (double)x[(size_t)(((n * channels + c) * in[0] + i0) * in[1] + i1)] *
                                       (double)w[(size_t)((m * k[0] + k0) * k[1] + k1)];
                            sum += p;
                            mag += std::fabs(p);
                        }
                    e.want[at] = sum;
                    e.bound[at] = 1e-5 * mag + 1e-30;
                }
    return e;
}

int64_t count_bad(const std::vector<float>& got, const Expected& e) {
    REQUIRE(got.size() == e.want.size());
    int64_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (!(std::fabs((double)got[i] - e.want[i]) <= e.bound[i])) {
            if (bad++ < 5) MESSAGE("y[" << i << "] = " << got[i] << ", want " << e.want[i]);
        }
    return bad;
}

// The case's Conv on `device` (config entries), inferred once (allocating nothing); output 0
// and the steps' kernel names.
std::vector<float> infer(const DwCase& dc, const std::vector<float>& x, const std::vector<float>& w,
                         const std::vector<float>& bias, bool constant_weights, const char* device,
                         const std::vector<ConfigEntry>& config, const Shape& out_shape, std::string* kernels) {
    OpTest t;
    const int64_t maps = dc.x[1] * dc.multiplier;
    Shape wshape = {maps, 1};
    wshape.insert(wshape.end(), dc.kernel.begin(), dc.kernel.end());
    std::vector<InputRef> in = {t.input(dc.x, x), constant_weights ? t.constant(wshape, w) : t.input(wshape, w)};
    if (dc.bias) in.push_back(t.constant(Shape{maps}, bias));
    t.op("Conv", in);
    t.set_int("group", dc.group ? dc.group : dc.x[1]);
    if (!dc.strides.empty()) t.set_ints("strides", dc.strides);
    if (!dc.dilations.empty()) t.set_ints("dilations", dc.dilations);
    if (!dc.pads.empty()) t.set_ints("pads", dc.pads);
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    test::CompiledRun run;
    test::compile_and_infer(t, device, Span<const ConfigEntry>(config.data(), config.size()), &run);
    *kernels = run.kernels;
    const Tensor& out = run.request.output(0);
    CHECK(out.desc().rank == (int)out_shape.size());
    for (size_t i = 0; i < out_shape.size() && i < (size_t)out.desc().rank; ++i) CHECK(out.desc().dims[i] == out_shape[i]);
    const float* p = out.data_as<float>();
    return std::vector<float>(p, p + out.elements());
}

std::vector<Isa> machine_isas() {
    std::vector<Isa> isas;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon})
        if (isa_available(isa)) isas.push_back(isa);
    return isas;
}

// The case on every ISA, 1 and 2 threads, constant and run-time weights; the reference kernel once.
void check_case(const DwCase& dc, uint32_t seed, bool all_variants = true) {
    const int64_t maps = dc.x[1] * dc.multiplier;
    std::vector<float> x = random_floats(count_of(dc.x), seed), w = random_floats(maps * count_of(dc.kernel), seed + 1);
    std::vector<float> bias = dc.bias ? random_floats(maps, seed + 2) : std::vector<float>();
    Expected e = naive_depthwise(dc, x, w, bias);
    std::string kernels;
    {
        INFO("the reference Conv kernel");
        std::vector<float> y = infer(dc, x, w, bias, true, "TEMPLATE", {}, e.shape, &kernels);
        CHECK(count_bad(y, e) == 0);
    }
    for (Isa isa : machine_isas())
        for (uint32_t threads : {1u, 2u})
            for (bool constant : {true, false}) {
                if (!all_variants && (threads == 2 || !constant)) continue;
                const std::string target = isa_name(isa);
                CAPTURE(target);
                CAPTURE(threads);
                CAPTURE(constant);
                std::string count = std::to_string(threads);
                std::vector<ConfigEntry> config = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"},
                                                   {"ISA", isa_name(isa)}};
                std::vector<float> y = infer(dc, x, w, bias, constant, "CPU", config, e.shape, &kernels);
                CHECK(count_bad(y, e) == 0);
                // the JIT where the target has it, else the portable loop: never the reference kernel
                const int64_t taps = count_of(dc.kernel);
                const bool jit = ((isa == Isa::Avx2 || isa == Isa::Avx512) && taps <= 49) || (isa == Isa::Neon && taps <= 32);
                std::string name = std::string("depthwise:") + (jit ? isa_name(isa) : "ref") + ":Conv";
                INFO(kernels);
                CHECK(kernels.find(name) != std::string::npos);
            }
}
}  // namespace

TEST_CASE("depthwise: 3x3 stride 1 and 2, every width tail up to two AVX-512 vectors and one") {
    uint32_t seed = 700;
    for (int64_t width = 1; width <= 33; ++width) {
        CAPTURE(width);
        check_case({{1, 2, 3, width}, 1, {3, 3}, {}, {}, {1, 1, 1, 1}, true}, seed++, width % 8 == 1);
        check_case({{1, 2, 4, 2 * width + 1}, 1, {3, 3}, {2, 2}, {}, {1, 1, 1, 1}, width % 2 == 0}, seed++, false);
    }
}

TEST_CASE("depthwise: 5x5 and 7x7, strides, dilation, asymmetric pads, 1-D") {
    uint32_t seed = 800;
    const std::vector<DwCase> cases = {
        {{1, 3, 12, 40}, 1, {5, 5}, {}, {}, {2, 2, 2, 2}, true},                 // 5x5 stride 1
        {{1, 3, 13, 41}, 1, {5, 5}, {2, 2}, {}, {2, 2, 2, 2}, false},            // 5x5 stride 2
        {{1, 2, 15, 37}, 1, {7, 7}, {1, 1}, {}, {3, 3, 3, 3}, true},             // 7x7
        {{1, 2, 15, 37}, 1, {7, 7}, {2, 2}, {}, {3, 2, 1, 3}, true},             // 7x7 stride 2, asymmetric
        {{2, 3, 11, 19}, 1, {3, 3}, {}, {2, 2}, {2, 2, 2, 2}, true},             // dilation 2
        {{1, 2, 11, 29}, 1, {3, 3}, {1, 2}, {3, 2}, {0, 3, 2, 1}, true},         // mixed strides and dilations
        {{1, 2, 9, 20}, 1, {3, 5}, {2, 1}, {}, {1, 0, 0, 3}, false},             // 3x5, asymmetric pads
        {{1, 2, 10, 25}, 1, {3, 3}, {3, 3}, {}, {1, 1, 1, 1}, true},             // stride 3
        {{1, 4, 8, 8}, 1, {3, 3}, {}, {}, {}, true},                             // unpadded
        {{1, 4, 6, 9}, 1, {1, 1}, {}, {}, {}, true},                             // 1x1: a per-channel scale
        {{1, 4, 9, 11}, 1, {11, 3}, {}, {}, {5, 1, 5, 1}, true},                 // 33 taps
        {{1, 2, 12, 12}, 1, {9, 9}, {}, {}, {4, 4, 4, 4}, true},                 // 81 taps: the portable loop
        {{2, 3, 23}, 1, {5}, {2}, {1}, {2, 1}, true},                            // 1-D
        {{1, 5, 70}, 2, {3}, {}, {2}, {2, 2}, false},                            // 1-D, 2 maps per channel
    };
    for (const DwCase& dc : cases) {
        CAPTURE(seed);
        check_case(dc, seed);
        seed += 3;
    }
}

TEST_CASE("depthwise: tiny images, channel multipliers, batches, bands of rows") {
    uint32_t seed = 900;
    const std::vector<DwCase> cases = {
        {{1, 3, 2, 2}, 1, {3, 3}, {}, {}, {1, 1, 1, 1}, true},                   // image smaller than the kernel
        {{1, 3, 1, 1}, 1, {5, 5}, {}, {}, {2, 2, 2, 2}, true},                   // one pixel
        {{1, 2, 3, 2}, 1, {5, 5}, {2, 2}, {}, {2, 2, 2, 2}, false},              // stride 2 on a tiny image
        {{1, 1, 1, 3}, 1, {3, 3}, {}, {}, {1, 1, 1, 1}, true},                   // one row
        {{1, 4, 9, 13}, 2, {3, 3}, {}, {}, {1, 1, 1, 1}, true},                  // multiplier 2
        {{1, 3, 10, 17}, 3, {3, 3}, {2, 2}, {}, {1, 1, 1, 1}, true},             // multiplier 3
        {{2, 3, 7, 21}, 5, {3, 3}, {}, {}, {1, 1, 1, 1}, false},                 // multiplier 5, batch 2
        {{1, 1, 8, 12}, 3, {3, 3}, {}, {}, {1, 1, 1, 1}, true, 1},               // one channel, group 1, 3 maps
        {{3, 2, 14, 14}, 1, {3, 3}, {}, {}, {1, 1, 1, 1}, true},                 // batch 3
        {{1, 2, 40, 5}, 1, {3, 3}, {}, {}, {1, 1, 1, 1}, true},                  // narrow and tall: row tiles
        {{1, 1, 37, 200}, 1, {3, 3}, {}, {}, {1, 1, 1, 1}, true},                // one plane in bands, block loops
        {{1, 1, 300, 300}, 1, {3, 3}, {}, {}, {1, 1, 1, 1}, false},              // a plane beyond half of L2
    };
    for (const DwCase& dc : cases) {
        CAPTURE(seed);
        check_case(dc, seed);
        seed += 3;
    }
}

TEST_CASE("depthwise: DepthwiseConv directly: whole plane and bands agree, bad shapes") {
    DepthwiseShape s;
    s.in_h = 9, s.in_w = 21, s.out_h = 5, s.out_w = 11, s.kernel_h = 3, s.kernel_w = 3;
    s.stride_h = s.stride_w = 2, s.pad_top = s.pad_left = 1;
    std::vector<float> x = random_floats(s.in_h * s.in_w, 1), w = random_floats(9, 2);
    for (Isa isa : machine_isas()) {
        const std::string target = isa_name(isa);
        CAPTURE(target);
        DepthwiseConv conv;
        REQUIRE(conv.init(s, isa) == Status::Ok);
        CHECK(conv.jit() == (isa == Isa::Avx2 || isa == Isa::Avx512 || isa == Isa::Neon));
        std::vector<float> scratch(conv.scratch_floats(s.out_h)), whole((size_t)(s.out_h * s.out_w)), banded(whole.size());
        conv.run(x.data(), w.data(), 0.5f, whole.data(), scratch.data());
        std::vector<float> other(x.size(), 3.0f);
        for (int64_t r = 0; r < s.out_h; r += 2) {   // bands of 2 rows: each its own copy
            int64_t end = r + 2 < s.out_h ? r + 2 : s.out_h;
            CHECK(conv.scratch_floats(2) <= scratch.size());
            conv.pad(other.data(), r, end, scratch.data());
            conv.pad(x.data(), r, end, scratch.data(), true);   // over another plane's copy of the band
            conv.run_rows(scratch.data(), w.data(), 0.5f, banded.data(), r, end);
        }
        CHECK(std::memcmp(whole.data(), banded.data(), whole.size() * sizeof(float)) == 0);
    }
    DepthwiseConv conv;
    DepthwiseShape bad = s;
    bad.kernel_w = 0;
    CHECK(conv.init(bad, Isa::Ref) == Status::InvalidArgument);
    bad = s;
    bad.pad_left = -1;
    CHECK(conv.init(bad, Isa::Ref) == Status::InvalidArgument);
    bad = s;
    bad.out_h = (int64_t)1 << 25;
    CHECK(conv.init(bad, Isa::Ref) == Status::InvalidArgument);
    bad = s;
    bad.stride_w = 17;
    CHECK(conv.init(bad, Isa::Ref) == Status::Unsupported);
    bad = s;
    bad.dilation_h = bad.dilation_w = (int64_t)1 << 24;
    bad.kernel_h = bad.kernel_w = 1 << 12;
    CHECK(conv.init(bad, Isa::Ref) == Status::Unsupported);
#if defined(__x86_64__)
    CHECK(conv.init(s, Isa::Neon) == Status::Unsupported);
#else
    CHECK(conv.init(s, Isa::Avx512) == Status::Unsupported);
#endif
}

namespace {
// Depthwise Conv (constant weights and bias) + an elementwise tail on CPU, FUSION on or off.
struct TailRun {
    std::vector<float> y;
    std::string kernels;
    size_t steps = 0;
};

TailRun run_with_tail(const DwCase& dc, const char* tail, const std::vector<float>& x, const std::vector<float>& w,
                      const std::vector<float>& bias, const char* isa, bool fusion, uint32_t threads) {
    OpTest t;
    const int64_t maps = dc.x[1] * dc.multiplier;
    Shape wshape = {maps, 1};
    wshape.insert(wshape.end(), dc.kernel.begin(), dc.kernel.end());
    NodeId conv = t.op("Conv", {t.input(dc.x, x), t.constant(wshape, w), t.constant(Shape{maps}, bias)});
    t.set_int("group", dc.x[1]);
    if (!dc.strides.empty()) t.set_ints("strides", dc.strides);
    if (!dc.pads.empty()) t.set_ints("pads", dc.pads);
    InputRef y = InputRef::by_id(conv, 0);
    NodeId last = kNoNode;
    const std::string kind = tail;
    if (kind == "Clip") {
        last = t.op("Clip", {y, t.constant(Shape{}, std::vector<float>{0.0f}), t.constant(Shape{}, std::vector<float>{6.0f})});
    } else if (kind == "BatchNorm+HardSwish") {   // a folded BatchNormalization's scale and shift, then the activation
        Shape per = {1, maps, 1, 1};
        NodeId mul = t.op("Mul", {y, t.constant(per, random_floats(maps, 41))});
        NodeId add = t.op("Add", {InputRef::by_id(mul, 0), t.constant(per, random_floats(maps, 42))});
        last = t.op("HardSwish", {InputRef::by_id(add, 0)});
    } else {
        last = t.op(tail, {y});
    }
    REQUIRE(t.model.add_output("out", InputRef::by_id(last, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}, {"ISA", StringView(isa)},
                            {"FUSION", fusion ? "YES" : "NO"}};
    test::CompiledRun run;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 4), &run);
    TailRun r;
    r.kernels = run.kernels;
    r.steps = run.steps;
    const Tensor& out = run.request.output(0);
    r.y.assign(out.data_as<float>(), out.data_as<float>() + out.elements());
    return r;
}
}  // namespace

TEST_CASE("depthwise: the activation after it runs as its epilogue, equal to the unfused steps") {
    const std::vector<DwCase> cases = {
        {{1, 6, 13, 21}, 1, {3, 3}, {}, {}, {1, 1, 1, 1}, true},
        {{2, 4, 11, 37}, 2, {5, 5}, {2, 2}, {}, {2, 2, 2, 2}, true},
        {{1, 3, 40, 5}, 1, {3, 3}, {}, {}, {1, 1, 1, 1}, true},   // one plane per channel in bands at 2 threads
        {{2, 70, 5, 5}, 2, {5, 5}, {}, {}, {2, 2, 2, 2}, true},   // small planes, many maps, two images
        {{1, 90, 10, 10}, 1, {3, 3}, {2, 2}, {}, {1, 1, 1, 1}, false},
    };
    uint32_t seed = 1000;
    for (const DwCase& dc : cases)
        for (const char* tail : {"Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "BatchNorm+HardSwish"}) {
            const int64_t maps = dc.x[1] * dc.multiplier;
            std::vector<float> x = random_floats(count_of(dc.x), seed), w = random_floats(maps * count_of(dc.kernel), seed + 1),
                               bias = random_floats(maps, seed + 2);
            seed += 3;
            CAPTURE(seed);
            const std::string epilogue = tail;
            CAPTURE(epilogue);
            for (Isa isa : machine_isas())
                for (uint32_t threads : {1u, 2u}) {
                    const std::string target = isa_name(isa);
                    CAPTURE(target);
                    CAPTURE(threads);
                    TailRun fused = run_with_tail(dc, tail, x, w, bias, isa_name(isa), true, threads);
                    TailRun plain = run_with_tail(dc, tail, x, w, bias, isa_name(isa), false, threads);
                    INFO(fused.kernels);
                    REQUIRE(fused.y.size() == plain.y.size());
                    // Bitwise on the suite's own target (TESSEL_ISA). Elsewhere the unfused island's
                    // reference kernels round FMA steps as TESSEL_ISA does and the epilogue as its
                    // target does; and SSE4.1's island run in segments rounds a few FMA steps
                    // unlike its whole run (HardSigmoid, Sigmoid): within 1e-5 |y| + 1e-6 there.
                    const bool exact = isa == default_isa() && isa != Isa::Sse41;
                    const double relative = exact ? 0.0 : 1e-5, absolute = exact ? 0.0 : 1e-6;
                    int64_t different = 0;
                    for (size_t i = 0; i < fused.y.size(); ++i)
                        if (!(std::fabs((double)fused.y[i] - plain.y[i]) <= relative * std::fabs((double)plain.y[i]) + absolute)) {
                            if (different++ < 5) MESSAGE("y[" << i << "] = " << fused.y[i] << " fused, " << plain.y[i] << " unfused");
                        }
                    CHECK(different == 0);
                    // an epilogue is a JIT snippet: every target but ref fuses
                    CHECK((fused.kernels.find("+epilogue:") != std::string::npos) == (isa != Isa::Ref));
                    CHECK(fused.kernels.find("depthwise:") != std::string::npos);
                    if (isa != Isa::Ref) CHECK(fused.steps == 1);
                }
        }
}

TEST_CASE("depthwise: an empty batch compiles and runs to an empty output") {
    // x[0, 2, 5, 6] through a 3x3 depthwise conv: no planes to split into bands (once a division by zero)
    Model m;
    NodeId x, w, y;
    REQUIRE(m.add_input("x", test::make_desc(ElementType::Float32, {0, 2, 5, 6}), &x) == Status::Ok);
    std::vector<float> weights(2 * 9, 0.5f);
    REQUIRE(m.add_constant("w", test::make_desc(ElementType::Float32, {2, 1, 3, 3}), weights.data(), &w) == Status::Ok);
    InputRef in[] = {InputRef::by_id(x), InputRef::by_id(w)};
    REQUIRE(m.add_node("Conv", "conv", in, 1, &y) == Status::Ok);
    REQUIRE(m.set_int(y, "group", 2) == Status::Ok);
    REQUIRE(m.add_output("y", InputRef::by_id(y)) == Status::Ok);
    REQUIRE(m.finalize() == Status::Ok);
    Core core;
    CompiledModel compiled;
    Status s = core.compile_model(m, "CPU", {}, &compiled);
    INFO(std::string(core.last_error()));
    REQUIRE(s == Status::Ok);
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    Tensor input;
    std::vector<int64_t> dims = {0, 2, 5, 6};
    REQUIRE(input.allocate(ElementType::Float32, Span<const int64_t>(dims.data(), 4)) == Status::Ok);
    REQUIRE(request.set_input(0, input) == Status::Ok);
    REQUIRE(request.infer() == Status::Ok);
    CHECK(request.output(0).elements() == 0);
    CHECK(request.output(0).rank() == 4);
}
