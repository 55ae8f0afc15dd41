// DepthwiseConv's border rows: output rows whose window overhangs the input top or bottom run
// kernels that sum only the kernel rows inside the input (short planes with 5x5 and 7x7
// kernels are mostly such rows); planes narrower than a tile run several rows a tile, the
// rows left over in one tile. On every ISA the machine has, against a naive
// double-precision convolution, whole planes and one-row bands, across heights from 1, pads up
// to and past the kernel (rows of padding only), strides, dilations and width tails.
// The whole-planes kernel (AVX-512 and AVX2, stride_w 1 or 2: planes read where they lie, border
// taps by lane masks) against the same sums and the row kernels' values, on planes a call, and
// where it declines.
// Error bound as test_depthwise.cpp: |got - want| <= 1e-5 * (sum |w||x| + |bias|) + 1e-30.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "snippets.h"
#include "test_helpers.h"

using namespace tessel;

namespace {
using test::random_floats;

std::vector<Isa> machine_isas() {
    std::vector<Isa> isas;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon})
        if (isa_available(isa)) isas.push_back(isa);
    return isas;
}

// Rows bad against the naive sum (bias + taps inside the input), messages for the first few.
int64_t count_bad(const DepthwiseShape& s, const std::vector<float>& x, const std::vector<float>& w, float bias,
                  const std::vector<float>& y) {
    int64_t bad = 0;
    for (int64_t oh = 0; oh < s.out_h; ++oh)
        for (int64_t ow = 0; ow < s.out_w; ++ow) {
            double sum = bias, mag = std::fabs(bias);
            for (int64_t kh = 0; kh < s.kernel_h; ++kh)
                for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
                    const int64_t ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
                    const int64_t iw = ow * s.stride_w - s.pad_left + kw * s.dilation_w;
                    if (ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w) continue;
                    const double p = (double)x[(size_t)(ih * s.in_w + iw)] * (double)w[(size_t)(kh * s.kernel_w + kw)];
                    sum += p;
                    mag += std::fabs(p);
                }
            const float got = y[(size_t)(oh * s.out_w + ow)];
            if (!(std::fabs((double)got - sum) <= 1e-5 * mag + 1e-30) && bad++ < 5)
                MESSAGE("y[" << oh << "][" << ow << "] = " << got << ", want " << sum);
        }
    return bad;
}

// The shape's plane on every ISA: whole, and in one-row bands over a copy of another plane's band.
void check_shape(DepthwiseShape s, int64_t pad_bottom, int64_t pad_right, uint32_t seed) {
    s.out_h = (s.in_h + s.pad_top + pad_bottom - (s.kernel_h - 1) * s.dilation_h - 1) / s.stride_h + 1;
    s.out_w = (s.in_w + s.pad_left + pad_right - (s.kernel_w - 1) * s.dilation_w - 1) / s.stride_w + 1;
    if (s.out_h < 1 || s.out_w < 1) return;
    CAPTURE(s.in_h);
    CAPTURE(s.in_w);
    CAPTURE(s.kernel_h);
    CAPTURE(s.kernel_w);
    CAPTURE(s.stride_h);
    CAPTURE(s.dilation_h);
    CAPTURE(s.pad_top);
    CAPTURE(pad_bottom);
    const std::vector<float> x = random_floats(s.in_h * s.in_w, seed), w = random_floats(s.kernel_h * s.kernel_w, seed + 1);
    const std::vector<float> other(x.size(), 7.0f);
    const float bias = 0.25f;
    for (Isa isa : machine_isas()) {
        const std::string target = isa_name(isa);
        CAPTURE(target);
        DepthwiseConv conv;
        REQUIRE(conv.init(s, isa) == Status::Ok);
        std::vector<float> scratch(conv.scratch_floats(s.out_h)), whole((size_t)(s.out_h * s.out_w), -1.0f), banded(whole);
        conv.run(x.data(), w.data(), bias, whole.data(), scratch.data());
        CHECK(count_bad(s, x, w, bias, whole) == 0);
        for (int64_t r = 0; r < s.out_h; ++r) {
            conv.pad(other.data(), r, r + 1, scratch.data());
            conv.pad(x.data(), r, r + 1, scratch.data(), true);
            conv.run_rows(scratch.data(), w.data(), bias, banded.data(), r, r + 1);
        }
        // a row's sum is the same whichever band holds it
        CHECK(std::memcmp(whole.data(), banded.data(), whole.size() * sizeof(float)) == 0);
    }
}
}  // namespace

