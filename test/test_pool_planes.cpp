// snippets.h's PoolPlanes (whole pool planes, borders by lane masks) against a scalar
// reference written from the ONNX rule, on every ISA the CPU has (the JIT kernel on AVX-512, the
// portable loop elsewhere): ties of both zeros and NaNs in every tap position, strides 1 and 2,
// pads and windows past the last pad (ceil mode), both divisors, planes between guard pages;
// kernels that keep input rows' taps in registers and kernels that load every tap.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>
#include "snippets.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

// Output (oh, ow) of one plane: taps row by row, left to right, those outside the plane skipped;
// the max starts at the first one (v > acc ? v : acc after it), the average sums from 0 and
// divides by its real taps, or by its taps before the end pads with count_include_pad.
float reference(const PoolPlaneShape& s, const float* x, int64_t oh, int64_t ow) {
    float acc = 0.0f;
    bool started = false;
    int64_t real = 0, rows_in_pads = 0, cols_in_pads = 0;
    for (int64_t kh = 0; kh < s.kernel_h; ++kh)
        rows_in_pads += oh * s.stride_h + kh - s.pad_top < s.height + s.pad_bottom;
    for (int64_t kw = 0; kw < s.kernel_w; ++kw)
        cols_in_pads += ow * s.stride_w + kw - s.pad_left < s.width + s.pad_right;
    for (int64_t kh = 0; kh < s.kernel_h; ++kh)
        for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
            const int64_t r = oh * s.stride_h + kh - s.pad_top, c = ow * s.stride_w + kw - s.pad_left;
            if (r < 0 || r >= s.height || c < 0 || c >= s.width) continue;
            const float v = x[r * s.width + c];
            if (s.average) acc = acc + v;
            else acc = !started || v > acc ? v : acc;
            started = true;
            ++real;
        }
    return s.average ? acc / (float)(s.count_include_pad ? rows_in_pads * cols_in_pads : real) : acc;
}

// Ties, NaNs and both zeros, the zeros the largest values (so the tap order decides).
void fill(float* v, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> coarse(-30, 0), pick(0, 12);
    for (int64_t i = 0; i < n; ++i) {
        const int kind = pick(rng);
        v[i] = kind == 0 ? NAN : kind == 1 ? -0.0f : kind == 2 ? 0.0f : (float)coarse(rng) * 0.25f - 0.25f;
    }
}

struct Case { int64_t h, w, kh, kw, sh, sw, top, left, bottom, right; };

int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t begin, int64_t end) {   // ceil mode
    return (in + begin + end - k + s - 1) / s + 1;
}
}  // namespace

