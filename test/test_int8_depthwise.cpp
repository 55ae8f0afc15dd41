// snippets.h's Int8DepthwiseConv (the VNNI, AVX-VNNI, 16-bit AVX2 and sdot row kernels) bit for bit against a scalar
// oracle (int32 sums of w * (x - zero point), int8_requantize) on every ISA of the machine:
// kernel widths 1..7 and 9 (one to three groups of 4 taps), strides 1 and 2, dilated rows,
// pads on every side, output widths around each vector and block size, bands of rows, planes
// swept row by row and flat, the extreme bytes and weights (-128, 127); the targets without a
// kernel say Unsupported. The whole-planes kernel (AVX-512 VNNI) likewise, its planes between
// inaccessible pages.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>
#include "runtime.h"
#include "test_helpers.h"

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

// The oracle: int32 sums of w * (x - zero point) over the taps inside the input, requantized.
std::vector<uint8_t> oracle(const DepthwiseShape& s, const uint8_t* x, const int8_t* w, int32_t x_zero, int32_t bias, float scale,
                            const Int8Requant& rq) {
    std::vector<uint8_t> y((size_t)(s.out_h * s.out_w));
    for (int64_t oh = 0; oh < s.out_h; ++oh)
        for (int64_t ow = 0; ow < s.out_w; ++ow) {
            int32_t acc = 0;
            for (int64_t kh = 0; kh < s.kernel_h; ++kh)
                for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
                    const int64_t ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h, iw = ow * s.stride_w - s.pad_left + kw;
                    if (ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w) continue;
                    acc += (int32_t)w[kh * s.kernel_w + kw] * ((int32_t)x[ih * s.in_w + iw] - x_zero);
                }
            y[(size_t)(oh * s.out_w + ow)] = int8_requantize(acc, bias, scale, rq.lo, rq.hi, rq.zero_point);
        }
    return y;
}

// A random requantization to a zero point with a clamp inside [0, 255].
Int8Requant random_requant(std::mt19937& rng) {
    Int8Requant rq;
    rq.zero_point = (int32_t)(rng() % 256);
    rq.lo = (float)(-rq.zero_point + (int32_t)(rng() % 3) * 10);
    rq.hi = (float)(255 - rq.zero_point - (int32_t)(rng() % 2) * 30);
    if (rq.hi < rq.lo) rq.hi = rq.lo;
    return rq;
}

// One plane through the kernel in bands of `band` rows against the oracle; y has 7 spare bytes
// that must stay untouched.
// Weights within [-peak, peak], peak 128 their whole range (-128 to 127).
void check_plane(const Int8DepthwiseConv& conv, uint32_t seed, int64_t band, int peak = 128) {
    const DepthwiseShape& s = conv.shape();
    CAPTURE(s.in_h); CAPTURE(s.in_w); CAPTURE(s.kernel_h); CAPTURE(s.kernel_w); CAPTURE(s.stride_w);
    CAPTURE(s.dilation_h); CAPTURE(s.pad_top); CAPTURE(s.pad_left); CAPTURE(band);
    std::mt19937 rng(seed);
    std::vector<uint8_t> x((size_t)(s.in_h * s.in_w));
    for (uint8_t& v : x) v = (uint8_t)(rng() % 256);
    x[0] = 255;
    if (x.size() > 1) x[1] = 0;
    std::vector<int8_t> w((size_t)(s.kernel_h * s.kernel_w));
    for (int8_t& v : w) v = (int8_t)std::min((int)(rng() % (2 * peak + 1)) - peak, 127);
    const size_t taps = w.size();   // at least 1
    if (taps > 3) w[1] = (int8_t)-peak;   // a pair of taps at the extreme
    w[0] = (int8_t)-peak;
    w[taps - 1] = (int8_t)std::min(peak, 127);
    const int32_t x_zero = (int32_t)(rng() % 256), bias = (int32_t)(rng() % 40001) - 20000;
    const float scale = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -9 - (int)(rng() % 4));
    const Int8Requant rq = random_requant(rng);
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
    const std::vector<uint8_t> want = oracle(s, x.data(), w.data(), x_zero, bias, scale, rq);
    int64_t bad = 0;
    for (int64_t i = 0; i < out; ++i) bad += y[(size_t)i] != want[(size_t)i];
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

