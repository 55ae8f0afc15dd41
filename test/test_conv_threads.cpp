// Conv on the CPU device split over threads (runtime.h conv_work_split: blocks of positions a
// multiple of the vector width, or GEMM parts): at every ISA the machine has, the output at 2
// and 3 threads equals the 1-thread output bit for bit (each element's sum runs in the same
// order whichever thread and tile computes it), and the 1-thread output is within the GEMM
// bound of a double-precision reference: |got - want| <= 1e-5 sum |w||x| + 1e-30. Shapes
// from the real CNNs' stages (14 x 14, 28 x 28, 7 x 7 maps; 1x1, 3x3, strided, grouped,
// dilated, batch 2; 3-channel stems), also with a fused epilogue (Relu; residual Add and Relu).
// Last, how the thread pool's workers move off the caller's CPU (thread_leave_cpu).
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>
#if defined(__linux__)
#include <sched.h>
#endif
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

enum class Tail { None, Relu, AddRelu };

// Conv (constant weights and bias) and its tail on the CPU device at `isa` and `threads`.
std::vector<float> conv_on_cpu(const test::Conv2dCase& cc, Tail tail, const std::vector<float>& x, const std::vector<float>& w,
                               const std::vector<float>& bias, const std::vector<float>& residual, Isa isa, uint32_t threads,
                               std::string* kernels) {
    OpTest t;
    const NodeId conv = t.op("Conv", {t.input(cc.x, x), t.constant(cc.w, w), t.constant(Shape{cc.w[0]}, bias)});
    if (cc.group != 1) t.set_int("group", cc.group);
    if (!cc.strides.empty()) t.set_ints("strides", cc.strides);
    if (!cc.dilations.empty()) t.set_ints("dilations", cc.dilations);
    if (!cc.pads.empty()) t.set_ints("pads", cc.pads);
    if (tail == Tail::AddRelu) t.op("Add", {InputRef::by_id(conv), t.input(test::conv2d_output_shape(cc), residual)});
    if (tail != Tail::None) t.op("Relu", {InputRef::by_id(t.node)});
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    const std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}, {"ISA", isa_name(isa)}};
    test::CompiledRun run;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 3), &run);
    if (!run.compiled.output_count()) return {};
    *kernels = run.kernels;
    const Tensor& out = run.request.output(0);
    const float* p = out.data_as<float>();
    return std::vector<float>(p, p + out.elements());
}

void check_conv_threads(const test::Conv2dCase& cc, Tail tail, uint32_t seed) {
    const std::vector<float> x = test::random_floats(test::count_of(cc.x), seed), w = test::random_floats(test::count_of(cc.w), seed + 1);
    const std::vector<float> bias = test::random_floats(cc.w[0], seed + 2);
    const std::vector<float> residual = test::random_floats(test::count_of(test::conv2d_output_shape(cc)), seed + 3);
    std::vector<double> want, bound;
    if (tail == Tail::None) test::reference_conv2d(cc, x, w, bias, &want, &bound);
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        const std::string target = isa_name(isa);
        CAPTURE(target);
        std::string kernels;
        const std::vector<float> one = conv_on_cpu(cc, tail, x, w, bias, residual, isa, 1, &kernels);
        const bool jit = isa == Isa::Avx2 || isa == Isa::Avx512 || isa == Isa::Neon;
        INFO(kernels);
        const bool gemm = kernels.find("gemm:" + target + ":Conv") != std::string::npos ||
                          kernels.find("gemm:" + target + ":winograd:Conv") != std::string::npos;   // AVX2's 14 x 14 3x3 convs
        CHECK(gemm == jit);
        if (tail == Tail::None) {
            REQUIRE(one.size() == want.size());
            int64_t bad = 0;
            for (size_t i = 0; i < one.size(); ++i)
                if (!(std::fabs((double)one[i] - want[i]) <= bound[i]) && bad++ < 3) MESSAGE("y[" << i << "] = " << one[i] << ", want " << want[i]);
            CHECK(bad == 0);
        }
        for (uint32_t threads : {2u, 3u}) {
            CAPTURE(threads);
            const std::vector<float> y = conv_on_cpu(cc, tail, x, w, bias, residual, isa, threads, &kernels);
            REQUIRE(y.size() == one.size());
            CHECK(std::memcmp(y.data(), one.data(), y.size() * sizeof(float)) == 0);
        }
    }
}