TEST_CASE("depthwise rows: short planes, every pad up to past the kernel, 3x3 to 7x7") {
    uint32_t seed = 900;
    for (int64_t k : {3, 5, 7})
        for (int64_t height = 1; height <= 6; ++height)
            for (int64_t pad = 0; pad <= k; ++pad) {
                DepthwiseShape s;
                s.in_h = height, s.in_w = 19, s.kernel_h = s.kernel_w = k, s.pad_top = pad, s.pad_left = k / 2;
                check_shape(s, k - 1 - pad >= 0 ? k - 1 - pad : 0, k / 2, seed++);   // top and bottom differ
                check_shape(s, pad, k / 2, seed++);
            }
}

TEST_CASE("depthwise rows: strides, dilations, wide and narrow rows, asymmetric kernels") {
    uint32_t seed = 1900;
    struct Case { int64_t in_h, in_w, kh, kw, sh, sw, dh, dw, top, left, bottom, right; };
    const Case cases[] = {
        {2, 96, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},    // the OCR classifier's last blocks
        {3, 96, 5, 5, 2, 1, 1, 1, 2, 2, 2, 2},
        {6, 96, 5, 5, 2, 1, 1, 1, 2, 2, 2, 2},
        {12, 96, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1},
        {5, 5, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2},     // 3x3 output of a 5x5 stride 2
        {7, 33, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},    // dilation 2
        {9, 17, 3, 3, 3, 2, 3, 1, 5, 1, 4, 1},    // dilation 3, stride 3, pad past the dilated kernel
        {4, 40, 7, 3, 1, 1, 1, 1, 3, 1, 3, 1},    // 7x3
        {3, 21, 1, 5, 1, 1, 1, 1, 0, 2, 0, 2},    // one kernel row: no border rows
        {8, 50, 5, 1, 2, 1, 2, 1, 4, 0, 1, 0},    // 5x1, dilation 2, asymmetric
        {1, 200, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3},   // one row, several 16-vector blocks
        {20, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},    // narrow rows: several rows a tile
    };
    for (const Case& c : cases) {
        DepthwiseShape s;
        s.in_h = c.in_h, s.in_w = c.in_w, s.kernel_h = c.kh, s.kernel_w = c.kw, s.stride_h = c.sh, s.stride_w = c.sw;
        s.dilation_h = c.dh, s.dilation_w = c.dw, s.pad_top = c.top, s.pad_left = c.left;
        check_shape(s, c.bottom, c.right, seed++);
    }
}

TEST_CASE("depthwise rows: narrow planes, every count of rows left over after the whole tiles") {
    uint32_t seed = 2900;
    for (int64_t k : {3, 5})
        for (int64_t width : {1, 3, 5, 8, 9, 16, 17})
            for (int64_t height = 1; height <= 17; ++height) {
                DepthwiseShape s;
                s.in_h = height, s.in_w = width, s.kernel_h = s.kernel_w = k, s.pad_top = s.pad_left = k / 2;
                check_shape(s, k / 2, k / 2, seed++);
            }
}

