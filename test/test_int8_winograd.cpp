// Int8 3x3 convs of stride 1 by Winograd F(2x2, 3x3) (snippets.h Int8WinogradF23, runtime.h
// run_int8_conv_winograd): the input transform, the products on AVX2's 16-bit tile (and the
// portable loops) and the requantizing output transform, bit for bit the direct conv's integer
// sums requantized by int8_requantize, over odd and even output sizes, every padding, channels
// and maps past whole groups and panels, bands of tile rows and panels of maps as the runtime
// splits them; full-range weights (-128 and 127) and the sums at the exactness bound (fits()).
// The QDQ convs of test_int8 run it on the CPU device where the tiles lack a byte dot product.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>
#include "snippets.h"

using namespace tessel;

namespace {
struct WinogradCase {
    int64_t channels, maps, h, w, pad_top, pad_left, pad_bottom, pad_right;
    int64_t band;   // tiles per band (the last one shorter), in rows of tiles or across them
};

// Every output of `cc` through k's transforms against the direct sums; weights in [lo, hi],
// x in [x_lo, 255] (fill: every weight lo and every byte 255, the largest sums).
void check_winograd(const Int8WinogradF23& k, const WinogradCase& cc, uint32_t seed, bool fill = false) {
    CAPTURE(cc.channels); CAPTURE(cc.maps); CAPTURE(cc.h); CAPTURE(cc.w);
    CAPTURE(cc.pad_top); CAPTURE(cc.pad_left); CAPTURE(cc.pad_bottom); CAPTURE(cc.pad_right); CAPTURE(cc.band);
    std::mt19937 rng(seed);
    const int64_t C = cc.channels, M = cc.maps, plane = cc.h * cc.w;
    const int64_t out_h = cc.h + cc.pad_top + cc.pad_bottom - 2, out_w = cc.w + cc.pad_left + cc.pad_right - 2;
    REQUIRE(out_h > 0);
    REQUIRE(out_w > 0);
    std::vector<uint8_t> x((size_t)(C * plane));
    std::vector<int8_t> wt((size_t)(M * C * 9));
    for (uint8_t& v : x) v = fill ? 255 : (uint8_t)(rng() % 256);
    for (int8_t& v : wt) v = fill ? (int8_t)-128 : (int8_t)((int)(rng() % 256) - 128);
    if (!fill && wt.size() > 2) { wt[0] = -128; wt[1] = 127; }
    std::vector<int32_t> bias((size_t)M);
    std::vector<float> scale((size_t)M);
    for (int64_t m = 0; m < M; ++m) {
        bias[(size_t)m] = (int32_t)(rng() % 20001) - 10000;
        // fill: y = -1827 x 9 x 128 x 255 = -536699520 times 1.5 x 2^-25 is -24, inside the range
        scale[(size_t)m] = fill ? std::ldexp(1.5f, -25) : std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -11 - (int)(rng() % 4));
    }
    Int8Requant rq;
    rq.bias = bias.data();
    rq.scale = scale.data();
    rq.zero_point = (int32_t)(rng() % 200);
    rq.lo = (float)(-rq.zero_point + (int32_t)(rng() % 3) * 20);
    rq.hi = (float)(255 - rq.zero_point - (int32_t)(rng() % 2) * 30);
    if (fill) rq.zero_point = 128, rq.lo = -128.0f, rq.hi = 127.0f;
    const uint8_t zx = (uint8_t)(fill ? 255 : rng() % 256);
    // the oracle: sum over taps of w x, the pads reading zx
    std::vector<uint8_t> want((size_t)(M * out_h * out_w));
    for (int64_t m = 0; m < M; ++m)
        for (int64_t oy = 0; oy < out_h; ++oy)
            for (int64_t ox = 0; ox < out_w; ++ox) {
                int32_t acc = 0;
                for (int64_t c = 0; c < C; ++c)
                    for (int64_t i = 0; i < 3; ++i)
                        for (int64_t j = 0; j < 3; ++j) {
                            const int64_t iy = oy + i - cc.pad_top, ix = ox + j - cc.pad_left;
                            const int32_t xv = iy < 0 || iy >= cc.h || ix < 0 || ix >= cc.w ? zx : x[(size_t)(c * plane + iy * cc.w + ix)];
                            acc += xv * wt[(size_t)(((m * C + c) * 3 + i) * 3 + j)];
                        }
                want[(size_t)((m * out_h + oy) * out_w + ox)] = int8_requantize(acc, bias[(size_t)m], scale[(size_t)m], rq.lo, rq.hi, rq.zero_point);
            }
    // the runtime's plan: bands of tiles, each over every panel of maps
    const int64_t tiles_x = (out_w + 1) / 2, tiles_y = (out_h + 1) / 2;
    std::vector<int16_t> u(Int8WinogradF23::weights_bytes(M, C) / 2);
    Int8WinogradF23::transform_weights(M, C, wt.data(), u.data());
    const int64_t tiles = cc.band;
    std::vector<int16_t> v(Int8WinogradF23::input_bytes(C, tiles) / 2);
    std::vector<int32_t> sums(Int8WinogradF23::sums_bytes(tiles) / 4);
    std::vector<uint8_t> scratch(Int8WinogradF23::input_scratch_bytes(tiles_x, tiles));
    const int64_t guard = 9;   // bytes past the output that must stay untouched
    std::vector<uint8_t> y((size_t)(M * out_h * out_w + guard), 0xA5);
    const Int8WinogradF23::Planes planes{x.data(), C, plane, cc.h, cc.w, cc.pad_top, cc.pad_left, tiles_x, zx};
    const int64_t map_panels = (M + Int8WinogradF23::kMapRows - 1) / Int8WinogradF23::kMapRows;
    for (int64_t t0 = 0; t0 < tiles_x * tiles_y; t0 += cc.band) {
        const int64_t count = std::min(cc.band, tiles_x * tiles_y - t0);
        k.convolve_band(planes, t0, count, M, 0, map_panels, u.data(), rq, out_h, out_w, y.data(), out_h * out_w, v.data(),
                        sums.data(), scratch.data());
    }
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
        if (y[i] != want[i] && bad++ < 5) MESSAGE("y[" << i << "] = " << (int)y[i] << ", want " << (int)want[i]);
    CHECK(bad == 0);
    for (int64_t i = 0; i < guard; ++i) CHECK(y[want.size() + (size_t)i] == 0xA5);
}

