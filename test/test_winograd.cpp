// Winograd F(4x4, 3x3) convs (snippets.h WinogradF43, runtime.h >>conv winograd), on AVX-512 and
// AVX2 where the CPU has them: the transform kernels equal their portable loops bit for bit
// (the same operations in the same order) on every tail of tiles; whole Convs against a
// double-precision reference within the direct conv's bound, |got - want| <= 1e-5 sum |w||x| +
// 1e-30 (on these uniform inputs the error stays above 2e-6 of it: the transforms' constants,
// up to 8, cost precision); 2 and 3 threads equal 1 bit for bit; fused epilogues; the kernel
// named gemm:<isa>:winograd:Conv exactly where the image has the ISA's tiles (36, 16 on AVX2);
// U of 10 MiB streamed per band of a whole image, the threads splitting its panels.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>
#include "op_test.h"
#include "runtime.h"
#include "snippets.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

const Isa kWinogradIsas[] = {Isa::Avx512, Isa::Avx2};

void check_transforms(Isa isa) {
    WinogradF43 jit, portable;
    REQUIRE(jit.init(isa) == Status::Ok);
    REQUIRE(jit.jit());
    REQUIRE(portable.init(Isa::Ref) == Status::Ok);
    REQUIRE(!portable.jit());
    for (int64_t tiles : {1, 5, 7, 8, 9, 15, 16, 17, 31, 32, 37}) {
        for (int64_t channels : {1, 3}) {
            CAPTURE(tiles);
            CAPTURE(channels);
            // Input: 6 rows of 4 phases of q = tiles + 1 floats per channel, one spare row; V
            // pitches with a guard past each channel's tiles (it must stay untouched).
            const int64_t q = tiles + 1, row = 4 * q + 3, channel = 7 * row, v_channel = tiles + 5, v_point = channels * v_channel + 2;
            const std::vector<float> rows = test::random_floats(channels * channel, (uint32_t)(tiles * 10 + channels), 2.0f);
            std::vector<float> a((size_t)(36 * v_point), 7.0f), b = a;
            jit.transform_input(rows.data(), channels, channel, row, q, tiles, a.data(), v_point, v_channel);
            portable.transform_input(rows.data(), channels, channel, row, q, tiles, b.data(), v_point, v_channel);
            CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
            int64_t untouched = 0;
            for (int64_t p = 0; p < 36; ++p)
                for (int64_t c = 0; c < channels; ++c)
                    for (int64_t t = tiles; t < v_channel; ++t) untouched += a[(size_t)(p * v_point + c * v_channel + t)] == 7.0f;
            CHECK(untouched == 36 * channels * (v_channel - tiles));
        }
        for (int64_t maps : {8, 16, 32}) {
            if (maps % isa_vector_floats(isa) != 0) continue;
            CAPTURE(maps);
            const int64_t ld = 32, m_point = tiles * ld + 16, o_row = 4 * tiles * ld + 8;
            const std::vector<float> m = test::random_floats(36 * m_point, (uint32_t)(tiles * 20 + maps), 3.0f);
            std::vector<float> a((size_t)(4 * o_row), 5.0f), b = a;
            jit.transform_output(m.data(), m_point, ld, tiles, maps, a.data(), o_row);
            portable.transform_output(m.data(), m_point, ld, tiles, maps, b.data(), o_row);
            CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
            int64_t written = 0;   // maps past `maps` and floats past the tiles' pixels keep their value
            for (float v : a) written += v != 5.0f;
            CHECK(written <= 16 * tiles * maps);
        }
    }
}

struct WinogradCase {
    test::Conv2dCase conv;   // one group, stride 1, undilated
    const char* what;
};

enum class Tail { None, Relu, AddRelu, Neg };   // Neg: an epilogue the tiles' stores cannot do