const test::Conv2dCase kStageCases[] = {
    {{1, 64, 14, 14}, {96, 64, 1, 1}, 1, {}, {}, {}},                  // 1x1 on 14 x 14: 196 positions
    {{1, 32, 14, 14}, {48, 32, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},        // 3x3 padded on 14 x 14 (wide rows)
    {{1, 16, 28, 28}, {40, 16, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},        // 3x3 on 28 x 28
    {{1, 24, 28, 28}, {64, 24, 1, 1}, 1, {2, 2}, {}, {}},              // strided 1x1 (im2col) to 14 x 14
    {{1, 64, 7, 7}, {72, 64, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},          // 7 x 7 maps
    {{2, 32, 15, 13}, {32, 16, 3, 3}, 2, {}, {}, {1, 1, 1, 1}},        // batch 2, 2 groups
    {{1, 16, 29, 31}, {24, 16, 3, 3}, 1, {2, 2}, {}, {1, 1, 1, 1}},    // strided 3x3 (phase planes)
    {{1, 8, 56, 56}, {24, 8, 1, 1}, 1, {}, {}, {}},                    // 1x1 on 56 x 56: many blocks
    {{1, 8, 20, 22}, {16, 8, 5, 5}, 1, {}, {2, 2}, {4, 4, 4, 4}},      // 5x5 dilated
    {{1, 3, 123, 119}, {64, 3, 3, 3}, 1, {2, 2}, {}, {1, 0, 0, 1}},    // 3-channel stem, stride 2: many blocks
    {{1, 3, 64, 61}, {16, 3, 3, 3}, 1, {2, 2}, {}, {1, 1, 1, 1}},      // the detector's stem
    {{1, 5, 33, 37}, {20, 5, 3, 3}, 1, {3, 3}, {}, {1, 2, 0, 1}},      // stride 3, asymmetric pads
    {{1, 160, 7, 9}, {72, 160, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},        // K of 1440: B packed a K block at a time
    {{1, 64, 7, 7}, {64, 64, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},          // AVX-512 pixel tiles, one unit: parts by panels of maps
    {{1, 96, 14, 14}, {96, 96, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},        // pixel tiles in bands of rows, 3 panels
    {{2, 32, 13, 15}, {32, 16, 3, 3}, 2, {2, 2}, {}, {1, 1, 1, 1}},    // pixel tiles, strided, 2 images and 2 groups
    {{1, 64, 2, 9}, {64, 64, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},          // pixel tiles, 2 rows for 3 threads: parts by panels
    // more maps than pixels: threads split the maps (each reads its part of the weights), not the rows
    {{1, 64, 5, 6}, {96, 64, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},          // 3 panels: 2 and 1 at 2 threads
    {{3, 128, 7, 7}, {128, 128, 1, 1}, 1, {}, {}, {}},                 // 1x1, 3 images: 6 units at 2 threads
};
}  // namespace

TEST_CASE("conv threads: 2 and 3 threads equal 1 thread bit for bit at every ISA; 1 thread within the GEMM bound") {
    uint32_t seed = 3200;
    for (const test::Conv2dCase& cc : kStageCases) {
        CAPTURE(seed);
        check_conv_threads(cc, Tail::None, seed);
        seed += 5;
    }
}

TEST_CASE("conv threads: convs of one program share tap offsets only where their band geometry is the same") {
    // cpu_conv_band_layout hands a conv the last one's tap offsets when the channels, kernel,
    // dilations, phases, padded width and plane agree. Convs on one input, each differing from
    // the one before in one of those (or in nothing), each within the bound at every ISA.
    const Shape xs = {1, 8, 10, 12};
    const test::Conv2dCase cases[] = {
        {xs, {8, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
        {xs, {8, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},       // the same geometry, other weights
        {xs, {8, 8, 3, 3}, 1, {}, {}, {0, 0, 0, 0}},       // narrower padded rows
        {xs, {8, 8, 3, 3}, 1, {}, {2, 2}, {2, 2, 2, 2}},   // dilated
        {xs, {8, 8, 3, 5}, 1, {}, {}, {1, 2, 1, 2}},       // a wider kernel
        {xs, {8, 4, 3, 3}, 2, {}, {}, {1, 1, 1, 1}},       // 2 groups: fewer channels per group
        {xs, {8, 8, 3, 3}, 1, {1, 2}, {}, {1, 1, 1, 1}},   // column phases
        {xs, {8, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},       // the first geometry again
    };
    const std::vector<float> x = test::random_floats(test::count_of(xs), 4100);
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        CAPTURE(isa_name(isa));
        OpTest t;
        const InputRef in = t.input(xs, x);
        std::vector<std::vector<float>> ws, biases;
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
            const test::Conv2dCase& cc = cases[k];
            ws.push_back(test::random_floats(test::count_of(cc.w), 4101 + (uint32_t)k));
            biases.push_back(test::random_floats(cc.w[0], 4201 + (uint32_t)k));
            const NodeId conv = t.op("Conv", {in, t.constant(cc.w, ws.back()), t.constant(Shape{cc.w[0]}, biases.back())});
            if (cc.group != 1) t.set_int("group", cc.group);
            if (!cc.strides.empty()) t.set_ints("strides", cc.strides);
            if (!cc.dilations.empty()) t.set_ints("dilations", cc.dilations);
            t.set_ints("pads", cc.pads);
            const std::string name = "y" + std::to_string(k);
            REQUIRE(t.model.add_output(StringView(name.c_str()), InputRef::by_id(conv)) == Status::Ok);
        }
        REQUIRE(t.model.finalize() == Status::Ok);
        ConfigEntry config[] = {{"ISA", isa_name(isa)}};
        test::CompiledRun run;
        test::compile_and_infer(t, "CPU", config, &run);
        REQUIRE(run.compiled.output_count() == sizeof cases / sizeof cases[0]);
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
            CAPTURE(k);
            std::vector<double> want, bound;
            test::reference_conv2d(cases[k], x, ws[k], biases[k], &want, &bound);
            const Tensor& out = run.request.output((uint32_t)k);
            REQUIRE(out.elements() == want.size());
            int64_t bad = 0;
            for (size_t i = 0; i < want.size(); ++i)
                if (!(std::fabs((double)out.data_as<float>()[i] - want[i]) <= bound[i]) && bad++ < 3)
                    MESSAGE("y[" << i << "] = " << out.data_as<float>()[i] << ", want " << want[i]);
            CHECK(bad == 0);
        }
    }
}

TEST_CASE("conv threads: a fused epilogue (Relu; residual Add, Relu) splits with the Conv, bit for bit") {
    uint32_t seed = 3300;
    for (const test::Conv2dCase& cc : {kStageCases[0], kStageCases[1], kStageCases[4], kStageCases[5], kStageCases[9], kStageCases[12],
                                      kStageCases[13], kStageCases[14]}) {
        for (Tail tail : {Tail::Relu, Tail::AddRelu}) {
            CAPTURE(seed);
            CAPTURE((int)tail);
            check_conv_threads(cc, tail, seed);
        }
        seed += 5;
    }
}

namespace {
// The bytes of output "y" of t's finalized model on the CPU device at `isa` and `threads`.
std::vector<unsigned char> output_bytes_on_cpu(OpTest& t, Isa isa, uint32_t threads, std::string* kernels) {
    const std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}, {"ISA", isa_name(isa)}};
    test::CompiledRun run;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 3), &run);
    if (!run.compiled.output_count()) return {};
    *kernels = run.kernels;
    const Tensor& out = run.request.output(0);
    const unsigned char* p = static_cast<const unsigned char*>(out.data());
    return std::vector<unsigned char>(p, p + out.bytes());
}

// Concat of run-time inputs of `type` (shapes `xs`) along `axis`.
void build_concat(OpTest& t, const std::vector<Shape>& xs, int64_t axis, ElementType type, uint32_t seed) {
    std::vector<InputRef> in;
    for (size_t i = 0; i < xs.size(); ++i) {
        const size_t size = element_size(type);
        std::vector<unsigned char> bytes((size_t)test::count_of(xs[i]) * size);
        uint32_t state = seed * 2654435761u + (uint32_t)i;
        for (unsigned char& b : bytes) { state = state * 1664525u + 1013904223u; b = (unsigned char)(state >> 24); }
        if (type == ElementType::Float32)
            for (size_t k = 0; k < bytes.size(); k += 4) bytes[k + 3] &= 0x3f;   // finite floats
        in.push_back(t.input(xs[i], bytes, type));
    }
    t.op("Concat", in);
    t.set_int("axis", axis);
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
}
}  // namespace

TEST_CASE("conv threads: Concat split over 2 and 3 threads copies every byte as 1 thread does") {
    struct Case { std::vector<Shape> xs; int64_t axis; ElementType type; };
    const std::vector<Case> cases = {
        {{{1, 64, 28, 28}, {1, 32, 28, 28}}, 1, ElementType::Float32},                      // DenseNet's channel Concat
        {{{1, 24, 14, 14}, {1, 200, 14, 14}, {1, 8, 14, 14}, {1, 1, 14, 14}}, 1, ElementType::Float32},
        {{{2, 40, 30, 30}, {2, 0, 30, 30}, {2, 33, 30, 30}}, 1, ElementType::Float32},      // batch 2, an empty input
        {{{300, 120}, {300, 7}}, 1, ElementType::Float32},                                   // many short runs
        {{{70000}, {61111}}, 0, ElementType::Float32},                                        // one row
        {{{3, 50, 1001}, {3, 50, 999}}, 2, ElementType::UInt8},                               // bytes, odd runs
        {{{5, 9000}, {5, 9001}}, 1, ElementType::Int64},
        {{{1, 4, 8}, {1, 4, 8}}, 1, ElementType::Float32},                                    // small: one thread
    };
    uint32_t seed = 3400;
    for (const Case& cc : cases) {
        CAPTURE(seed);
        OpTest ref;
        build_concat(ref, cc.xs, cc.axis, cc.type, seed);
        for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
            if (!isa_available(isa)) continue;
            const std::string target = isa_name(isa);
            CAPTURE(target);
            std::vector<unsigned char> one;
            for (uint32_t threads : {1u, 2u, 3u}) {
                CAPTURE(threads);
                OpTest t;
                build_concat(t, cc.xs, cc.axis, cc.type, seed);
                std::string kernels;
                const std::vector<unsigned char> y = output_bytes_on_cpu(t, isa, threads, &kernels);
                if (threads == 1) {   // against the inputs laid out by hand
                    one = y;
                    std::vector<unsigned char> want;
                    int64_t outer = 1;
                    for (int64_t d = 0; d < cc.axis; ++d) outer *= cc.xs[0][(size_t)d];
                    for (int64_t o = 0; o < outer; ++o)
                        for (size_t i = 0; i < cc.xs.size(); ++i) {
                            const std::vector<unsigned char>& bytes = t.data[t.runtime_inputs[i]];
                            const size_t run = bytes.size() / (size_t)outer;
                            want.insert(want.end(), bytes.begin() + (std::ptrdiff_t)(o * (int64_t)run),
                                        bytes.begin() + (std::ptrdiff_t)((o + 1) * (int64_t)run));
                        }
                    CHECK(y == want);
                } else {
                    CHECK(y == one);
                }
            }
        }
        seed += 7;
    }
}

TEST_CASE("conv threads: a fused island of a CNN's size runs in parts with the bits of one thread") {
    // Relu(x * s + b) on x[1, 96, 28, 28]: 1.2 MB walked, several parts at 2 and 3 threads.
    const Shape xs = {1, 96, 28, 28}, cs = {1, 96, 1, 1};
    const std::vector<float> x = test::random_floats(test::count_of(xs), 3500), s = test::random_floats(96, 3501),
                             b = test::random_floats(96, 3502);
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        const std::string target = isa_name(isa);
        CAPTURE(target);
        std::vector<unsigned char> one;
        for (uint32_t threads : {1u, 2u, 3u}) {
            CAPTURE(threads);
            OpTest t;
            const NodeId mul = t.op("Mul", {t.input(xs, x), t.input(cs, s)});
            const NodeId add = t.op("Add", {InputRef::by_id(mul), t.input(cs, b)});
            t.op("Relu", {InputRef::by_id(add)});
            REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
            REQUIRE(t.model.finalize() == Status::Ok);
            std::string kernels;
            const std::vector<unsigned char> y = output_bytes_on_cpu(t, isa, threads, &kernels);
            INFO(kernels);
            CHECK(kernels.find("snippet:") != std::string::npos);
            if (threads == 1) one = y;
            else CHECK(y == one);
        }
    }
}

TEST_CASE("threads: thread_leave_cpu moves the thread off a CPU and keeps its allowed CPUs; nowhere to go, it stays") {
#if defined(__linux__) && defined(CPU_SET)
    cpu_set_t before;
    REQUIRE(sched_getaffinity(0, sizeof before, &before) == 0);
    const int cpu = sched_getcpu();
    REQUIRE(cpu >= 0);
    CHECK(!detail::thread_leave_cpu(-1));
    cpu_set_t one, now;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);   // only this CPU allowed
    CHECK(!detail::thread_leave_cpu(cpu));
    CHECK(sched_getcpu() == cpu);
    REQUIRE(sched_getaffinity(0, sizeof now, &now) == 0);
    CHECK(CPU_EQUAL(&now, &one));
    REQUIRE(sched_setaffinity(0, sizeof before, &before) == 0);
    if (CPU_COUNT(&before) < 2) {
        MESSAGE("one CPU allowed here: the move is not tested");
        return;
    }
    const int at = sched_getcpu();
    CHECK(detail::thread_leave_cpu(at));
    CHECK(sched_getcpu() != at);
    REQUIRE(sched_getaffinity(0, sizeof now, &now) == 0);
    CHECK(CPU_EQUAL(&now, &before));
#else
    CHECK(!detail::thread_leave_cpu(0));
#endif
}