TEST_CASE("pool planes: Max and AveragePool, kernels 1-7, strides 1 and 2, pads, ceil mode, both divisors, every ISA") {
    const Case cases[] = {
        {7, 7, 3, 3, 1, 1, 1, 1, 1, 1},   {14, 14, 3, 3, 1, 1, 1, 1, 1, 1}, {28, 28, 3, 3, 1, 1, 1, 1, 1, 1},
        {14, 14, 3, 3, 2, 2, 0, 0, 1, 1}, {28, 28, 3, 3, 2, 2, 0, 0, 1, 1}, {27, 27, 3, 3, 2, 2, 0, 0, 0, 0},
        {13, 13, 3, 3, 2, 2, 0, 0, 0, 0}, {7, 7, 7, 7, 1, 1, 0, 0, 0, 0},   {9, 40, 3, 3, 1, 1, 1, 1, 1, 1},
        {9, 45, 3, 3, 2, 2, 1, 1, 1, 1},  {1, 5, 1, 2, 1, 1, 0, 1, 0, 0},   {5, 19, 5, 5, 1, 2, 2, 4, 2, 0},
        {6, 33, 2, 3, 2, 1, 1, 0, 0, 2},  {3, 3, 3, 3, 1, 1, 2, 2, 2, 2},   {16, 35, 4, 2, 1, 2, 3, 1, 1, 0},
        // the rows kept in registers: several strips, a stride past the kernel, 1 and 16 columns, 18 taps
        {20, 56, 3, 3, 2, 2, 1, 1, 1, 1}, {10, 20, 2, 2, 3, 1, 0, 0, 0, 0}, {12, 41, 3, 1, 1, 2, 1, 0, 1, 0},
        {5, 50, 1, 16, 1, 1, 0, 3, 0, 5}, {8, 30, 3, 6, 1, 1, 1, 2, 1, 3},  {8, 30, 3, 7, 1, 1, 1, 2, 1, 3},
    };
    uint32_t seed = 9100;
    int64_t on_jit = 0, rows_kept = 0;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        const std::string target = isa_name(isa);
        CAPTURE(target);
        for (const Case& k : cases)
            for (int64_t kind = 0; kind < 3; ++kind) {   // max, average, average counting pads
                PoolPlaneShape s;
                s.height = k.h, s.width = k.w, s.kernel_h = k.kh, s.kernel_w = k.kw, s.stride_h = k.sh, s.stride_w = k.sw;
                s.pad_top = k.top, s.pad_left = k.left, s.pad_bottom = k.bottom, s.pad_right = k.right;
                s.out_h = out_dim(k.h, k.kh, k.sh, k.top, k.bottom);
                s.out_w = out_dim(k.w, k.kw, k.sw, k.left, k.right);
                s.average = kind > 0;
                s.count_include_pad = kind == 2;
                CAPTURE(k.h); CAPTURE(k.w); CAPTURE(k.kh); CAPTURE(k.kw); CAPTURE(k.sh); CAPTURE(k.sw); CAPTURE(kind);
                PoolPlanes planes;
                REQUIRE(planes.init(s, isa) == Status::Ok);
                // JIT on AVX-512 only, while the process's kernel table has room (other suites fill it)
                CHECK((!planes.jit() || isa == Isa::Avx512));
                on_jit += planes.jit();
                rows_kept += planes.rows_in_registers();
                const int64_t count = 3, in = k.h * k.w, out = s.out_h * s.out_w;
                for (bool at_end : {true, false}) {   // the planes against either guard page
                    test::GuardedBuffer x((size_t)(count * in), at_end), y((size_t)(count * out), at_end);
                    fill(x.data, count * in, seed++);
                    planes.run(x.data, y.data, count);
                    int64_t wrong = 0;
                    for (int64_t p = 0; p < count; ++p)
                        for (int64_t oh = 0; oh < s.out_h; ++oh)
                            for (int64_t ow = 0; ow < s.out_w; ++ow) {
                                const float want = reference(s, x.data + p * in, oh, ow), got = y.data[p * out + oh * s.out_w + ow];
                                wrong += !(std::isnan(want) && std::isnan(got)) && std::memcmp(&want, &got, 4) != 0;
                            }
                    CHECK(wrong == 0);
                }
            }
    }
    if (isa_available(Isa::Avx512)) {   // both kinds of kernel ran
        CHECK(on_jit > 0);
        CHECK(rows_kept > 0);
        CHECK(rows_kept < on_jit);
    }
}

TEST_CASE("pool planes: a NaN at every tap position of max windows at the borders and inside") {
    for (Isa isa : {Isa::Ref, Isa::Avx512}) {
        if (!isa_available(isa)) continue;
        PoolPlaneShape s;
        s.height = 6, s.width = 9, s.kernel_h = s.kernel_w = 3, s.pad_top = s.pad_left = s.pad_bottom = s.pad_right = 1;
        s.out_h = 6, s.out_w = 9;
        PoolPlanes planes;
        REQUIRE(planes.init(s, isa) == Status::Ok);
        int64_t wrong = 0;
        for (int64_t at = 0; at < 54; ++at) {   // one NaN in turn: the first real tap of some windows, a later tap of others
            std::vector<float> x(54), y(54);
            for (int64_t i = 0; i < 54; ++i) x[(size_t)i] = (float)(i % 7) - 3.0f;
            x[(size_t)at] = NAN;
            planes.run(x.data(), y.data(), 1);
            for (int64_t o = 0; o < 54; ++o) {
                const float want = reference(s, x.data(), o / 9, o % 9);
                wrong += std::isnan(want) != std::isnan(y[(size_t)o]) || (!std::isnan(want) && want != y[(size_t)o]);
            }
        }
        CHECK(wrong == 0);
    }
}

TEST_CASE("pool planes: bad shapes are InvalidArgument, a window with no tap in the plane too") {
    PoolPlanes planes;
    PoolPlaneShape s;
    s.height = s.width = s.out_h = s.out_w = 4;
    s.kernel_h = s.kernel_w = 3;
    s.pad_top = s.pad_left = s.pad_bottom = s.pad_right = 1;
    CHECK(planes.init(s) == Status::Ok);
    PoolPlaneShape bad = s;
    bad.width = 0;
    CHECK(planes.init(bad) == Status::InvalidArgument);
    bad = s;
    bad.pad_left = -1;
    CHECK(planes.init(bad) == Status::InvalidArgument);
    bad = s;
    bad.average = 2;
    CHECK(planes.init(bad) == Status::InvalidArgument);
    bad = s;
    bad.pad_top = 3;   // output row 0's window is rows -3..-1
    CHECK(planes.init(bad) == Status::InvalidArgument);
    bad = s;
    bad.out_w = 6;     // output column 5's window starts at column 4, past the plane
    CHECK(planes.init(bad) == Status::InvalidArgument);
}