std::vector<DwShapeCase> row_kernel_cases() {
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
    return cases;
}

}  // namespace

TEST_CASE("int8 depthwise: row kernels bit for bit against the oracle on every ISA of the machine") {
    const std::vector<DwShapeCase> cases = row_kernel_cases();
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

TEST_CASE("int8 depthwise: weights within [-64, 64] on AVX2's kernel by byte pairs (no AVX-VNNI), bit for bit against the oracle") {
    if (!isa_available(Isa::Avx2)) {
        MESSAGE("no AVX2: no byte-pair kernel");
        return;
    }
    const std::vector<DwShapeCase> cases = row_kernel_cases();
    uint32_t seed = 3000;
    for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
        if (!isa_available(isa)) continue;
        CAPTURE(isa_name(isa));
        for (const DwShapeCase& c : cases) {
            Int8DepthwiseConv pairs, with_dot, wide;
            REQUIRE(pairs.init(make_shape(c), isa, false, false, true) == Status::Ok);
            REQUIRE(with_dot.init(make_shape(c), isa, true, false, true) == Status::Ok);
            REQUIRE(wide.init(make_shape(c), isa, false, false, false) == Status::Ok);
            CHECK(pairs.byte_pairs());
            CHECK(!wide.byte_pairs());
            // the dot-product kernels where the CPU has them (VNNI at avx512, AVX-VNNI)
            CHECK(with_dot.byte_pairs() == !((isa == Isa::Avx512 && int8_vnni_available()) || int8_avx_vnni_available()));
            for (int64_t band : {pairs.shape().out_h, (int64_t)1}) check_plane(pairs, seed++, band, 64);
        }
    }
}

namespace {

// n bytes of a guarded buffer (test_helpers.h) that end at its inaccessible page (at_end) or
// start after one.
uint8_t* guarded_bytes(test::GuardedBuffer& buffer, int64_t n, bool at_end) {
    return reinterpret_cast<uint8_t*>(buffer.data) + (at_end ? (n + 3) / 4 * 4 - n : 0);
}

// `planes` planes through run_planes, each with its own weights, bias and scale, against the
// oracle; x and y end at (at_end) or start after an inaccessible page.
void check_planes(const Int8DepthwiseConv& conv, uint32_t seed, int64_t planes, bool at_end) {
    const DepthwiseShape& s = conv.shape();
    CAPTURE(s.in_h); CAPTURE(s.in_w); CAPTURE(s.kernel_h); CAPTURE(s.kernel_w); CAPTURE(s.stride_h); CAPTURE(s.stride_w);
    CAPTURE(s.dilation_h); CAPTURE(s.pad_top); CAPTURE(s.pad_left); CAPTURE(s.out_h); CAPTURE(s.out_w); CAPTURE(at_end);
    std::mt19937 rng(seed);
    const int64_t in_plane = s.in_h * s.in_w, out_plane = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w;
    test::GuardedBuffer x_buffer((size_t)(planes * in_plane + 3) / 4, at_end), y_buffer((size_t)(planes * out_plane + 3) / 4, at_end);
    uint8_t* x = guarded_bytes(x_buffer, planes * in_plane, at_end);
    uint8_t* y = guarded_bytes(y_buffer, planes * out_plane, at_end);
    for (int64_t i = 0; i < planes * in_plane; ++i) x[i] = (uint8_t)(rng() % 256);
    x[0] = 255;
    x[planes * in_plane - 1] = 0;
    std::vector<int8_t> w((size_t)(planes * taps)), packed((size_t)planes * conv.packed_weights_bytes());
    for (int8_t& v : w) v = (int8_t)((int)(rng() % 256) - 128);
    w[0] = -128;
    w[w.size() - 1] = 127;
    const int32_t x_zero = (int32_t)(rng() % 256);
    std::vector<int32_t> bias((size_t)planes), kernel_bias((size_t)planes);
    std::vector<float> scale((size_t)planes);
    for (int64_t p = 0; p < planes; ++p) {
        const int8_t* wp = w.data() + p * taps;
        conv.pack_weights(wp, packed.data() + p * (int64_t)conv.packed_weights_bytes());
        int64_t sum = 0;
        for (int64_t t = 0; t < taps; ++t) sum += wp[t];
        bias[(size_t)p] = (int32_t)(rng() % 40001) - 20000;
        kernel_bias[(size_t)p] = conv.kernel_bias(bias[(size_t)p], x_zero, sum);
        scale[(size_t)p] = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -9 - (int)(rng() % 4));
    }
    const Int8Requant rq = random_requant(rng);
    std::memset(y, 0xA5, (size_t)(planes * out_plane));
    conv.run_planes(x, (uint8_t)x_zero, packed.data(), kernel_bias.data(), scale.data(), rq, y, planes);
    int64_t bad = 0;
    for (int64_t p = 0; p < planes; ++p) {
        const std::vector<uint8_t> want = oracle(s, x + p * in_plane, w.data() + p * taps, x_zero, bias[(size_t)p],
                                                 scale[(size_t)p], rq);
        for (int64_t i = 0; i < out_plane; ++i) bad += y[p * out_plane + i] != want[(size_t)i];
    }
    CHECK(bad == 0);
}