namespace {
// DepthwiseConv::run_planes (`isa`: AVX-512 or AVX2; stride_w 1 or 2) on `planes` planes, each against the naive sum
// and equal to the row kernels' plane (the taps in the same order; a tap in the padding adds
// w x 0 there, nothing here). Returns whether the shape took the whole-planes kernel.
bool check_planes(Isa isa, DepthwiseShape s, int64_t pad_bottom, int64_t pad_right, int64_t planes, bool with_bias, uint32_t seed) {
    s.out_h = (s.in_h + s.pad_top + pad_bottom - (s.kernel_h - 1) * s.dilation_h - 1) / s.stride_h + 1;
    s.out_w = (s.in_w + s.pad_left + pad_right - (s.kernel_w - 1) * s.dilation_w - 1) / s.stride_w + 1;
    if (s.out_h < 1 || s.out_w < 1) return false;
    DepthwiseConv conv;
    REQUIRE(conv.init(s, isa, true) == Status::Ok);
    if (!conv.whole_planes()) return false;
    const std::string target = isa_name(isa);
    CAPTURE(target);
    CAPTURE(s.in_h);
    CAPTURE(s.in_w);
    CAPTURE(s.kernel_h);
    CAPTURE(s.kernel_w);
    CAPTURE(s.stride_h);
    CAPTURE(s.stride_w);
    CAPTURE(s.dilation_h);
    CAPTURE(s.dilation_w);
    CAPTURE(s.pad_top);
    CAPTURE(s.pad_left);
    CAPTURE(pad_bottom);
    CAPTURE(pad_right);
    const int64_t in_plane = s.in_h * s.in_w, out_plane = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w;
    // one float of guard on either side of x and y: the masked taps and stores touch neither
    std::vector<float> x = random_floats(planes * in_plane + 2, seed), w = random_floats(planes * taps, seed + 1);
    std::vector<float> bias = random_floats(planes, seed + 2), y((size_t)(planes * out_plane + 2), -3.0f);
    conv.run_planes(x.data() + 1, w.data(), with_bias ? bias.data() : nullptr, y.data() + 1, planes);
    CHECK(y.front() == -3.0f);
    CHECK(y.back() == -3.0f);
    std::vector<float> scratch(conv.scratch_floats(s.out_h)), rows((size_t)out_plane);
    for (int64_t p = 0; p < planes; ++p) {
        CAPTURE(p);
        const std::vector<float> xp(x.begin() + 1 + p * in_plane, x.begin() + 1 + (p + 1) * in_plane);
        const std::vector<float> wp(w.begin() + p * taps, w.begin() + (p + 1) * taps);
        const std::vector<float> yp(y.begin() + 1 + p * out_plane, y.begin() + 1 + (p + 1) * out_plane);
        const float b = with_bias ? bias[(size_t)p] : 0.0f;
        CHECK(count_bad(s, xp, wp, b, yp) == 0);
        conv.run(xp.data(), wp.data(), b, rows.data(), scratch.data());
        int64_t differ = 0;
        for (int64_t i = 0; i < out_plane; ++i) differ += !(rows[(size_t)i] == yp[(size_t)i]);
        CHECK(differ == 0);
    }
    return true;
}
}  // namespace