const WinogradCase kCases[] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1},       // one pixel, one channel
    {3, 5, 6, 7, 1, 1, 1, 1, 3},       // odd output width, channels and maps past whole groups and panels
    {4, 6, 7, 6, 0, 0, 0, 0, 8},       // no padding: 5 x 4 outputs, a panel of tiles a band
    {5, 7, 9, 11, 2, 0, 1, 2, 13},     // asymmetric pads, bands across rows of tiles
    {8, 13, 5, 20, 1, 1, 1, 1, 16},    // 10 tiles a row: panels of 8 across rows
    {9, 12, 12, 17, 1, 2, 1, 0, 5},    // 8 tiles a row, bands of 5 starting mid-row
    {16, 6, 4, 35, 1, 1, 1, 1, 40},    // 18 tiles a row: a band past several panels and rows
    {33, 19, 10, 10, 1, 1, 1, 1, 64},  // every tile in one band, K past 8 groups (the tile's steps of 4)
    {64, 8, 14, 14, 1, 1, 1, 1, 24},   // VGG's last maps, shrunk
    {12, 3, 40, 35, 1, 1, 1, 1, 330},   // a band past the output transform's chunks of 256 tiles, the next mid-row
};
}  // namespace

TEST_CASE("int8 winograd: F(2x2, 3x3) equals the direct conv's requantized sums, AVX2's tile and the portable loops") {
    CHECK(Int8WinogradF23::fits(1827));
    CHECK(!Int8WinogradF23::fits(1828));   // 4 x 1828 x 9 x 128 x 255 >= 2^31
    CHECK(!Int8WinogradF23::fits(0));
    Int8WinogradF23 portable;
    REQUIRE(portable.init(Isa::Ref) == Status::Ok);
    CHECK(!portable.jit());
    std::vector<const Int8WinogradF23*> kernels = {&portable};
    Int8WinogradF23 avx2;
    if (isa_available(Isa::Avx2)) {
        REQUIRE(avx2.init(Isa::Avx2) == Status::Ok);
#if !defined(TESSEL_NO_JIT) && defined(__x86_64__)
        CHECK(avx2.jit());
#endif
        kernels.push_back(&avx2);
    }
    uint32_t seed = 1;
    for (const Int8WinogradF23* k : kernels) {
        CAPTURE(k->jit());
        for (const WinogradCase& cc : kCases) check_winograd(*k, cc, seed++);
    }
}

TEST_CASE("int8 winograd: the largest sums within fits() stay exact (every weight -128, every byte 255)") {
    Int8WinogradF23 k;
    REQUIRE(k.init(isa_available(Isa::Avx2) ? Isa::Avx2 : Isa::Ref) == Status::Ok);
    // 1827 channels: |4 y| = 4 x 1827 x 9 x 128 x 255 just under 2^31, the transforms' sums wrapping on the way
    check_winograd(k, WinogradCase{1827, 7, 4, 4, 1, 1, 1, 1, 3}, 77, true);
    check_winograd(k, WinogradCase{1827, 2, 3, 5, 0, 0, 0, 0, 2}, 78, true);
}