DepthwiseShape shape_of(int64_t in_h, int64_t in_w, int64_t kernel_h, int64_t kernel_w, int64_t stride_h, int64_t stride_w,
                        int64_t dilation_h, int64_t pad_top, int64_t pad_left, int64_t pad_bottom, int64_t pad_right) {
    DepthwiseShape s;
    s.in_h = in_h, s.in_w = in_w, s.kernel_h = kernel_h, s.kernel_w = kernel_w, s.stride_h = stride_h, s.stride_w = stride_w;
    s.dilation_h = dilation_h, s.pad_top = pad_top, s.pad_left = pad_left;
    s.out_h = (in_h + pad_top + pad_bottom - (kernel_h - 1) * dilation_h - 1) / stride_h + 1;
    s.out_w = (in_w + pad_left + pad_right - kernel_w) / stride_w + 1;
    return s;
}

}  // namespace

TEST_CASE("int8 depthwise: whole planes a call (AVX-512 VNNI) bit for bit against the oracle, planes between inaccessible pages") {
    Int8DepthwiseConv probe;
    if (!isa_available(Isa::Avx512) || !int8_vnni_available() ||
        probe.init(shape_of(9, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1), Isa::Avx512, true, true) != Status::Ok || !probe.whole_planes()) {
        MESSAGE("no AVX-512 VNNI here: the whole-planes kernel is not tested");
        CHECK(!probe.whole_planes());
        return;
    }
    std::vector<DepthwiseShape> shapes;
    // flat candidates: stride 1, rows as wide as the input's (pads summing to kernel_w - 1)
    for (int64_t k : {1, 3, 5, 7})
        for (int64_t h : {1, 3, 14})
            for (int64_t w : {1, 7, 14, 17, 28}) shapes.push_back(shape_of(h, w, k, k, 1, 1, 1, k / 2, k / 2, k / 2, k / 2));
    shapes.push_back(shape_of(6, 11, 2, 2, 1, 1, 1, 1, 0, 0, 1));      // the pads on one side each
    shapes.push_back(shape_of(6, 11, 2, 2, 1, 1, 1, 0, 1, 1, 0));
    shapes.push_back(shape_of(7, 9, 3, 3, 1, 1, 2, 2, 1, 2, 1));       // a dilated kernel row
    shapes.push_back(shape_of(5, 13, 3, 3, 1, 1, 3, 0, 2, 6, 0));      // every row reads the bottom padding
    shapes.push_back(shape_of(3, 40, 5, 5, 1, 1, 1, 2, 2, 2, 2));      // the recognizer's 3 x 40 planes
    shapes.push_back(shape_of(4, 20, 3, 9, 1, 1, 1, 1, 4, 1, 4));      // three groups of taps
    // row by row: strides, pads up to past the kernel, widths around the 64 and 32 outputs of a vector
    const int64_t kernels[][2] = {{3, 3}, {5, 5}, {2, 9}, {7, 1}};
    const int64_t strides[][2] = {{1, 1}, {2, 2}, {2, 1}, {1, 2}};
    int64_t index = 0;
    for (const auto& st : strides)
        for (const auto& k : kernels)
            for (int64_t w : {5, 33, 64, 65, 130})
                for (int64_t h : {2, 9}) {
                    const int64_t pads[] = {0, k[0] / 2, k[0] - 1, k[0] + 1};
                    const int64_t pad_h = pads[index % 4], pad_w = pads[(index / 4 + index) % 4] * k[1] / k[0];
                    ++index;
                    const DepthwiseShape s = shape_of(h, w, k[0], k[1], st[0], st[1], 1, pad_h, pad_w, (pad_h + 1) % (k[0] + 2), pad_w);
                    if (s.out_h >= 1 && s.out_w >= 1) shapes.push_back(s);
                }
    shapes.push_back(shape_of(24, 96, 3, 3, 2, 1, 1, 1, 1, 1, 1));     // the classifier's stride (2, 1)
    shapes.push_back(shape_of(80, 80, 3, 3, 1, 1, 1, 1, 1, 1, 1));     // the detector's: the row loop
    shapes.push_back(shape_of(80, 80, 3, 3, 2, 2, 1, 0, 0, 1, 1));
    shapes.push_back(shape_of(24, 160, 3, 3, 1, 1, 1, 1, 1, 1, 1));
    shapes.push_back(shape_of(30, 70, 5, 5, 1, 1, 2, 4, 2, 4, 2));     // dilated rows in the loop
    shapes.push_back(shape_of(56, 56, 3, 3, 2, 2, 1, 1, 1, 1, 1));
    uint32_t seed = 7, taken = 0, flat = 0, looped = 0;
    for (const DepthwiseShape& s : shapes) {
        Int8DepthwiseConv conv;
        REQUIRE(conv.init(s, Isa::Avx512, true, true) == Status::Ok);
        if (!conv.whole_planes()) continue;
        ++taken;
        flat += std::strcmp(conv.planes_sweep(), "flat") == 0;
        looped += std::strcmp(conv.planes_sweep(), "rows+loop") == 0;
        for (bool at_end : {true, false}) check_planes(conv, seed++, 3, at_end);
    }
    MESSAGE(taken << " of " << shapes.size() << " shapes: " << flat << " flat, " << looped << " with a row loop");
    CHECK(taken + 4 >= shapes.size());   // only the largest kernels on the widest rows hold too much code
    CHECK(flat >= 30);
    CHECK(looped >= 20);
    CHECK(taken - flat - looped >= 20);   // planes wholly unrolled row by row
    Int8DepthwiseConv rows_only;         // not asked for, or not VNNI: no whole-planes kernel
    REQUIRE(rows_only.init(shape_of(9, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1), Isa::Avx512) == Status::Ok);
    CHECK(!rows_only.whole_planes());
    REQUIRE(rows_only.init(shape_of(9, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1), Isa::Avx512, false, true) == Status::Ok);
    CHECK(!rows_only.whole_planes());
    REQUIRE(rows_only.init(shape_of(9, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1), Isa::Avx2, true, true) == Status::Ok);
    CHECK(!rows_only.whole_planes());
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