TEST_CASE("depthwise rows: whole planes a call (AVX-512, AVX2): border masks, row groups, pads past the kernel, limits") {
    uint32_t seed = 4000;
    for (Isa isa : {Isa::Avx512, Isa::Avx2}) {
        if (!isa_available(isa)) {
            MESSAGE("no " << std::string(isa_name(isa)) << " on this machine: its whole-planes kernel is not tested");
            continue;
        }
        const bool wide = isa == Isa::Avx512;
        int64_t taken = 0, tried = 0;
        for (int64_t stride : {1, 2})
            for (int64_t k : {1, 3, 5, 7})
                for (int64_t height : {1, 2, 3, 7})
                    for (int64_t width : {1, 5, 16, 17, 40})
                        for (int64_t pad = 0; pad <= k; pad += (k > 3 ? 2 : 1)) {
                            // fewer kernels (the table is the process's): AVX2 fewer still
                            if (stride == 2 && (k == 7 || height == 2 || width == 16)) continue;
                            if (!wide && (k == 1 || k == 7 || width == 17)) continue;
                            DepthwiseShape s;
                            s.in_h = height, s.in_w = width, s.kernel_h = s.kernel_w = k, s.pad_top = s.pad_left = pad;
                            s.stride_h = s.stride_w = stride;
                            taken += check_planes(isa, s, k - 1 - pad >= 0 ? k - 1 - pad : 0, pad, 3, (seed & 1) != 0, seed);   // sides differ
                            ++seed, ++tried;
                        }
        struct Case { int64_t in_h, in_w, kh, kw, sh, sw, dh, dw, top, left, bottom, right; bool wide, narrow; };
        const Case cases[] = {
            {3, 40, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, true, true},      // the OCR recognizer's last blocks
            {12, 80, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true, true},     // 5 vectors a row: two groups of 6 rows (AVX2: 12 of one)
            {12, 80, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, true, true},     // stride_h 2
            {6, 80, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true, true},      // stride 2: 80 columns in halves
            {24, 160, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true, true},    // 5 vectors a row at stride 2 (AVX2: 10, a row a group)
            {28, 28, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, true, true},     // stride 2, pads on the far sides only
            {13, 29, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, true, true},
            {9, 35, 3, 3, 1, 2, 2, 2, 2, 3, 2, 1, true, true},      // stride_w 2, dilations
            {14, 14, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, true, true},
            {7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true, true},
            {28, 28, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true, true},     // 14 rows a group (AVX2: 2)
            {9, 33, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, true, true},      // dilations
            {9, 33, 3, 3, 2, 1, 3, 3, 4, 5, 4, 1, true, true},      // pads past the dilated kernel
            {5, 70, 1, 7, 1, 1, 1, 1, 0, 3, 0, 3, true, true},      // 1x7
            {20, 9, 7, 1, 1, 1, 1, 1, 3, 0, 3, 0, true, true},      // 7x1
            {24, 160, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true, false},   // groups 1-6 of 8 in a loop (AVX2: 20 vectors a row)
            {40, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true, true},     // tall: a loop over the inner groups
            {90, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true, true},     // the loop at stride 2
            {50, 24, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, true, true},     // the loop with dilations
            {7, 400, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3, false, false},   // every group a border one, 8575 FMAs: the row kernels
            {4, 24, 1, 15, 1, 1, 1, 1, 0, 7, 0, 7, false, true},    // 14 lane masks: more than AVX-512's 7
            {9, 30, 3, 3, 1, 3, 1, 1, 1, 1, 1, 1, false, false},    // stride_w 3
        };
        for (const Case& c : cases) {
            DepthwiseShape s;
            s.in_h = c.in_h, s.in_w = c.in_w, s.kernel_h = c.kh, s.kernel_w = c.kw, s.stride_h = c.sh, s.stride_w = c.sw, s.dilation_h = c.dh;
            s.dilation_w = c.dw, s.pad_top = c.top, s.pad_left = c.left;
            CHECK(check_planes(isa, s, c.bottom, c.right, 17, true, seed) == (wide ? c.wide : c.narrow));
            CHECK(check_planes(isa, s, c.bottom, c.right, 2, false, seed + 1) == (wide ? c.wide : c.narrow));
            seed += 2;
        }
        MESSAGE(taken << " of " << tried << " swept shapes took " << std::string(isa_name(isa)) << "'s whole-planes kernel");
        CHECK(taken > tried / 2);
    }
    DepthwiseShape other;   // another target: the row kernels
    other.in_h = other.in_w = 8, other.kernel_h = other.kernel_w = 3, other.out_h = other.out_w = 6;
    DepthwiseConv conv;
    REQUIRE(conv.init(other, Isa::Ref, true) == Status::Ok);
    CHECK(!conv.whole_planes());
    if (isa_available(Isa::Avx2)) {   // not asked for: none
        REQUIRE(conv.init(other, Isa::Avx2) == Status::Ok);
        CHECK(!conv.whole_planes());
    }
}