std::vector<float> conv_on_cpu(const WinogradCase& cc, Tail tail, const std::vector<float>& x, const std::vector<float>& w,
                               const std::vector<float>& bias, const std::vector<float>& residual, uint32_t threads,
                               Isa isa, std::string* kernels, const char* winograd = "YES") {
    OpTest t;
    const NodeId conv = t.op("Conv", {t.input(cc.conv.x, x), t.constant(cc.conv.w, w), t.constant(Shape{cc.conv.w[0]}, bias)});
    if (!cc.conv.pads.empty()) t.set_ints("pads", cc.conv.pads);
    if (tail == Tail::AddRelu) t.op("Add", {InputRef::by_id(conv), t.input(test::conv2d_output_shape(cc.conv), residual)});
    if (tail == Tail::Neg) t.op("Neg", {InputRef::by_id(t.node)});
    else if (tail != Tail::None) t.op("Relu", {InputRef::by_id(t.node)});
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    const std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}, {"ISA", isa_name(isa)},
                            {"WINOGRAD", winograd}};
    test::CompiledRun run;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 4), &run);
    if (!run.compiled.output_count()) return {};
    *kernels = run.kernels;
    const Tensor& out = run.request.output(0);
    const float* p = out.data_as<float>();
    return std::vector<float>(p, p + out.elements());
}

const WinogradCase kCases[] = {
    {{{1, 16, 24, 24}, {32, 16, 3, 3}, 1, {}, {}, {1, 1, 1, 1}}, "24 x 24 padded: 6 x 6 tiles, one panel"},
    {{{1, 32, 23, 29}, {48, 32, 3, 3}, 1, {}, {}, {1, 1, 1, 1}}, "23 x 29: the last tile row and column partly outside, panels of 32 and 16"},
    {{{1, 16, 27, 26}, {16, 16, 3, 3}, 1, {}, {}, {}}, "no pads: 25 x 24"},
    {{{1, 24, 25, 30}, {32, 24, 3, 3}, 1, {}, {}, {0, 2, 1, 0}}, "asymmetric pads, 24 channels"},
    {{{2, 16, 24, 21}, {32, 16, 3, 3}, 1, {}, {}, {1, 1, 1, 1}}, "2 images"},
    {{{1, 300, 24, 24}, {16, 300, 3, 3}, 1, {}, {}, {1, 1, 1, 1}}, "300 channels: K of the column tiles past a vector multiple"},
    {{{1, 256, 28, 28}, {32, 256, 3, 3}, 1, {}, {}, {1, 1, 1, 1}}, "256 channels: bands of one tile row (a quarter of a 1 MiB L2 holds one row's V)"},
    {{{1, 64, 56, 56}, {64, 64, 3, 3}, 1, {}, {}, {1, 1, 1, 1}}, "ResNet-50's 56 x 56 stage"},
    {{{1, 32, 14, 14}, {32, 32, 3, 3}, 1, {}, {}, {1, 1, 1, 1}}, "14 x 14: 16 tiles, Winograd on AVX2, the direct path on AVX-512"},
    // U of 10 MiB, more than 4 x L2 on CPUs with up to 2 MiB of L2: bands of every tile row run
    // point by point, threads splitting the panels where the images alone would leave one idle
    {{{1, 256, 22, 26}, {272, 256, 3, 3}, 1, {}, {}, {1, 1, 1, 1}}, "U streamed: one image, panels split between threads, the last panel partial"},
    {{{3, 256, 23, 26}, {272, 256, 3, 3}, 1, {}, {}, {0, 1, 1, 0}}, "U streamed: 3 images, 6 x 7 tiles, no pad right or below"},
};
}  // namespace

TEST_CASE("winograd: the input and output transforms' JIT kernels equal their portable loops bit for bit") {
    for (Isa isa : kWinogradIsas) {
        CAPTURE(isa_name(isa));
        if (isa_available(isa)) check_transforms(isa);
        else MESSAGE("no " << isa_name(isa) << ": its Winograd kernels are not generated on this CPU");
    }
}

