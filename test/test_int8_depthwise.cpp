// snippets.h's Int8DepthwiseConv (the VNNI, AVX-VNNI, 16-bit AVX2 and sdot row kernels) bit for bit against a scalar
// oracle (int32 sums of w * (x - zero point), int8_requantize) on every ISA of the machine:
// kernel widths 1..7 and 9 (one to three groups of 4 taps), strides 1 and 2, dilated rows,
// pads on every side, output widths around each vector and block size, bands of rows, planes
// swept row by row and flat, the extreme bytes and weights (-128, 127); the targets without a
// kernel say Unsupported.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>
#include "runtime.h"

using namespace tessel;

namespace {

struct DwShapeCase {
    int64_t in_h, in_w, kernel_h, kernel_w, stride, dilation_h, pad_top, pad_left, pad_bottom, pad_right;
};

DepthwiseShape make_shape(const DwShapeCase& c) {
    DepthwiseShape s;
    s.in_h = c.in_h;
    s.in_w = c.in_w;
    s.kernel_h = c.kernel_h;
    s.kernel_w = c.kernel_w;
    s.stride_h = c.stride;
    s.stride_w = c.stride;
    s.dilation_h = c.dilation_h;
    s.dilation_w = 1;
    s.pad_top = c.pad_top;
    s.pad_left = c.pad_left;
    s.out_h = (c.in_h + c.pad_top + c.pad_bottom - (c.kernel_h - 1) * c.dilation_h - 1) / c.stride + 1;
    s.out_w = (c.in_w + c.pad_left + c.pad_right - (c.kernel_w - 1) - 1) / c.stride + 1;
    return s;
}

// One plane through the kernel in bands of `band` rows against the oracle; y has 7 spare bytes
// that must stay untouched.
void check_plane(const Int8DepthwiseConv& conv, uint32_t seed, int64_t band) {
    const DepthwiseShape& s = conv.shape();
    CAPTURE(s.in_h); CAPTURE(s.in_w); CAPTURE(s.kernel_h); CAPTURE(s.kernel_w); CAPTURE(s.stride_w);
    CAPTURE(s.dilation_h); CAPTURE(s.pad_top); CAPTURE(s.pad_left); CAPTURE(band);
    std::mt19937 rng(seed);
    std::vector<uint8_t> x((size_t)(s.in_h * s.in_w));
    for (uint8_t& v : x) v = (uint8_t)(rng() % 256);
    x[0] = 255;
    if (x.size() > 1) x[1] = 0;
    std::vector<int8_t> w((size_t)(s.kernel_h * s.kernel_w));
    for (int8_t& v : w) v = (int8_t)((int)(rng() % 256) - 128);
    w[0] = -128;
    w[w.size() - 1] = 127;
    const int32_t x_zero = (int32_t)(rng() % 256), bias = (int32_t)(rng() % 40001) - 20000;
    const float scale = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -9 - (int)(rng() % 4));
    Int8Requant rq;
    rq.zero_point = (int32_t)(rng() % 256);
    rq.lo = (float)(-rq.zero_point + (int32_t)(rng() % 3) * 10);
    rq.hi = (float)(255 - rq.zero_point - (int32_t)(rng() % 2) * 30);
    if (rq.hi < rq.lo) rq.hi = rq.lo;
    int64_t sum = 0;
    for (int8_t v : w) sum += v;
    std::vector<int8_t> packed(conv.packed_weights_bytes());
    conv.pack_weights(w.data(), packed.data());
    const int32_t kernel_bias = conv.kernel_bias(bias, x_zero, sum);
    const int64_t out = s.out_h * s.out_w;
    std::vector<uint8_t> y((size_t)out + 7, 0xA5);
    std::vector<uint8_t> scratch(conv.scratch_bytes(band));
    std::vector<uint8_t> other(x.size());   // padded first, its borders kept for x (borders_ready)
    for (uint8_t& v : other) v = (uint8_t)(rng() % 256);
    for (int64_t row0 = 0; row0 < s.out_h; row0 += band) {
        const int64_t row1 = row0 + band < s.out_h ? row0 + band : s.out_h;
        const bool reuse = (row0 / band) % 2 == 1;
        if (reuse) conv.pad(other.data(), (uint8_t)x_zero, row0, row1, scratch.data());
        conv.pad(x.data(), (uint8_t)x_zero, row0, row1, scratch.data(), reuse);
        conv.run_rows(scratch.data(), packed.data(), kernel_bias, scale, rq, y.data(), row0, row1);
    }
    int64_t bad = 0;
    for (int64_t oh = 0; oh < s.out_h; ++oh)
        for (int64_t ow = 0; ow < s.out_w; ++ow) {
            int32_t acc = 0;
            for (int64_t kh = 0; kh < s.kernel_h; ++kh)
                for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
                    const int64_t ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h, iw = ow * s.stride_w - s.pad_left + kw;
                    if (ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w) continue;
                    acc += (int32_t)w[(size_t)(kh * s.kernel_w + kw)] * ((int32_t)x[(size_t)(ih * s.in_w + iw)] - x_zero);
                }
            const uint8_t want = int8_requantize(acc, bias, scale, rq.lo, rq.hi, rq.zero_point);
            bad += y[(size_t)(oh * s.out_w + ow)] != want;
        }
    CHECK(bad == 0);
    for (size_t i = (size_t)out; i < y.size(); ++i) CHECK(y[i] == 0xA5);
}

std::vector<Isa> machine_isas() {
    std::vector<Isa> isas;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon})
        if (isa_available(isa)) isas.push_back(isa);
    return isas;
}