namespace {
void check_convs(Isa isa) {
    const std::string winograd = std::string("gemm:") + isa_name(isa) + ":winograd:Conv";
    uint32_t seed = 9100;
    for (const WinogradCase& cc : kCases) {
        const std::string what = cc.what;
        CAPTURE(what);
        const Shape out = test::conv2d_output_shape(cc.conv);
        const int64_t tiles = (out[2] + 3) / 4 * ((out[3] + 3) / 4);
        const bool takes = tiles >= (isa == Isa::Avx512 ? 36 : 16);
        const std::vector<float> x = test::random_floats(test::count_of(cc.conv.x), seed);
        const std::vector<float> w = test::random_floats(test::count_of(cc.conv.w), seed + 1);
        const std::vector<float> bias = test::random_floats(cc.conv.w[0], seed + 2);
        const std::vector<float> residual = test::random_floats(test::count_of(test::conv2d_output_shape(cc.conv)), seed + 3);
        seed += 5;
        std::vector<double> want, bound;
        test::reference_conv2d(cc.conv, x, w, bias, &want, &bound);
        for (Tail tail : {Tail::None, Tail::Relu, Tail::AddRelu, Tail::Neg}) {
            CAPTURE((int)tail);
            std::string kernels;
            const std::vector<float> one = conv_on_cpu(cc, tail, x, w, bias, residual, 1, isa, &kernels);
            INFO(kernels);
            CHECK((kernels.find(winograd) != std::string::npos) == takes);
            REQUIRE(one.size() == want.size());
            int64_t bad = 0;
            for (size_t i = 0; i < one.size(); ++i) {
                double v = want[i];
                if (tail == Tail::AddRelu) v += residual[i];
                if (tail == Tail::Neg) v = -v;
                else if (tail != Tail::None) v = v > 0 ? v : 0;
                if (!(std::fabs((double)one[i] - v) <= bound[i] + (tail == Tail::AddRelu ? 1e-7 : 0.0)) && bad++ < 3)
                    MESSAGE("y[" << i << "] = " << one[i] << ", want " << v);
            }
            CHECK(bad == 0);
            for (uint32_t threads : {2u, 3u}) {
                CAPTURE(threads);
                const std::vector<float> y = conv_on_cpu(cc, tail, x, w, bias, residual, threads, isa, &kernels);
                REQUIRE(y.size() == one.size());
                CHECK(std::memcmp(y.data(), one.data(), y.size() * sizeof(float)) == 0);
            }
        }
    }
}
}  // namespace

TEST_CASE("winograd: 3x3 convs against the reference, 2 and 3 threads bit for bit, fused Relu, residual Add and Neg") {
    for (Isa isa : kWinogradIsas) {
        CAPTURE(isa_name(isa));
        if (isa_available(isa)) check_convs(isa);
        else MESSAGE("no " << isa_name(isa) << ": its Winograd convs do not run on this CPU");
    }
}

TEST_CASE("winograd: WINOGRAD=NO runs a Conv that would take it on the other paths, within the same bound") {
    const WinogradCase& cc = kCases[0];
    const std::vector<float> x = test::random_floats(test::count_of(cc.conv.x), 9300);
    const std::vector<float> w = test::random_floats(test::count_of(cc.conv.w), 9301);
    const std::vector<float> bias = test::random_floats(cc.conv.w[0], 9302);
    std::vector<double> want, bound;
    test::reference_conv2d(cc.conv, x, w, bias, &want, &bound);
    for (Isa isa : kWinogradIsas) {
        CAPTURE(isa_name(isa));
        if (!isa_available(isa)) continue;
        std::string kernels;
        const std::vector<float> y = conv_on_cpu(cc, Tail::None, x, w, bias, {}, 1, isa, &kernels, "NO");
        INFO(kernels);
        CHECK(kernels.find(std::string("gemm:") + isa_name(isa) + ":Conv") != std::string::npos);
        CHECK(kernels.find("winograd") == std::string::npos);
        REQUIRE(y.size() == want.size());
        int64_t bad = 0;
        for (size_t i = 0; i < y.size(); ++i) bad += !(std::fabs((double)y[i] - want[i]) <= bound[i]);
        CHECK(bad == 0);
    }
}