bool has_kernel(Isa isa, bool dot_products = true) {
#if defined(__x86_64__) || defined(_M_X64)
    if (isa == Isa::Avx2 || isa == Isa::Avx512) return true;   // VNNI's, AVX-VNNI's, else the 16-bit one
#endif
    return isa == Isa::Neon && dot_products && arm_features().dot_product;
}

}  // namespace

TEST_CASE("int8 depthwise: row kernels bit for bit against the oracle on every ISA of the machine") {
    std::vector<DwShapeCase> cases = {
        {9, 9, 3, 3, 1, 1, 1, 1, 1, 1},      {12, 37, 3, 3, 1, 1, 1, 1, 1, 1},  {5, 100, 3, 3, 1, 1, 1, 1, 1, 1},
        {6, 130, 3, 3, 1, 1, 0, 0, 0, 0},    {7, 64, 3, 3, 1, 1, 1, 1, 1, 1},   {9, 10, 3, 3, 2, 1, 1, 1, 1, 1},
        {20, 33, 3, 3, 2, 1, 0, 0, 1, 1},    {11, 161, 3, 3, 2, 1, 1, 1, 1, 1}, {8, 66, 3, 3, 2, 1, 1, 1, 0, 0},
        {23, 45, 5, 5, 1, 1, 2, 2, 2, 2},    {16, 29, 5, 5, 2, 1, 2, 2, 2, 2},  {9, 9, 7, 7, 1, 1, 3, 3, 3, 3},
        {10, 21, 1, 1, 1, 1, 0, 0, 0, 0},    {10, 21, 1, 2, 2, 1, 0, 1, 0, 0},  {12, 19, 3, 4, 1, 2, 2, 0, 3, 2},
        {14, 31, 2, 9, 1, 1, 1, 4, 0, 4},    {13, 17, 3, 6, 2, 3, 3, 2, 3, 3},  {1, 1, 3, 3, 1, 1, 1, 1, 1, 1},
        {3, 300, 3, 3, 1, 1, 1, 1, 1, 1},    {4, 257, 3, 3, 2, 1, 1, 1, 1, 1},  {2, 2, 5, 5, 1, 1, 2, 2, 2, 2},
    };
    for (int64_t width = 1; width <= 70; width += 3) cases.push_back({4, width, 3, 3, 1, 1, 1, 1, 1, 1});
    for (int64_t width = 2; width <= 140; width += 5) cases.push_back({5, width, 3, 3, 2, 1, 1, 1, 1, 1});
    for (int64_t width = 3; width <= 30; width += 3) cases.push_back({width, width, 5, 5, 2, 1, 2, 2, 2, 2});   // small planes
    uint32_t seed = 1;
    std::vector<std::pair<Isa, bool>> kernels;   // (ISA, dot products): false takes x86's 16-bit kernel
    for (Isa isa : machine_isas())
        for (bool dot : {true, false}) kernels.push_back({isa, dot});
    for (const auto& kernel : kernels) {
        const Isa isa = kernel.first;   // not a structured binding: clang's C++17 lambdas (CAPTURE) cannot capture one
        const bool dot = kernel.second;
        CAPTURE(isa_name(isa));
        CAPTURE(dot);
        uint32_t taken = 0, flat = 0, flat_strided = 0;
        for (const DwShapeCase& c : cases) {
            Int8DepthwiseConv conv;
            const Status status = conv.init(make_shape(c), isa, dot);
            if (!has_kernel(isa, dot)) {
                CHECK(status == Status::Unsupported);
                continue;
            }
            REQUIRE(status == Status::Ok);
            ++taken;
            flat += conv.flat();
            flat_strided += conv.flat() && c.stride == 2;
            const int64_t out_h = conv.shape().out_h;
            for (int64_t band : {out_h, (int64_t)1, (int64_t)2}) check_plane(conv, seed++, band);
        }
        if (!has_kernel(isa, dot)) continue;
        CHECK(taken == cases.size());
        CHECK(flat - flat_strided > 10);    // both ways of sweeping a plane ran, flat at strides 1 and 2
        CHECK(flat_strided >= 4);           // NEON's 16-byte vectors take fewer
        CHECK(taken - flat > 10);
    }
}

TEST_CASE("int8 depthwise: shapes without a kernel and bad dims") {
    Int8DepthwiseConv conv;
    DepthwiseShape s = make_shape({9, 9, 3, 3, 1, 1, 1, 1, 1, 1});
    CHECK(conv.init(s, Isa::Ref) == Status::Unsupported);
    DepthwiseShape bad = s;
    bad.kernel_w = 0;
    CHECK(conv.init(bad, default_isa()) == Status::InvalidArgument);
    bad = s;
    bad.pad_left = -1;
    CHECK(conv.init(bad, default_isa()) == Status::InvalidArgument);
    if (!has_kernel(default_isa())) return;
    DepthwiseShape strided = make_shape({9, 9, 3, 3, 3, 1, 1, 1, 1, 1});
    CHECK(conv.init(strided, default_isa()) == Status::Unsupported);   // stride 3
    DepthwiseShape dilated = s;
    dilated.dilation_w = 2;
    CHECK(conv.init(dilated, default_isa()) == Status::Unsupported);
    DepthwiseShape large = make_shape({20, 20, 17, 3, 1, 1, 8, 1, 8, 1});   // 17 rows of weights
    CHECK(conv.init(large, default_isa()) == Status::Unsupported);
    CHECK(conv.init(s, default_isa()) == Status::Ok);
}
