// Quantized inference on the CPU device: snippets.h's Int8Gemm (every tail of M, N and K,
// parts of the rows) bit for bit against a scalar oracle, on the target from TESSEL_ISA, on the
// tile under AMX (VNNI), on the tile under its dot-product one (Int8Gemm::init(isa, false):
// AVX2's on x86) and on the portable tile; QDQ Conv groups (1x1, 3x3, strided, dilated, padded,
// grouped, Relu, Clip, and on AMX where Int8Gemm::amx_pays; a channel shuffle after them, taken
// into the conv's stores when its groups are the conv's)
// bit for bit against the same arithmetic done here in integers, and within one step of the
// float reference path (FUSION=NO); per-tensor QuantizeLinear/DequantizeLinear bit for bit
// against the reference kernels.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>
#include "alloc_counter.h"
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

using test::count_of;

// C = requantize(A B) over rows [m0, m1), oracle and Int8Gemm, C with 5 spare columns that
// must stay untouched; with B's groups in place too where the tiles read them (run_groups).
// Weights within [-peak, peak].
void check_int8_gemm(const Int8Gemm& gemm, int64_t m, int64_t n, int64_t k, int64_t m0, int64_t m1, uint32_t seed, int peak = 127) {
    CAPTURE(m); CAPTURE(n); CAPTURE(k); CAPTURE(m0); CAPTURE(m1); CAPTURE(peak);
    std::mt19937 rng(seed);
    std::vector<int8_t> a((size_t)(m * k));
    std::vector<uint8_t> b((size_t)(k * n));
    for (int8_t& v : a) v = (int8_t)((int)(rng() % (2 * peak + 1)) - peak);
    for (uint8_t& v : b) v = (uint8_t)(rng() % 256);
    if (k > 2) { a[0] = (int8_t)peak; b[0] = 255; b[(size_t)n] = 255; a[1] = (int8_t)peak; }   // the products vpmaddubsw would saturate at 127
    if (k > 4) { a[2] = (int8_t)-peak; b[2 * (size_t)n] = 255; b[3 * (size_t)n] = 255; a[3] = (int8_t)-peak; }
    std::vector<int32_t> bias((size_t)m);
    std::vector<float> scale((size_t)m);
    for (int64_t i = 0; i < m; ++i) {
        bias[(size_t)i] = (int32_t)(rng() % 20001) - 10000;
        scale[(size_t)i] = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -12 - (int)(rng() % 4));
    }
    Int8Requant rq;
    rq.bias = bias.data();
    rq.scale = scale.data();
    rq.zero_point = (int32_t)(rng() % 200);
    rq.lo = (float)(-rq.zero_point + (int32_t)(rng() % 3) * 20);
    rq.hi = (float)(255 - rq.zero_point - (int32_t)(rng() % 2) * 30);
    const int64_t ldc = n + 5;
    std::vector<uint8_t> c((size_t)(m * ldc), 0xA5);
    std::vector<int8_t> pa(gemm.packed_a_bytes(m, k) + 1);
    std::vector<uint8_t> pb(gemm.packed_b_bytes(k, n) + 1);
    gemm.pack_a(m, k, a.data(), k, pa.data());
    gemm.pack_b(k, n, b.data(), n, pb.data());
    gemm.run(m0, m1, n, k, pa.data(), pb.data(), rq, c.data(), ldc);
    int64_t bad = 0, touched = 0;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
            uint8_t got = c[(size_t)(i * ldc + j)];
            if (i < m0 || i >= m1 || j >= n) { touched += got != 0xA5; continue; }
            int32_t acc = 0;
            for (int64_t p = 0; p < k; ++p) acc += (int32_t)a[(size_t)(i * k + p)] * (int32_t)b[(size_t)(p * n + j)];
            uint8_t want = int8_requantize(acc, bias[(size_t)i], scale[(size_t)i], rq.lo, rq.hi, rq.zero_point);
            if (got != want && bad++ < 5) MESSAGE("C[" << i << "][" << j << "] = " << (int)got << ", want " << (int)want);
        }
    CHECK(bad == 0);
    CHECK(touched == 0);
    if (!gemm.reads_b_groups() || k % 4 != 0) return;
    // run_groups: B's groups of 4 rows as 4 bytes a column, in reverse order with gaps between
    // them, and the 4 nr bytes the last panel may read past them; C must equal run()'s.
    const int64_t groups = k / 4, stride = 4 * n + 36;
    std::vector<uint8_t> grouped((size_t)(groups * stride + 4 * gemm.nr()), 0x3C);
    std::vector<int64_t> offset((size_t)groups);
    for (int64_t g = 0; g < groups; ++g) {
        offset[(size_t)g] = (groups - 1 - g) * stride + 4;
        for (int64_t j = 0; j < n; ++j)
            for (int64_t q = 0; q < 4; ++q) grouped[(size_t)(offset[(size_t)g] + 4 * j + q)] = b[(size_t)((4 * g + q) * n + j)];
    }
    std::vector<uint8_t> c2((size_t)(m * ldc), 0xA5);
    gemm.run_groups(m0, m1, n, k, pa.data(), grouped.data(), offset.data(), rq, c2.data(), ldc);
    CHECK(c2 == c);
}
}  // namespace

TEST_CASE("int8: requantization rounds half to even and clamps before the zero point") {
    CHECK(int8_requantize(5, 0, 0.5f, -128.0f, 127.0f, 0) == 2);      // 2.5 -> 2
    CHECK(int8_requantize(7, 0, 0.5f, -128.0f, 127.0f, 0) == 4);      // 3.5 -> 4
    CHECK(int8_requantize(-5, 0, 0.5f, -10.0f, 127.0f, 10) == 8);     // -2.5 -> -2, + 10
    CHECK(int8_requantize(1000, 0, 1.0f, -10.0f, 245.0f, 10) == 255); // clamped to hi
    CHECK(int8_requantize(-1000, 0, 1.0f, 0.0f, 245.0f, 10) == 10);   // a Relu: lo 0
    CHECK(int8_requantize(2147483647, 1, 1e-9f, -128.0f, 127.0f, 128) == 126);   // the sum wraps: -2^31
}

TEST_CASE("int8 gemm: every tail of M, N and K, parts of the rows, target and portable tiles") {
    // no_amx: the tile under AMX (VNNI); no_dot: the tile under the dot-product one (AVX2, NEON's smull)
    Int8Gemm target, no_amx, no_dot, portable;
    REQUIRE(target.init() == Status::Ok);
    REQUIRE(no_amx.init(Isa::Auto, true, false) == Status::Ok);
    REQUIRE(no_dot.init(Isa::Auto, false) == Status::Ok);
    REQUIRE(portable.init(Isa::Ref) == Status::Ok);
    CHECK(!portable.jit());
    CHECK(!no_amx.amx());
    const bool x86 = default_isa() == Isa::Avx2 || default_isa() == Isa::Avx512;
    if (x86) {
        CHECK(target.jit());
        CHECK(no_dot.jit());
        CHECK(no_dot.nr() == 8);   // the AVX2 tile
        const bool vnni = default_isa() == Isa::Avx512 && int8_vnni_available();
        const bool amx = vnni && int8_amx_available();
        CHECK(target.amx() == amx);
        CHECK(target.nr() == (amx ? 32u : vnni ? 48u : int8_avx_vnni_available() ? 16u : 8u));
        CHECK(no_amx.nr() == (vnni ? 48u : int8_avx_vnni_available() ? 16u : 8u));
        MESSAGE("int8 tile: " << std::string(amx ? "AMX" : vnni ? "AVX-512 VNNI" : int8_avx_vnni_available() ? "AVX-VNNI" : "AVX2"));
    }
    if (default_isa() == Isa::Neon) {
        CHECK(target.jit());
        CHECK(target.mr() == (arm_features().dot_product ? 8u : 4u));   // sdot, else smull
        CHECK(no_dot.jit());
        CHECK(no_dot.mr() == 4);
        MESSAGE("int8 tile: " << std::string(arm_features().dot_product ? "sdot" : "smull"));
    }
    uint32_t seed = 1;
    for (const Int8Gemm* gemm : {&target, &no_amx, &no_dot, &portable}) {
        const int64_t mr = gemm->mr(), nr = gemm->nr();
        for (int64_t m : {(int64_t)1, mr - 1, mr, mr + 3, 2 * mr + 1})
            for (int64_t n : {(int64_t)1, (int64_t)15, (int64_t)17, nr - 1, nr, nr + 1, 2 * nr + 33})
                for (int64_t k : {1, 3, 4, 5, 8, 13, 20, 23, 28, 44, 64, 301})   // 20-44: 5-11 groups, the 4-group steps and a tail
                    check_int8_gemm(*gemm, m, n, k, 0, m, seed++);
        check_int8_gemm(*gemm, 3 * mr + 2, 70, 27, 3, 2 * mr + 1, seed++);   // a part starting and ending inside panels
        check_int8_gemm(*gemm, 3 * mr, 70, 27, mr, 2 * mr, seed++);
        check_int8_gemm(*gemm, 20, 50, 2000, 0, 20, seed++);                 // K beyond any cache block
        check_int8_gemm(*gemm, 2 * mr + 1, 300 * nr + 7, 8, 0, 2 * mr + 1, seed++);   // runs of panels a call (the ymm tiles)
        check_int8_gemm(*gemm, 2 * mr + 1, 300 * nr + 7, 8, 2, 2 * mr, seed++);
        // A past L2 and B in half of it: row tiles outer, panels inner (Int8Gemm::run_panels)
        const int64_t k = 301, m = (int64_t)(cpu_cache_sizes().l2 / (uint64_t)(Int8Gemm::k_groups(k) * 4)) + mr + 3;
        check_int8_gemm(*gemm, m, nr + 3, k, 3, m - 2, seed++);
    }
}

// Y = requantize(X W^T) for 1 to 9 rows over panels [panel0, panel1), oracle and Int8Gemv,
// Y with 5 spare columns that must stay untouched, as must the columns of other panels.
namespace {
void check_int8_gemv(const Int8Gemv& gemv, int64_t rows, int64_t n, int64_t k, int64_t panel0, int64_t panel1, uint32_t seed) {
    CAPTURE(rows); CAPTURE(n); CAPTURE(k); CAPTURE(panel0); CAPTURE(panel1);
    std::mt19937 rng(seed);
    const int64_t row_bytes = Int8Gemm::k_groups(k) * 4, columns = (n + 63) / 64 * 64;
    std::vector<int8_t> w((size_t)(n * k));
    std::vector<uint8_t> x((size_t)(rows * row_bytes));
    for (int8_t& v : w) v = (int8_t)((int)(rng() % 256) - 128);
    for (uint8_t& v : x) v = (uint8_t)(rng() % 256);   // K's padding too: its weights are 0
    if (k > 2) { w[0] = -128; w[1] = -128; x[0] = 255; x[1] = 255; }
    std::vector<int32_t> bias((size_t)columns, 0);
    std::vector<float> scale((size_t)columns, 0.0f);
    for (int64_t j = 0; j < n; ++j) {
        bias[(size_t)j] = (int32_t)(rng() % 20001) - 10000;
        scale[(size_t)j] = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -12 - (int)(rng() % 4));
    }
    Int8Requant rq;
    rq.bias = bias.data();
    rq.scale = scale.data();
    rq.zero_point = (int32_t)(rng() % 200);
    rq.lo = (float)(-rq.zero_point + (int32_t)(rng() % 3) * 20);
    rq.hi = (float)(255 - rq.zero_point - (int32_t)(rng() % 2) * 30);
    const int64_t ldy = n + 5;
    std::vector<uint8_t> y((size_t)(rows * ldy), 0xA5);
    std::vector<int8_t> packed(Int8Gemv::packed_bytes(n, k) + 1);
    Int8Gemv::pack(n, k, w.data(), k, packed.data());
    gemv.run(panel0, panel1, rows, n, k, packed.data(), x.data(), rq, y.data(), ldy);
    int64_t bad = 0, touched = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < ldy; ++j) {
            const uint8_t got = y[(size_t)(r * ldy + j)];
            if (j >= n || j < panel0 * 64 || j >= panel1 * 64) { touched += got != 0xA5; continue; }
            int32_t acc = 0;
            for (int64_t p = 0; p < k; ++p) acc += (int32_t)w[(size_t)(j * k + p)] * (int32_t)x[(size_t)(r * row_bytes + p)];
            const uint8_t want = int8_requantize(acc, bias[(size_t)j], scale[(size_t)j], rq.lo, rq.hi, rq.zero_point);
            if (got != want && bad++ < 5) MESSAGE("Y[" << r << "][" << j << "] = " << (int)got << ", want " << (int)want);
        }
    CHECK(bad == 0);
    CHECK(touched == 0);
}
}  // namespace

// ---- Int8Convert: the kernels against a scalar oracle of their definitions ----
namespace {
template <class T>
T quantize_oracle(float x, float scale, int32_t zero_point, int32_t lo, int32_t hi) {
    float v = x / scale;   // one float32 division
    if (v != v) v = 0.0f;
    const double q = std::nearbyint((double)v) + zero_point;   // ties to even; clamping after rounding is the same
    return (T)(int32_t)std::min<double>(std::max<double>(q, lo), hi);
}

template <class T>
void check_convert(const Int8Convert& convert, uint32_t seed) {
    const bool is_signed = std::is_signed<T>::value;
    std::mt19937 rng(seed);
    constexpr int64_t kMax = 300, kGuard = 64;
    const int64_t lengths[] = {0, 1, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 95, 127, 128, 129, 200, 255, 256, 300};
    struct Grid { float scale; int32_t zero_point, lo; };
    const Grid grids[] = {{0.0235f, is_signed ? -3 : 128, is_signed ? -128 : 0}, {3.0f, is_signed ? 127 : 0, is_signed ? -128 : 0},
                          {0.0117f, is_signed ? 5 : 9, is_signed ? 5 : 9}};   // the last: a Relu's clamp at the zero point
    const int32_t hi = is_signed ? 127 : 255;
    for (const Grid& g : grids) {
        CAPTURE(g.scale); CAPTURE(g.zero_point); CAPTURE(g.lo);
        std::vector<float> x(kMax + 3);
        for (float& v : x) v = (float)((int)(rng() % 4001) - 2000) * g.scale / 8.0f;   // many exact ties
        x[1] = NAN; x[18] = INFINITY; x[40] = -INFINITY; x[70] = 1e30f; x[100] = -1e30f; x[130] = -0.0f; x[150] = 1e-42f;
        std::vector<uint8_t> bytes(kMax + 3);
        for (uint8_t& b : bytes) b = (uint8_t)rng();
        for (int64_t n : lengths)
            for (int64_t offset : {0, 3}) {
                CAPTURE(n); CAPTURE(offset);
                std::vector<T> y((size_t)(n + kGuard), (T)0x5a);
                convert.quantize(x.data() + offset, y.data(), n, g.scale, g.zero_point, g.lo, hi);
                int64_t bad = 0;
                for (int64_t i = 0; i < n; ++i)
                    if (y[i] != quantize_oracle<T>(x[offset + i], g.scale, g.zero_point, g.lo, hi) && bad++ < 3)
                        MESSAGE("quantize y[" << i << "] = " << (int)y[i] << " from " << x[offset + i]);
                for (int64_t i = n; i < n + kGuard; ++i) bad += y[i] != (T)0x5a;
                CHECK(bad == 0);
                std::vector<float> f((size_t)(n + kGuard), 7.0f);
                const T* q = reinterpret_cast<const T*>(bytes.data() + offset);
                convert.dequantize(q, f.data(), n, g.scale, g.zero_point);
                bad = 0;
                for (int64_t i = 0; i < n; ++i) {
                    const float want = (float)((int32_t)q[i] - g.zero_point) * g.scale;
                    if (std::memcmp(&f[i], &want, 4) != 0 && bad++ < 3) MESSAGE("dequantize y[" << i << "] = " << f[i] << ", want " << want);
                }
                for (int64_t i = n; i < n + kGuard; ++i) bad += f[i] != 7.0f;
                CHECK(bad == 0);
            }
    }
}

// Int8Convert::binary against dequantize, the op and quantize_oracle: each op, three grids (a
// Relu's clamp at y's zero point in the last; a product past y's range in the second), every
// tail of the kernels' blocks, unaligned, nothing written past n.
void check_convert_binary(const Int8Convert& convert, uint32_t seed) {
    std::mt19937 rng(seed);
    constexpr int64_t kGuard = 64;
    std::vector<uint8_t> a(400), b(400);
    for (size_t i = 0; i < a.size(); ++i) a[i] = (uint8_t)rng(), b[i] = (uint8_t)rng();
    a[1] = 0, b[1] = 255, a[2] = 255, b[2] = 0;
    // The last four: results on many exact ties (x.5 steps of y), and scales the kernels leave
    // to the portable loop (a dequantized value past float's range; y's scale 0; y's scale inf
    // over sums past float's range: NaN results).
    Int8Convert::Binary grids[7];
    grids[0].a_scale = 0.0235f, grids[0].a_zero_point = 128, grids[0].b_scale = 0.0117f, grids[0].b_zero_point = 3;
    grids[0].y_scale = 0.031f, grids[0].y_zero_point = 131;
    grids[1].a_scale = 0.5f, grids[1].a_zero_point = 0, grids[1].b_scale = 3.0f, grids[1].b_zero_point = 255;
    grids[1].y_scale = 0.75f, grids[1].y_zero_point = 7;
    grids[2] = grids[0];
    grids[2].lo = grids[2].y_zero_point;
    grids[3].a_scale = 0.5f, grids[3].a_zero_point = 100, grids[3].b_scale = 0.25f, grids[3].b_zero_point = 60;
    grids[3].y_scale = 0.5f, grids[3].y_zero_point = 128, grids[3].hi = 200;
    grids[4] = grids[0];
    grids[4].a_scale = 3e37f;
    grids[5] = grids[0];
    grids[5].y_scale = 0.0f;
    grids[6] = grids[0];
    grids[6].a_scale = grids[6].b_scale = 1e36f;
    grids[6].y_scale = INFINITY;
    for (SnippetOp op : {SnippetOp::Add, SnippetOp::Sub, SnippetOp::Mul})
        for (Int8Convert::Binary g : grids) {
            g.op = op;
            CAPTURE((int)op); CAPTURE(g.lo); CAPTURE(g.y_scale);
            for (int64_t n : {0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 97, 128, 129, 300, 399})
                for (int64_t offset : {0, 1}) {
                    CAPTURE(n); CAPTURE(offset);
                    std::vector<uint8_t> y((size_t)(n + kGuard), 0x5a);
                    convert.binary(g, a.data() + offset, b.data() + offset, y.data(), n);
                    int64_t bad = 0;
                    for (int64_t i = 0; i < n; ++i) {
                        const float x0 = (float)((int32_t)a[offset + i] - g.a_zero_point) * g.a_scale;
                        const float x1 = (float)((int32_t)b[offset + i] - g.b_zero_point) * g.b_scale;
                        const float r = op == SnippetOp::Add ? x0 + x1 : op == SnippetOp::Sub ? x0 - x1 : x0 * x1;
                        const uint8_t want = quantize_oracle<uint8_t>(r, g.y_scale, g.y_zero_point, g.lo, g.hi);
                        if (y[i] != want && bad++ < 3) MESSAGE("binary y[" << i << "] = " << (int)y[i] << ", want " << (int)want);
                    }
                    for (int64_t i = n; i < n + kGuard; ++i) bad += y[i] != 0x5a;
                    CHECK(bad == 0);
                }
        }
    // Every byte pair, each op, on random grids (a Relu's clamp and a clamp below 255 on some).
    std::vector<uint8_t> pa(65536), pb(65536), py(65536);
    for (int32_t i = 0; i < 65536; ++i) pa[(size_t)i] = (uint8_t)(i >> 8), pb[(size_t)i] = (uint8_t)i;
    for (int trial = 0; trial < 4; ++trial) {
        Int8Convert::Binary g;
        g.a_scale = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -6 - (int)(rng() % 4));
        g.b_scale = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -6 - (int)(rng() % 4));
        g.y_scale = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -6 - (int)(rng() % 3));
        g.a_zero_point = (int32_t)(rng() % 256), g.b_zero_point = (int32_t)(rng() % 256), g.y_zero_point = (int32_t)(rng() % 256);
        if (trial % 2) g.lo = g.y_zero_point, g.hi = 255 - (int32_t)(rng() % 20);
        for (SnippetOp op : {SnippetOp::Add, SnippetOp::Sub, SnippetOp::Mul}) {
            g.op = op;
            CAPTURE(trial); CAPTURE((int)op);
            convert.binary(g, pa.data(), pb.data(), py.data(), 65536);
            int64_t bad = 0;
            for (int32_t i = 0; i < 65536; ++i) {
                const float x0 = (float)((int32_t)pa[(size_t)i] - g.a_zero_point) * g.a_scale;
                const float x1 = (float)((int32_t)pb[(size_t)i] - g.b_zero_point) * g.b_scale;
                const float r = op == SnippetOp::Add ? x0 + x1 : op == SnippetOp::Sub ? x0 - x1 : x0 * x1;
                bad += py[(size_t)i] != quantize_oracle<uint8_t>(r, g.y_scale, g.y_zero_point, g.lo, g.hi);
            }
            CHECK(bad == 0);
        }
    }
}
}  // namespace

namespace {
// Int8Gemm::run_pixels (AVX-512 VNNI with VBMI, AVX-VNNI) against the oracle: runs of positions
// starting inside a row and ending inside another, every row width up to 14 (so every tile of 1
// to 8 positions), the maps in panels of 48, 32 and 16 and in parts, odd and even K groups; Y's
// bytes outside the run and the part untouched.
void check_int8_pixels(const Int8Gemm& gemm, int64_t maps, int64_t k, int64_t width, int64_t column, int64_t count, int64_t m0,
                       int64_t m1, uint32_t seed, int peak = 127) {
    CAPTURE(maps); CAPTURE(k); CAPTURE(width); CAPTURE(column); CAPTURE(count); CAPTURE(m0); CAPTURE(m1); CAPTURE(peak);
    std::mt19937 rng(seed);
    const int64_t groups = k / 4, rows = (column + count + width - 1) / width, b_pitch = width + 3, y_pitch = width + 2;
    std::vector<int8_t> w((size_t)(maps * k));
    for (int8_t& v : w) v = (int8_t)((int)(rng() % (2 * peak + 1)) - peak);
    w[0] = w[1] = (int8_t)peak;
    w[2] = w[3] = (int8_t)-peak;
    const int64_t stride = 4 * rows * b_pitch + 20;   // a group's positions; groups in reverse order with gaps
    std::vector<uint8_t> b((size_t)(groups * stride + 64));
    for (uint8_t& v : b) v = (uint8_t)(rng() % 256);
    std::vector<int64_t> offset((size_t)groups);
    for (int64_t g = 0; g < groups; ++g) offset[(size_t)g] = (groups - 1 - g) * stride + 4;
    std::vector<int32_t> bias((size_t)maps);
    std::vector<float> scale((size_t)maps);
    for (int64_t m = 0; m < maps; ++m) {
        bias[(size_t)m] = (int32_t)(rng() % 20001) - 10000;
        scale[(size_t)m] = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -12 - (int)(rng() % 3));
    }
    Int8Requant rq;
    rq.bias = bias.data();
    rq.scale = scale.data();
    rq.zero_point = (int32_t)(rng() % 200);
    rq.lo = (float)-rq.zero_point;
    rq.hi = (float)(255 - rq.zero_point);
    std::vector<int8_t> packed(Int8Gemm::packed_pixels_bytes(maps, k));
    gemm.pack_pixels(maps, k, w.data(), k, packed.data());
    const int64_t ldy = rows * y_pitch + 7;
    std::vector<uint8_t> y((size_t)(maps * ldy), 0xA5);
    const Int8Gemm::PixelRun run = {b.data(), offset.data(), b_pitch, y_pitch, width, column, count};
    gemm.run_pixels(maps, m0, m1, k, packed.data(), run, rq, y.data(), ldy);
    int64_t bad = 0, touched = 0;
    for (int64_t m = 0; m < maps; ++m)
        for (int64_t i = 0; i < ldy; ++i) {
            const uint8_t got = y[(size_t)(m * ldy + i)];
            const int64_t r = i / y_pitch, c = i % y_pitch, index = r * width + c - column;   // position index in the run
            if (m < m0 || m >= m1 || c >= width || r >= rows || index < 0 || index >= count) {
                touched += got != 0xA5;
                continue;
            }
            int32_t acc = 0;
            for (int64_t p = 0; p < k; ++p)
                acc += (int32_t)w[(size_t)(m * k + p)] * (int32_t)b[(size_t)(offset[(size_t)(p / 4)] + 4 * (r * b_pitch + c) + p % 4)];
            const uint8_t want = int8_requantize(acc, bias[(size_t)m], scale[(size_t)m], rq.lo, rq.hi, rq.zero_point);
            if (got != want && bad++ < 5) MESSAGE("Y[" << m << "][" << i << "] = " << (int)got << ", want " << (int)want);
        }
    CHECK(bad == 0);
    CHECK(touched == 0);
}
}  // namespace

TEST_CASE("int8 gemm: the pixel tiles over runs of positions, every tile of positions, panels and parts of the maps") {
    Int8Gemm target, no_amx;
    REQUIRE(target.init() == Status::Ok);
    REQUIRE(no_amx.init(Isa::Auto, true, false) == Status::Ok);
    uint32_t seed = 700;
    int ran = 0;
    for (const Int8Gemm* gemm : {&target, &no_amx}) {
        if (!gemm->runs_pixels() || (gemm == &no_amx && !target.amx())) continue;   // no_amx: another tile only under AMX
        ++ran;
        for (int64_t width = 1; width <= 14; ++width)
            for (int64_t column : {(int64_t)0, width / 2, width - 1}) {
                check_int8_pixels(*gemm, 16, 36, width, column, 2 * width + 1, 0, 16, seed++);
                check_int8_pixels(*gemm, 64, 12, width, column, width, 0, 64, seed++);
            }
        check_int8_pixels(*gemm, 112, 40, 9, 4, 30, 0, 112, seed++);    // panels 48 + 32 + 32 (AVX-VNNI: 7 of 16), 10 K groups
        check_int8_pixels(*gemm, 96, 8, 13, 0, 26, 32, 80, seed++);     // a part starting inside a panel
        check_int8_pixels(*gemm, 80, 1156, 20, 3, 37, 16, 80, seed++);  // 289 K groups: the steps' tail
    }
    MESSAGE("pixel tiles: " << ran << " configuration(s)");
}

TEST_CASE("int8 gemm: interleave4 puts four rows' bytes together, every length and offset, nothing written past n groups") {
    std::mt19937 rng(71);
    std::vector<uint8_t> src(4 * 200);
    for (uint8_t& v : src) v = (uint8_t)rng();
    std::string ran;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        Int8Gemm gemm;
        if (!isa_available(isa) || gemm.init(isa) != Status::Ok) continue;
        ran += std::string(" ") + isa_name(isa);
        for (int64_t n = 0; n <= 70; ++n)
            for (int64_t offset : {0, 1, 13}) {
                CAPTURE(isa_name(isa)); CAPTURE(n); CAPTURE(offset);
                // rows 200 bytes apart, the last one ending right where n columns do
                const uint8_t* rows[4] = {src.data() + offset, src.data() + 200 + offset, src.data() + 400 + offset,
                                          src.data() + 800 - n};
                std::vector<uint8_t> dst((size_t)(4 * n + 64), 0x5a);
                gemm.interleave4(rows, n, dst.data());
                int64_t bad = 0;
                for (int64_t j = 0; j < n; ++j)
                    for (int q = 0; q < 4; ++q) bad += dst[(size_t)(4 * j + q)] != rows[q][j];
                for (size_t i = (size_t)(4 * n); i < dst.size(); ++i) bad += dst[i] != 0x5a;
                CHECK(bad == 0);
            }
    }
    MESSAGE("interleave4 on" << ran);
}

TEST_CASE("int8 gemm: weights within [-64, 64] on the byte-pair tiles (AVX2 without AVX-VNNI), exact at the extremes") {
    std::vector<int8_t> w = {-64, 0, 64, 3};
    CHECK(Int8Gemm::narrow(w.data(), w.size()));
    w[1] = 65;
    CHECK(!Int8Gemm::narrow(w.data(), w.size()));
    w[1] = -65;
    CHECK(!Int8Gemm::narrow(w.data(), w.size()));
    CHECK(!Int8Gemm::narrow(w.data(), 2));
    CHECK(Int8Gemm::narrow(w.data(), 1));
    if (!isa_available(Isa::Avx2)) {
        MESSAGE("no AVX2: no byte-pair tiles");
        return;
    }
    Int8Gemm pairs, with_dot, wide;
    REQUIRE(pairs.init(Isa::Avx2, false, true, true) == Status::Ok);   // no dot products: the pairs on any AVX2 CPU
    REQUIRE(with_dot.init(Isa::Avx2, true, true, true) == Status::Ok);
    REQUIRE(wide.init(Isa::Avx2, false, true, false) == Status::Ok);
    CHECK(pairs.byte_pairs());
    CHECK(with_dot.byte_pairs() == !int8_avx_vnni_available());   // AVX-VNNI's own vpdpbusd where the CPU has it
    CHECK(!wide.byte_pairs());
    CHECK(wide.nr() == 8);   // the 16-bit tile
    CHECK(pairs.nr() == 16);
    CHECK(pairs.runs_pixels());
    CHECK(pairs.reads_b_groups());
    uint32_t seed = 900;
    const int64_t mr = pairs.mr(), nr = pairs.nr();
    for (int64_t m : {(int64_t)1, mr - 1, mr, 2 * mr + 1})
        for (int64_t n : {(int64_t)1, (int64_t)15, nr, nr + 1, 2 * nr + 33})
            for (int64_t k : {1, 3, 4, 5, 8, 23, 28, 44, 64, 301})
                check_int8_gemm(pairs, m, n, k, 0, m, seed++, 64);
    check_int8_gemm(pairs, 3 * mr, 70, 27, mr, 2 * mr, seed++, 64);
    check_int8_gemm(pairs, 20, 50, 2000, 0, 20, seed++, 64);
    check_int8_gemm(pairs, 2 * mr + 1, 300 * nr + 7, 8, 2, 2 * mr, seed++, 64);
    for (int64_t width = 1; width <= 14; ++width)
        for (int64_t column : {(int64_t)0, width - 1}) check_int8_pixels(pairs, 16, 36, width, column, 2 * width + 1, 0, 16, seed++, 64);
    check_int8_pixels(pairs, 112, 40, 9, 4, 30, 0, 112, seed++, 64);
    check_int8_pixels(pairs, 80, 1156, 20, 3, 37, 16, 80, seed++, 64);
}

TEST_CASE("int8 convert: quantize, dequantize, pair and float tables, binary ops on every target, every tail, the oracle's bits") {
    std::mt19937 rng(5);
    std::vector<uint8_t> table(65536 + Int8Convert::kPairTablePadding);
    for (uint8_t& t : table) t = (uint8_t)rng();
    std::vector<uint8_t> a(400), b(400);
    for (size_t i = 0; i < a.size(); ++i) a[i] = (uint8_t)rng(), b[i] = (uint8_t)rng();
    a[0] = b[0] = 255;   // the table's last entry: the gather reads into the padding
    std::vector<float> floats(256);
    for (float& v : floats) v = (float)(int32_t)rng() * 1e-6f;
    floats[7] = NAN, floats[8] = -0.0f, floats[9] = INFINITY;
    std::string jit;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        CAPTURE(isa_name(isa));
        Int8Convert convert;
        REQUIRE(convert.init(isa) == Status::Ok);
        if (convert.jit()) jit += std::string(" ") + isa_name(isa);
        check_convert<uint8_t>(convert, 1);
        check_convert<int8_t>(convert, 2);
        check_convert_binary(convert, 3);
        for (int64_t n : {0, 1, 15, 16, 17, 31, 32, 33, 64, 65, 97, 128, 129, 300, 399})
            for (int64_t offset : {0, 1}) {
                CAPTURE(n); CAPTURE(offset);
                std::vector<uint8_t> y((size_t)(n + 64), 0x5a);
                convert.pair(table.data(), a.data() + offset, b.data() + offset, y.data(), n);
                int64_t bad = 0;
                for (int64_t i = 0; i < n; ++i) bad += y[i] != table[a[offset + i] << 8 | b[offset + i]];
                for (int64_t i = n; i < n + 64; ++i) bad += y[i] != 0x5a;
                CHECK(bad == 0);
                std::vector<float> f((size_t)(n + 64), 7.0f);
                convert.lookup(floats.data(), a.data() + offset, f.data(), n);
                bad = 0;
                for (int64_t i = 0; i < n; ++i) bad += std::memcmp(&f[i], &floats[a[offset + i]], 4) != 0;
                for (int64_t i = n; i < n + 64; ++i) bad += f[i] != 7.0f;
                CHECK(bad == 0);
            }
    }
    Int8Convert convert;
    CHECK(convert.init(Isa::Neon) == (isa_available(Isa::Neon) ? Status::Ok : Status::Unsupported));
    MESSAGE("int8 convert kernels:" << (jit.empty() ? std::string(" none (portable loops)") : jit));
}

TEST_CASE("int8 gemv: every tail of N and K, 1 to 9 rows, parts of the panels, every x86 kernel") {
    // target: AVX-512 VNNI's zmm kernel, else AVX-VNNI's ymm one, else AVX2's; no_dot: AVX2's
    Int8Gemv target, no_dot;
    const Status status = target.init(), no_dot_status = no_dot.init(Isa::Auto, false);
    const bool x86 = default_isa() == Isa::Avx2 || default_isa() == Isa::Avx512;
    if (!x86) {
        CHECK(status == Status::Unsupported);
        CHECK(no_dot_status == Status::Unsupported);
        return;
    }
    REQUIRE(status == Status::Ok);
    REQUIRE(no_dot_status == Status::Ok);
    const bool vnni = default_isa() == Isa::Avx512 && int8_vnni_available();
    CHECK(target.rows_per_call() == (vnni || int8_avx_vnni_available() ? 4 : 2));
    CHECK(target.columns_per_call(1) == 64);   // one row reads each panel once
    CHECK(target.columns_per_call(2) == (vnni ? 64 : 32));
    CHECK(no_dot.rows_per_call() == 2);
    CHECK(no_dot.columns_per_call(1) == 64);
    CHECK(no_dot.columns_per_call(2) == 32);
    MESSAGE("int8 gemv: " << std::string(vnni ? "AVX-512 VNNI" : int8_avx_vnni_available() ? "AVX-VNNI" : "AVX2") << " and AVX2");
    uint32_t seed = 7000;
    for (const Int8Gemv* gemv : {&target, &no_dot}) {
        for (int64_t rows = 1; rows <= 9; ++rows)
            for (int64_t n : {1, 15, 16, 17, 33, 63, 64, 65, 130})
                for (int64_t k : {1, 3, 4, 5, 8, 13, 64, 301}) check_int8_gemv(*gemv, rows, n, k, 0, (n + 63) / 64, seed++);
        check_int8_gemv(*gemv, 2, 200, 27, 1, 3, seed++);    // a middle part of the panels
        check_int8_gemv(*gemv, 3, 200, 27, 3, 4, seed++);    // the last, partial panel alone
        check_int8_gemv(*gemv, 1, 70, 5000, 0, 2, seed++);   // K beyond any cache block
    }
}

// ---- QDQ Conv groups on the CPU device ----
namespace {
struct QdqConv {
    Shape x, w;
    int64_t group = 1;
    Shape strides, dilations, pads;
    const char* act = nullptr;   // "Relu", "Clip", "ClipAbove" or "ClipBelow"
    bool bias = true;
    int64_t shuffle = 0;         // a channel shuffle of y in this many groups after the Q (y's grid again)
    int peak = 127;              // weights within [-peak, peak] (64: the byte-pair tiles on AVX2 without AVX-VNNI)
};

struct Quantized {
    std::vector<uint8_t> y;
    std::string kernels;
};

// The last node's output 0 as the model's output y, compiled with or without FUSION and
// inferred once (allocating nothing): y's uint8 values and the steps' kernels.
Quantized run_quantized(OpTest& t, bool fusion, uint32_t threads) {
    test::CpuRun run = test::run_last_node_on_cpu(t, threads, fusion);
    return {std::vector<uint8_t>(run.bytes.begin(), run.bytes.end()), run.kernels};
}

// DQ(x) -> Conv(w = q s_w per map, b = q_b s_x s_w) -> act -> Q, compiled on CPU (FUSION as
// given), inferred once (allocating nothing).
Quantized run_qdq_conv(const QdqConv& cc, const std::vector<uint8_t>& x, const std::vector<float>& w,
                       const std::vector<float>& b, float sx, uint8_t zx, float sy, uint8_t zy, bool fusion,
                       uint32_t threads, const std::vector<int8_t>& wq, const std::vector<float>& sw) {
    OpTest t;
    t.opset = 13;
    InputRef xin = t.input(cc.x, x);
    NodeId dq = t.op("DequantizeLinear", {xin, t.constant(Shape{}, std::vector<float>{sx}), t.constant(Shape{}, std::vector<uint8_t>{zx})});
    std::vector<InputRef> in = {InputRef::by_id(dq), t.constant(cc.w, w)};
    if (cc.peak != 127) {   // int8 weights through a per-channel DequantizeLinear, as a quantizer writes them
        in[1] = InputRef::by_id(t.op("DequantizeLinear", {t.constant(cc.w, wq), t.constant(Shape{cc.w[0]}, sw),
                                                         t.constant(Shape{cc.w[0]}, std::vector<int8_t>((size_t)cc.w[0], 0))}));
        t.set_int("axis", 0);
    }
    if (cc.bias) in.push_back(t.constant(Shape{cc.w[0]}, b));
    NodeId conv = t.op("Conv", in);
    if (cc.group != 1) t.set_int("group", cc.group);
    if (!cc.strides.empty()) t.set_ints("strides", cc.strides);
    if (!cc.dilations.empty()) t.set_ints("dilations", cc.dilations);
    if (!cc.pads.empty()) t.set_ints("pads", cc.pads);
    NodeId last = conv;
    if (cc.act && std::string(cc.act) == "Relu") last = t.op("Relu", {InputRef::by_id(conv)});
    if (cc.act && std::string(cc.act) == "Clip")
        last = t.op("Clip", {InputRef::by_id(conv), t.constant(Shape{}, std::vector<float>{-0.25f}), t.constant(Shape{}, std::vector<float>{0.75f})});
    if (cc.act && std::string(cc.act) == "ClipAbove")   // every value above y's range: 255
        last = t.op("Clip", {InputRef::by_id(conv), t.constant(Shape{}, std::vector<float>{20.0f}), t.constant(Shape{}, std::vector<float>{30.0f})});
    if (cc.act && std::string(cc.act) == "ClipBelow")   // every value below it: 0
        last = t.op("Clip", {InputRef::by_id(conv), t.constant(Shape{}, std::vector<float>{-30.0f}), t.constant(Shape{}, std::vector<float>{-20.0f})});
    NodeId q = t.op("QuantizeLinear", {InputRef::by_id(last), t.constant(Shape{}, std::vector<float>{sy}), t.constant(Shape{}, std::vector<uint8_t>{zy})});
    if (cc.shuffle) {   // ShuffleNet's DQ -> Reshape [N, G, C / G, H W] -> Transpose -> Reshape [N, C, H W] -> Q
        const int64_t n = cc.x[0], maps = cc.w[0];
        NodeId d = t.op("DequantizeLinear", {InputRef::by_id(q), t.constant(Shape{}, std::vector<float>{sy}), t.constant(Shape{}, std::vector<uint8_t>{zy})});
        NodeId r = t.op("Reshape", {InputRef::by_id(d), t.constant(Shape{4}, Shape{n, cc.shuffle, maps / cc.shuffle, -1})});
        NodeId tr = t.op("Transpose", {InputRef::by_id(r)});
        t.set_ints("perm", {0, 2, 1, 3});
        NodeId back = t.op("Reshape", {InputRef::by_id(tr), t.constant(Shape{3}, Shape{n, maps, -1})});
        t.op("QuantizeLinear", {InputRef::by_id(back), t.constant(Shape{}, std::vector<float>{sy}), t.constant(Shape{}, std::vector<uint8_t>{zy})});
    }
    return run_quantized(t, fusion, threads);
}

// Whether the CPU device runs cc by Int8WinogradF23 (run_int8_conv_winograd): a 2-D 3x3 conv of
// stride 1, undilated, one group, where the int8 tiles have no byte dot product (AVX2 without
// AVX-VNNI): 32 channels or more on the 16-bit tile; on the byte-pair tile (7-bit weights) 64 or
// more and 28 x 28 outputs or more.
bool takes_int8_winograd(const QdqConv& cc) {
#if defined(TESSEL_NO_JIT) || !defined(__x86_64__)
    (void)cc;
    return false;
#else
    const Isa isa = default_isa();
    const bool no_dot = (isa == Isa::Avx2 && !int8_avx_vnni_available()) ||
                        (isa == Isa::Avx512 && !int8_vnni_available() && !int8_avx_vnni_available());
    if (!no_dot || cc.group != 1 || cc.x.size() != 4 || cc.w[2] != 3 || cc.w[3] != 3) return false;
    for (int64_t v : cc.strides)
        if (v != 1) return false;
    for (int64_t v : cc.dilations)
        if (v != 1) return false;
    const int64_t pad_h = cc.pads.empty() ? 0 : cc.pads[0] + cc.pads[2], pad_w = cc.pads.empty() ? 0 : cc.pads[1] + cc.pads[3];
    const int64_t outputs = (cc.x[2] + pad_h - 2) * (cc.x[3] + pad_w - 2);
    return cc.x[1] >= 16 && outputs >= (cc.peak <= 64 ? 28 * 28 : 12 * 12);
#endif
}

void check_qdq_conv(const QdqConv& cc, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t maps = cc.w[0], per_map = count_of(cc.w) / maps;
    std::vector<uint8_t> x((size_t)count_of(cc.x));
    for (uint8_t& v : x) v = (uint8_t)(rng() % 256);
    const float sx = 0.02f, sy = 0.05f;
    const uint8_t zx = 37, zy = 101;
    // Weights as the quantizer writes them: q in [-127, 127] with 127 reached, times s_w[map].
    std::vector<int8_t> q((size_t)count_of(cc.w));
    std::vector<float> w(q.size()), sw((size_t)maps), b((size_t)maps);
    std::vector<int32_t> qb((size_t)maps);
    for (int64_t m = 0; m < maps; ++m) {
        sw[(size_t)m] = std::ldexp(1.0f + (float)(rng() % 100) / 100.0f, -9);
        for (int64_t k = 0; k < per_map; ++k) q[(size_t)(m * per_map + k)] = (int8_t)((int)(rng() % (2 * cc.peak + 1)) - cc.peak);
        q[(size_t)(m * per_map + rng() % per_map)] = (int8_t)((rng() & 1) ? cc.peak : -cc.peak);
        for (int64_t k = 0; k < per_map; ++k) w[(size_t)(m * per_map + k)] = (float)q[(size_t)(m * per_map + k)] * sw[(size_t)m];
        qb[(size_t)m] = cc.bias ? (int32_t)(rng() % 4001) - 2000 : 0;
        b[(size_t)m] = (float)((double)qb[(size_t)m] * (double)sx * (double)sw[(size_t)m]);
    }
    // The integer oracle: the documented requantization of sum (x - zx) q + q_b.
    const int sp = (int)cc.x.size() - 2;
    const int64_t batch = cc.x[0], channels = cc.x[1], cg = cc.w[1], mg = maps / cc.group;
    int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0}, out[3] = {1, 1, 1};
    for (int i = 0; i < sp; ++i) {
        int j = 3 - sp + i;
        in[j] = cc.x[2 + i];
        k[j] = cc.w[2 + i];
        if (!cc.strides.empty()) s[j] = cc.strides[i];
        if (!cc.dilations.empty()) d[j] = cc.dilations[i];
        int64_t pe = 0;
        if (!cc.pads.empty()) { pb[j] = cc.pads[i]; pe = cc.pads[sp + i]; }
        out[j] = (in[j] + pb[j] + pe - ((k[j] - 1) * d[j] + 1)) / s[j] + 1;
    }
    float lo = -(float)zy, hi = 255.0f - zy;
    if (cc.act && std::string(cc.act) == "Relu") lo = 0.0f;
    if (cc.act && std::string(cc.act) == "Clip") { lo = -5.0f; hi = 15.0f; }   // -0.25 / 0.05, 0.75 / 0.05
    if (cc.act && std::string(cc.act) == "ClipAbove") lo = hi = 255.0f - zy;  // saturated, as QuantizeLinear of 20..30
    if (cc.act && std::string(cc.act) == "ClipBelow") lo = hi = -(float)zy;
    const int64_t positions = out[0] * out[1] * out[2];
    std::vector<uint8_t> want((size_t)(batch * maps * positions));
    for (int64_t n = 0; n < batch; ++n)
        for (int64_t m = 0; m < maps; ++m) {
            const float scale = sx * sw[(size_t)m] / sy;   // float32 operations, onnxruntime's order
            for (int64_t o = 0; o < positions; ++o) {
                int64_t o0 = o / (out[1] * out[2]), o1 = o / out[2] % out[1], o2 = o % out[2], g = m / mg;
                int32_t acc = 0;
                for (int64_t c = 0; c < cg; ++c)
                    for (int64_t k0 = 0; k0 < k[0]; ++k0)
                        for (int64_t k1 = 0; k1 < k[1]; ++k1)
                            for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                                int64_t i0 = o0 * s[0] - pb[0] + k0 * d[0], i1 = o1 * s[1] - pb[1] + k1 * d[1], i2 = o2 * s[2] - pb[2] + k2 * d[2];
                                if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                                int32_t xv = x[(size_t)((((n * channels + g * cg + c) * in[0] + i0) * in[1] + i1) * in[2] + i2)];
                                acc += (xv - zx) * q[(size_t)((((m * cg + c) * k[0] + k0) * k[1] + k1) * k[2] + k2)];
                            }
                want[(size_t)((n * maps + m) * positions + o)] = int8_requantize(acc, qb[(size_t)m], scale, lo, hi, zy);
            }
        }
    if (cc.shuffle) {   // map m of shuffle group g (of C / G maps) becomes map m G + g
        std::vector<uint8_t> shuffled(want.size());
        const int64_t per = maps / cc.shuffle;
        for (int64_t n = 0; n < batch; ++n)
            for (int64_t m = 0; m < maps; ++m)
                std::memcpy(&shuffled[(size_t)((n * maps + m % per * cc.shuffle + m / per) * positions)],
                            &want[(size_t)((n * maps + m) * positions)], (size_t)positions);
        want.swap(shuffled);
    }
    // the shuffle is taken into the conv when its groups are the conv's and a group has 2 maps or more
    const bool taken = cc.shuffle > 1 && cc.shuffle == cc.group && maps / cc.group > 1;
    for (uint32_t threads : {1u, 2u}) {
        CAPTURE(threads);
        Quantized fast = run_qdq_conv(cc, x, w, b, sx, zx, sy, zy, true, threads, q, sw);
        INFO(fast.kernels);
        CHECK(fast.kernels.find("int8:") != std::string::npos);
        CHECK(fast.kernels.find("Conv") != std::string::npos);
        CHECK(fast.kernels.find("DequantizeLinear") == std::string::npos);   // the group reads x's uint8
        if (cc.shuffle) CHECK((fast.kernels.find(":Transpose") == std::string::npos) == taken);
        const int64_t depth = count_of(cc.w) / cc.w[0];
        const bool amx = int8_amx_available() && default_isa() == Isa::Avx512 && Int8Gemm::amx_pays(cc.w[0] / cc.group, depth);
        CHECK((fast.kernels.find("Conv+amx") != std::string::npos) == amx);
        CHECK((fast.kernels.find("Conv+winograd") != std::string::npos) == takes_int8_winograd(cc));
        REQUIRE(fast.y.size() == want.size());
        int64_t bad = 0;
        for (size_t i = 0; i < want.size(); ++i)
            if (fast.y[i] != want[i] && bad++ < 5) MESSAGE("y[" << i << "] = " << (int)fast.y[i] << ", want " << (int)want[i]);
        CHECK(bad == 0);
    }
    // The float reference path (DequantizeLinear, Conv, Quantize in float32): within one step.
    Quantized reference = run_qdq_conv(cc, x, w, b, sx, zx, sy, zy, false, 1, q, sw);
    CHECK(reference.kernels.find("int8:") == std::string::npos);
    int64_t far = 0;
    for (size_t i = 0; i < want.size(); ++i) far += std::abs((int)reference.y[i] - (int)want[i]) > 1;
    CHECK(far == 0);
}
}  // namespace

TEST_CASE("int8: QDQ Conv groups on the CPU device: 1x1, 3x3, strided, dilated, padded, grouped, depthwise, Relu, Clip, 1-D") {
    const std::vector<QdqConv> cases = {
        {{1, 16, 9, 11}, {24, 16, 1, 1}, 1, {}, {}, {}, nullptr, true},                                          // 1x1 straight on NCHW
        {{2, 5, 7, 19}, {13, 5, 1, 1}, 1, {}, {}, {}, "Relu", false},         // M, N and K tails, no bias
        {{1, 3, 6, 6}, {2, 3, 1, 1}, 1, {2, 2}, {}, {}, "Clip", true},                   // strided 1x1 (im2col)
        {{1, 8, 13, 17}, {16, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, "Relu", true},           // 3x3 padded: pads read x's zero point
        {{2, 3, 7, 6}, {4, 3, 3, 2}, 1, {2, 1}, {1, 2}, {1, 0, 2, 1}, nullptr, true},              // strided, dilated, asymmetric pads
        {{1, 4, 8, 7}, {6, 2, 3, 3}, 2, {1, 2}, {}, {1, 1, 0, 0}, nullptr, true},                  // 2 groups
        {{1, 8, 10, 10}, {16, 2, 3, 3}, 4, {}, {}, {1, 1, 1, 1}, "Relu", true},           // 4 groups
        {{1, 32, 21, 23}, {19, 32, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, nullptr, true},                 // depth 288, 483 positions
        {{2, 3, 17}, {5, 3, 4}, 1, {3}, {2}, {2, 1}, nullptr, true},                               // 1-D
        {{1, 64, 5, 5}, {40, 64, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, nullptr, true},                   // one small unit: rows in parts
        {{1, 16, 60, 70}, {24, 16, 1, 1}, 1, {}, {}, {}, "Relu", true},                   // 1x1 in several blocks
        {{1, 8, 12, 37}, {8, 1, 3, 3}, 8, {}, {}, {1, 1, 1, 1}, "Relu", true},            // depthwise, stride 1
        {{1, 6, 9, 9}, {6, 1, 3, 3}, 6, {2, 2}, {2, 2}, {2, 2, 2, 2}, nullptr, true},     // depthwise, strided, dilated
        {{2, 4, 7, 20}, {8, 1, 5, 5}, 4, {1, 2}, {}, {2, 2, 1, 2}, "Clip", false},        // depthwise, 2 maps per channel
        {{1, 3, 30}, {3, 1, 3}, 3, {}, {}, {0, 2}, nullptr, true},                        // depthwise 1-D
        // stride 1 without im2col: B's rows read from the zero-point padded copy
        {{1, 64, 30, 41}, {20, 64, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, "Relu", true},         // several blocks, rows cut
        {{1, 5, 9, 12}, {7, 5, 3, 2}, 1, {}, {2, 3}, {2, 0, 1, 3}, nullptr, true},          // dilated, asymmetric pads
        {{2, 6, 5, 4}, {6, 3, 2, 2}, 2, {}, {}, {}, "Clip", false},                        // 2 groups, no padding
        {{1, 4, 11}, {3, 4, 5}, 1, {}, {}, {2, 2}, nullptr, true},                         // 1-D
        // depthwise on the float kernels (exact integer sums)
        {{1, 16, 23, 45}, {16, 1, 5, 5}, 16, {}, {}, {2, 2, 2, 2}, "Relu", true},          // 5x5, wide rows
        {{1, 12, 20, 33}, {12, 1, 3, 3}, 12, {2, 2}, {}, {0, 1, 1, 0}, nullptr, true},     // stride 2, asymmetric pads
        {{1, 2, 9, 9}, {2, 1, 7, 7}, 2, {}, {}, {3, 3, 3, 3}, nullptr, true},              // 49 taps
        // 64 maps and more, K x maps of 16384 and more: the AMX tile where the CPU has it (32 x 32:
        // M tails past a panel, K padded to 64)
        {{1, 200, 9, 13}, {70, 200, 1, 1}, 1, {}, {}, {}, "Relu", true},                  // 1x1 straight on NCHW
        {{2, 30, 15, 17}, {66, 30, 3, 3}, 1, {2, 2}, {}, {1, 1, 1, 1}, "Clip", true},     // strided 3x3 from phase planes
        {{1, 24, 19, 21}, {128, 24, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, nullptr, true},        // 3x3 from the padded copy
        // channels (of a group) a multiple of 4, no VBMI row packing (TESSEL_ISA below avx512, other CPUs): the padded copy holds 4 channels a pixel
        {{2, 8, 9, 12}, {12, 4, 3, 2}, 2, {}, {2, 3}, {2, 0, 1, 3}, "Relu", true},         // 2 groups, dilated, asymmetric pads, batch 2
        {{1, 12, 14, 15}, {10, 12, 3, 3}, 1, {2, 2}, {}, {1, 1, 1, 1}, nullptr, true},     // strided: phase planes of 4 channels
        {{2, 32, 11, 10}, {70, 32, 3, 3}, 1, {2, 1}, {}, {1, 0, 1, 2}, "Clip", true},      // AMX where the CPU has it, stride 2 x 1
        // past the one-thread bound (kInt8ParallelMacs): split over 2 threads
        {{1, 16, 40, 40}, {32, 16, 3, 3}, 1, {2, 2}, {}, {1, 1, 1, 1}, "Relu", true},     // strided 3x3 (im2col)
        {{1, 32, 40, 40}, {32, 1, 3, 3}, 32, {}, {}, {1, 1, 1, 1}, "Relu", true},          // depthwise, stride 1
        {{1, 32, 40, 41}, {32, 1, 3, 3}, 32, {2, 2}, {}, {1, 1, 1, 1}, nullptr, true},     // depthwise, stride 2
        {{1, 2, 40, 60}, {4, 1, 3, 3}, 2, {}, {}, {1, 1, 1, 1}, "Relu", true},           // depthwise, 2 maps a channel, bands
        {{3, 2, 20, 40}, {4, 1, 3, 3}, 2, {}, {}, {1, 1, 1, 1}, nullptr, true},            // depthwise, a thread's units from image 1
        // a channel shuffle after the Q: taken into the conv when its groups are the conv's
        {{1, 24, 9, 7}, {24, 8, 1, 1}, 3, {}, {}, {}, "Relu", true, 3},                   // ShuffleNet's 1x1 group conv
        {{2, 24, 6, 5}, {36, 6, 3, 3}, 4, {}, {}, {1, 1, 1, 1}, nullptr, true, 4},         // 3x3 from the padded copy, batch 2
        {{1, 240, 28, 28}, {60, 80, 1, 1}, 3, {}, {}, {}, "Relu", true, 3},               // over 2 threads
        {{1, 96, 14, 14}, {192, 32, 1, 1}, 3, {}, {}, {}, nullptr, true, 3},              // AMX where the CPU has it
        {{1, 24, 9, 7}, {24, 8, 1, 1}, 3, {}, {}, {}, nullptr, true, 2},                  // other groups: the shuffle's own step
        {{1, 12, 6, 6}, {12, 12, 1, 1}, 1, {}, {}, {}, nullptr, true, 3},                 // a plain conv: the shuffle's own step
        // a Clip wholly above or below y's range saturates (255, 0) on every kernel
        {{1, 8, 9, 11}, {16, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, "ClipAbove", true},
        {{1, 8, 9, 11}, {8, 1, 3, 3}, 8, {}, {}, {1, 1, 1, 1}, "ClipAbove", true},         // depthwise
        {{1, 16, 5, 7}, {24, 16, 1, 1}, 1, {}, {}, {}, "ClipBelow", true},
        // weights within [-64, 64]: AVX2 without AVX-VNNI runs AVX-VNNI's tiles by vpmaddubsw pairs
        {{1, 16, 9, 11}, {24, 16, 1, 1}, 1, {}, {}, {}, nullptr, true, 0, 64},             // 1x1 straight on NCHW
        {{1, 3, 6, 6}, {2, 3, 1, 1}, 1, {2, 2}, {}, {}, "Clip", true, 0, 64},             // strided 1x1 (im2col)
        {{1, 32, 21, 23}, {19, 32, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, "Relu", true, 0, 64},   // 3x3 from the padded copy
        {{1, 12, 14, 15}, {10, 12, 3, 3}, 1, {2, 2}, {}, {1, 1, 1, 1}, nullptr, true, 0, 64},   // strided, phase planes
        {{1, 64, 30, 41}, {20, 64, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, "Relu", true, 0, 64},   // several blocks, rows cut
        {{1, 8, 10, 10}, {16, 2, 3, 3}, 4, {}, {}, {1, 1, 1, 1}, nullptr, true, 0, 64},   // 4 groups
        {{1, 8, 12, 37}, {8, 1, 3, 3}, 8, {}, {}, {1, 1, 1, 1}, "Relu", true, 0, 64},     // depthwise, stride 1
        {{1, 12, 20, 33}, {12, 1, 3, 3}, 12, {2, 2}, {}, {0, 1, 1, 0}, nullptr, true, 0, 64},   // depthwise, stride 2
        // 3x3 of stride 1 by Winograd F(2x2, 3x3) on AVX2 without AVX-VNNI (takes_int8_winograd)
        {{1, 16, 12, 13}, {20, 16, 3, 3}, 1, {}, {}, {0, 1, 2, 0}, "Clip", true},          // 16 channels, 144 outputs, asymmetric pads
        {{1, 15, 12, 13}, {20, 15, 3, 3}, 1, {}, {}, {0, 1, 2, 0}, "Clip", true},          // 15 channels: direct
        {{1, 16, 11, 14}, {20, 16, 3, 3}, 1, {}, {}, {0, 1, 2, 0}, "Clip", true},          // 143 outputs: direct
        {{2, 40, 14, 14}, {13, 40, 3, 3}, 1, {}, {}, {}, nullptr, true},                    // no pads, batch 2
        {{1, 16, 28, 30}, {10, 16, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, nullptr, true, 0, 64},   // 7-bit weights: 840 outputs
        {{1, 15, 28, 30}, {10, 15, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, nullptr, true, 0, 64},   // 15 channels: direct
        {{1, 16, 27, 29}, {10, 16, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, nullptr, true, 0, 64},   // 783: direct
        {{1, 256, 20, 56}, {8, 256, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, "Relu", true},          // several bands of tiles
        // an empty batch: every kind of unit plan with no images (nothing to divide among the threads)
        {{0, 16, 9, 11}, {24, 16, 1, 1}, 1, {}, {}, {}, nullptr, true},                    // 1x1 straight on NCHW
        {{0, 3, 6, 6}, {2, 3, 1, 1}, 1, {2, 2}, {}, {}, "Clip", true},                    // strided 1x1 (im2col)
        {{0, 32, 21, 23}, {19, 32, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, nullptr, true},         // 3x3 from the padded copy
        {{0, 12, 14, 15}, {10, 12, 3, 3}, 1, {2, 2}, {}, {1, 1, 1, 1}, nullptr, true},     // strided: phase planes
        {{0, 8, 12, 37}, {8, 1, 3, 3}, 8, {}, {}, {1, 1, 1, 1}, "Relu", true},            // depthwise
        {{0, 8, 10, 10}, {16, 2, 3, 3}, 4, {}, {}, {1, 1, 1, 1}, nullptr, true},          // 4 groups
        {{0, 16, 12, 13}, {20, 16, 3, 3}, 1, {}, {}, {0, 1, 2, 0}, "Clip", true},          // Winograd where it runs
        {{0, 16, 28, 30}, {10, 16, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, nullptr, true, 0, 64},   // 7-bit weights
    };
    uint32_t seed = 500;
    for (const QdqConv& cc : cases) {
        CAPTURE(seed);
        check_qdq_conv(cc, seed);
        seed += 7;
    }
}

// ---- per-tensor QuantizeLinear and DequantizeLinear ----
namespace {
template <class Q>
std::vector<unsigned char> run_quant(const char* op, const std::vector<unsigned char>& x, ElementType in_type, Shape shape,
                                     float scale, Q zero_point, bool fusion, std::string* kernels, Isa isa = Isa::Auto) {
    OpTest t;
    t.opset = 13;
    NodeId id = kNoNode;
    REQUIRE(t.model.add_input("x", test::make_desc(in_type, shape), &id) == Status::Ok);
    t.op(op, {InputRef::by_id(id), t.constant(Shape{}, std::vector<float>{scale}), t.constant(Shape{}, std::vector<Q>{zero_point})});
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    Core core;
    CompiledModel compiled;
    ConfigEntry config[] = {{"PERF_COUNT", "YES"}, {"FUSION", fusion ? "YES" : "NO"}, {"NUM_THREADS", "2"}, {"ISA", isa_name(isa)}};
    REQUIRE(core.compile_model(t.model, "CPU", Span<const ConfigEntry>(config, isa == Isa::Auto ? 3 : 4), &compiled) == Status::Ok);
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    REQUIRE(request.input(0).bytes() == x.size());
    std::memcpy(request.input(0).data(), x.data(), x.size());
    uint64_t before = tessel_test::allocation_count();
    REQUIRE(request.infer() == Status::Ok);
    CHECK(tessel_test::allocation_count() == before);
    kernels->clear();
    for (const ProfileEntry& e : request.profiling_info()) *kernels += std::string(e.kernel) + " ";
    const Tensor& out = request.output(0);
    const unsigned char* p = static_cast<const unsigned char*>(out.data());
    return std::vector<unsigned char>(p, p + out.bytes());
}

template <class Q>
void check_quant_pair(float scale, Q zero_point, uint32_t seed) {
    CAPTURE(scale); CAPTURE((int)zero_point);
    const int64_t n = 70000 + 13;   // several parts and a scalar tail
    std::mt19937 rng(seed);
    std::vector<float> x((size_t)n);
    for (float& v : x) v = (float)((int)(rng() % 4001) - 2000) * scale / 8.0f;   // many exact ties
    x[0] = NAN; x[1] = INFINITY; x[2] = -INFINITY; x[3] = 1e30f; x[4] = -1e30f; x[5] = 0.5f * scale; x[6] = -2.5f * scale;
    std::vector<unsigned char> xb(x.size() * 4);
    std::memcpy(xb.data(), x.data(), xb.size());
    std::string fast_kernels, ref_kernels;
    ElementType q_type = test::type_of<Q>();
    auto ref = run_quant("QuantizeLinear", xb, ElementType::Float32, Shape{n}, scale, zero_point, false, &ref_kernels);
    CHECK(ref_kernels.find("int8:") == std::string::npos);
    auto back_ref = run_quant("DequantizeLinear", ref, q_type, Shape{n}, scale, zero_point, false, &ref_kernels);
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        CAPTURE(isa_name(isa));
        const std::string target = "int8:" + test::int8_convert_target(isa);
        auto fast = run_quant("QuantizeLinear", xb, ElementType::Float32, Shape{n}, scale, zero_point, true, &fast_kernels, isa);
        CHECK(fast_kernels.find(target + ":QuantizeLinear") != std::string::npos);
        CHECK(fast == ref);
        auto back = run_quant("DequantizeLinear", ref, q_type, Shape{n}, scale, zero_point, true, &fast_kernels, isa);
        CHECK(fast_kernels.find(target + ":DequantizeLinear") != std::string::npos);
        CHECK(back == back_ref);
    }
}
}  // namespace

TEST_CASE("int8: per-tensor QuantizeLinear and DequantizeLinear, uint8 and int8, bit for bit the reference's") {
    check_quant_pair<uint8_t>(0.0235f, 128, 1);
    check_quant_pair<uint8_t>(3.0f, 0, 2);
    check_quant_pair<int8_t>(0.0117f, -3, 3);
    check_quant_pair<int8_t>(1e-3f, 127, 4);
}

TEST_CASE("int8: what the int8 path does not take keeps its reference results and errors") {
    // A scale of zero: the fast QuantizeLinear refuses it (x / 0), the reference step stays.
    std::vector<float> x = {1.0f, -1.0f, 0.0f, 2.5f};
    std::vector<unsigned char> xb(16);
    std::memcpy(xb.data(), x.data(), 16);
    std::string kernels;
    auto fast = run_quant<uint8_t>("QuantizeLinear", xb, ElementType::Float32, Shape{4}, 0.0f, 10, true, &kernels);
    CHECK(kernels.find("int8:") == std::string::npos);
    std::string ref_kernels;
    CHECK(fast == run_quant<uint8_t>("QuantizeLinear", xb, ElementType::Float32, Shape{4}, 0.0f, 10, false, &ref_kernels));
    // A QDQ Conv whose weights do not match x's channels: the compile fails as without int8.
    OpTest t;
    t.opset = 13;
    InputRef xin = t.input(Shape{1, 3, 4, 4}, std::vector<uint8_t>(48, 1));
    NodeId dq = t.op("DequantizeLinear", {xin, t.constant(Shape{}, std::vector<float>{0.1f}), t.constant(Shape{}, std::vector<uint8_t>{0})});
    NodeId conv = t.op("Conv", {InputRef::by_id(dq), t.constant(Shape{2, 4, 1, 1}, std::vector<float>(8, 0.5f))});
    t.op("QuantizeLinear", {InputRef::by_id(conv), t.constant(Shape{}, std::vector<float>{0.1f}), t.constant(Shape{}, std::vector<uint8_t>{0})});
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    Core core;
    CompiledModel compiled;
    CHECK(core.compile_model(t.model, "CPU", Span<const ConfigEntry>(), &compiled) == Status::InvalidArgument);
    // An ISA the CPU lacks.
    Int8Gemm gemm;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon})
        if (!isa_available(isa)) CHECK(gemm.init(isa) == Status::Unsupported);
}

TEST_CASE("int8: QDQ MatMul groups on the CPU device: batches, tails of K and N, Relu, 1 and 2 threads") {
    struct Case { Shape x; int64_t n; bool relu; };
    // few rows (batch-1 layers: Int8Gemv on x86) with N across panels and K's tails, and many
    const std::vector<Case> cases = {{{2, 5, 37}, 19, false}, {{1, 70, 64}, 48, true}, {{3, 19}, 7, false}, {{1, 200, 130}, 100, true},
                                     {{1, 301}, 130, true}, {{2, 1, 62}, 65, false}, {{4, 64}, 64, false},
                                     {{1, 80, 256}, 96, true}};   // the last on AMX where the CPU has it
    uint32_t seed = 900;
    for (const Case& cc : cases) {
        CAPTURE(seed);
        std::mt19937 rng(seed++);
        const int64_t k = cc.x.back(), n = cc.n, rows = count_of(cc.x) / k;
        std::vector<uint8_t> x((size_t)count_of(cc.x));
        for (uint8_t& v : x) v = (uint8_t)(rng() % 256);
        std::vector<int8_t> q((size_t)(k * n));
        std::vector<float> w(q.size()), sw((size_t)n);
        for (int64_t j = 0; j < n; ++j) sw[(size_t)j] = std::ldexp(1.0f + (float)(rng() % 100) / 100.0f, -8);
        for (int8_t& v : q) v = (int8_t)((int)(rng() % 255) - 127);
        for (int64_t j = 0; j < n; ++j) q[(size_t)((rng() % k) * n + j)] = 127;   // each column reaches 127
        for (size_t i = 0; i < q.size(); ++i) w[i] = (float)q[i] * sw[i % (size_t)n];
        const float sx = 0.03f, sy = 0.2f;
        const uint8_t zx = 90, zy = 60;
        std::vector<uint8_t> want((size_t)(rows * n));
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < n; ++j) {
                int32_t acc = 0;
                for (int64_t p = 0; p < k; ++p) acc += ((int32_t)x[(size_t)(r * k + p)] - zx) * q[(size_t)(p * n + j)];
                const float scale = sx * sw[(size_t)j] / sy;   // float32 operations, onnxruntime's order
                want[(size_t)(r * n + j)] = int8_requantize(acc, 0, scale, cc.relu ? 0.0f : -(float)zy, 255.0f - zy, zy);
            }
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(threads);
            OpTest t;
            t.opset = 13;
            InputRef xin = t.input(cc.x, x);
            NodeId dq = t.op("DequantizeLinear", {xin, t.constant(Shape{}, std::vector<float>{sx}), t.constant(Shape{}, std::vector<uint8_t>{zx})});
            NodeId mm = t.op("MatMul", {InputRef::by_id(dq), t.constant(Shape{k, n}, w)});
            if (cc.relu) mm = t.op("Relu", {InputRef::by_id(mm)});
            t.op("QuantizeLinear", {InputRef::by_id(mm), t.constant(Shape{}, std::vector<float>{sy}), t.constant(Shape{}, std::vector<uint8_t>{zy})});
            REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
            REQUIRE(t.model.finalize() == Status::Ok);
            Core core;
            CompiledModel compiled;
            std::string count = std::to_string(threads);
            ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}};
            REQUIRE(core.compile_model(t.model, "CPU", Span<const ConfigEntry>(config, 2), &compiled) == Status::Ok);
            InferRequest request;
            REQUIRE(compiled.create_request(&request) == Status::Ok);
            std::memcpy(request.input(0).data(), x.data(), x.size());
            uint64_t before = tessel_test::allocation_count();
            REQUIRE(request.infer() == Status::Ok);
            CHECK(tessel_test::allocation_count() == before);
            std::string kernels;
            for (const ProfileEntry& e : request.profiling_info()) kernels += std::string(e.kernel) + " ";
            INFO(kernels);
            CHECK(kernels.find(":MatMul") != std::string::npos);
            Int8Gemv probe;
            const bool gemv = rows <= Int8Gemv::kRows && probe.init() == Status::Ok;
            CHECK((kernels.find("MatMul+gemv") != std::string::npos) == gemv);
            CHECK((kernels.find("MatMul+amx") != std::string::npos) == (int8_amx_available() && default_isa() == Isa::Avx512 && Int8Gemm::amx_pays(n, k) && !gemv));
            const uint8_t* y = request.output(0).data_as<uint8_t>();
            int64_t bad = 0;
            for (size_t i = 0; i < want.size(); ++i)
                if (y[i] != want[i] && bad++ < 5) MESSAGE("y[" << i << "] = " << (int)y[i] << ", want " << (int)want[i]);
            CHECK(bad == 0);
        }
    }
}

// ---- DequantizeLinear -> MaxPool -> QuantizeLinear on uint8 ----
namespace {
struct QdqPool {
    Shape x, kernel, strides, pads, dilations;
    int64_t ceil = 0;
    float sy;
    uint8_t zy;
    bool average = false;
    int64_t count_include_pad = 0;
    bool planes = true;   // an average AVX-512's PoolPlanes takes (a run of planes a call); a max Int8MaxTaps'
};

Quantized run_qdq_pool(const QdqPool& pc, const std::vector<uint8_t>& x, float sx, uint8_t zx, bool fusion, uint32_t threads) {
    OpTest t;
    t.opset = 13;
    InputRef xin = t.input(pc.x, x);
    NodeId dq = t.op("DequantizeLinear", {xin, t.constant(Shape{}, std::vector<float>{sx}), t.constant(Shape{}, std::vector<uint8_t>{zx})});
    NodeId pool = t.op(pc.average ? "AveragePool" : "MaxPool", {InputRef::by_id(dq)});
    t.set_ints("kernel_shape", pc.kernel);
    if (pc.count_include_pad) t.set_int("count_include_pad", 1);
    if (!pc.strides.empty()) t.set_ints("strides", pc.strides);
    if (!pc.pads.empty()) t.set_ints("pads", pc.pads);
    if (!pc.dilations.empty()) t.set_ints("dilations", pc.dilations);
    if (pc.ceil) t.set_int("ceil_mode", 1);
    t.op("QuantizeLinear", {InputRef::by_id(pool), t.constant(Shape{}, std::vector<float>{pc.sy}), t.constant(Shape{}, std::vector<uint8_t>{pc.zy})});
    return run_quantized(t, fusion, threads);
}

// Each case's int8 step at 1 and 2 threads against the float reference path, bit for bit.
void check_qdq_pools(const std::vector<QdqPool>& cases, float sx, uint8_t zx, uint32_t seed) {
    for (const QdqPool& pc : cases) {
        CAPTURE(seed);
        std::mt19937 rng(seed++);
        std::vector<uint8_t> x((size_t)count_of(pc.x));
        for (uint8_t& v : x) v = (uint8_t)(rng() % 256);
        Quantized reference = run_qdq_pool(pc, x, sx, zx, false, 1);
        CHECK(reference.kernels.find("int8:") == std::string::npos);
        for (uint32_t threads : {1u, 2u}) {
            Quantized fast = run_qdq_pool(pc, x, sx, zx, true, threads);
            INFO(fast.kernels);
            if (pc.average) {
                CHECK(fast.kernels.find("int8:") == 0);
                const bool planes = default_isa() == Isa::Avx512 && pc.planes;
                CHECK(fast.kernels.find(planes ? ":AveragePool:planes " : ":AveragePool ") != std::string::npos);
                CHECK(fast.kernels.find("QuantizeLinear") == std::string::npos);
            } else {
                CHECK(test::has_int8_step(fast.kernels, "MaxPool", pc.sy != sx || pc.zy != zx));
                Int8MaxTaps taps;   // whole planes on its kernels where it has the stride's
                const int64_t stride_w = pc.strides.empty() ? 1 : pc.strides.back();
                const bool planes = pc.planes && taps.init(default_isa()) == Status::Ok && taps.jit(1) && taps.jit(stride_w);
                CHECK((fast.kernels.find(":MaxPool:planes ") != std::string::npos) == planes);
            }
            CHECK(fast.kernels.find("DequantizeLinear") == std::string::npos);
            CHECK(fast.y == reference.y);
        }
    }
}
}  // namespace

TEST_CASE("int8: QDQ MaxPool on uint8, bit for bit the float path's (same grid, another grid, strides, pads, ceil, 1-D, whole planes and rows)") {
    const float sx = 0.05f;
    const uint8_t zx = 100;
    const std::vector<QdqPool> cases = {
        {{1, 3, 11, 37}, {3, 3}, {2, 2}, {}, {}, 0, sx, zx},                 // squeezenet's: the same grid, no table
        {{2, 4, 13, 50}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, 1, 0.07f, 80},    // padded, ceil mode, another grid
        {{1, 2, 9, 40}, {2, 3}, {1, 1}, {0, 1, 1, 0}, {}, 0, 0.03f, 128},     // stride 1, asymmetric pads
        {{1, 2, 9, 20}, {3, 2}, {1, 3}, {}, {2, 2}, 0, sx, zx, false, 0, false},               // dilated, stride 3
        {{1, 3, 45}, {4}, {2}, {1, 2}, {}, 0, 0.1f, 0},                       // 1-D
        {{1, 2, 2, 9}, {2, 2}, {1, 1}, {2, 0, 2, 0}, {3, 1}, 0, 0.07f, 80, false, 0, false},   // output rows real, padding only, real
        {{1, 2, 5, 40}, {2, 3}, {1, 1}, {2, 1, 2, 1}, {3, 1}, 0, 0.07f, 80, false, 0, false},  // as above, wider
        {{1, 5, 7, 7}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {}, 0, 0.07f, 80},       // inception's 7x7: rows shorter than a vector
        {{2, 6, 14, 14}, {3, 3}, {2, 2}, {}, {}, 1, sx, zx},                  // ceil mode's last window past the input
        {{1, 2, 130, 131}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {}, 0, 0.07f, 80},                    // past 16 KiB: the row path but on JIT planes
        {{1, 2, 131, 130}, {3, 3}, {2, 2}, {}, {}, 1, sx, zx},                                 // the same at stride 2
        {{1, 2, 20, 30}, {5, 4}, {3, 2}, {2, 1, 0, 3}, {}, 1, 0.07f, 80},                      // stride 3 down, 2 along: JIT planes
        {{1, 3, 111, 111}, {3, 3}, {2, 2}, {}, {}, 0, sx, zx},                                 // squeezenet's first: read where it lies
        {{1, 2, 56, 56}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {}, 0, 0.07f, 80},                      // inception's 56 x 56 at stride 1
        {{1, 2, 20, 100}, {3, 3}, {1, 2}, {1, 1, 1, 1}, {}, 1, 0.07f, 80},                     // column rows past one 64-byte step
        {{1, 2, 12, 150}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {}, 0, 0.07f, 80},                     // three steps of outputs a row, stride 1
        {{1, 2, 9, 300}, {3, 3}, {2, 2}, {0, 1, 0, 1}, {}, 1, sx, zx},                         // and at stride 2
        {{1, 1, 1100, 4000}, {3, 3}, {2, 2}, {}, {}, 0, sx, zx, false, 0, false},              // column maxima past 2 MiB: rows
    };
    check_qdq_pools(cases, sx, zx, 900);
    // the same windows as a plain MaxPool on uint8 (no QDQ around it: moved signed activations
    // leave such pools), against the float32 wrapper's path (FUSION=NO), bit for bit
    uint32_t seed = 950;
    for (const QdqPool& pc : cases) {
        CAPTURE(seed);
        std::mt19937 rng(seed++);
        std::vector<uint8_t> x((size_t)count_of(pc.x));
        for (uint8_t& v : x) v = (uint8_t)(rng() % 256);
        auto run = [&](bool fusion, uint32_t threads) {
            OpTest t;
            t.opset = 13;
            t.op("MaxPool", {t.input(pc.x, x)});
            t.set_ints("kernel_shape", pc.kernel);
            if (!pc.strides.empty()) t.set_ints("strides", pc.strides);
            if (!pc.pads.empty()) t.set_ints("pads", pc.pads);
            if (!pc.dilations.empty()) t.set_ints("dilations", pc.dilations);
            if (pc.ceil) t.set_int("ceil_mode", 1);
            return run_quantized(t, fusion, threads);
        };
        const Quantized reference = run(false, 1);
        CHECK(reference.kernels.find("int8:") == std::string::npos);
        for (uint32_t threads : {1u, 2u}) {
            const Quantized fast = run(true, threads);
            INFO(fast.kernels);
            CHECK(test::has_int8_step(fast.kernels, "MaxPool", false));
            CHECK(fast.y == reference.y);
        }
    }
}

TEST_CASE("int8: QDQ AveragePool: a run of planes dequantized, pooled by the float kernel, quantized: the float path's bits") {
    const float sx = 0.05f;
    const uint8_t zx = 100;
    const std::vector<QdqPool> cases = {
        {{1, 24, 56, 56}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, 0, 0.04f, 90, true},      // ShuffleNet's shortcut, over 2 threads
        {{1, 9, 14, 14}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, 0, sx, zx, true},           // 7x7 maps, the same grid
        {{2, 3, 13, 50}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, 1, 0.07f, 80, true, 1},     // ceil mode, pads counted
        {{1, 2, 9, 40}, {2, 3}, {1, 1}, {0, 1, 1, 0}, {}, 0, 0.03f, 128, true},        // stride 1, asymmetric pads
        {{1, 2, 9, 20}, {3, 2}, {1, 3}, {}, {}, 0, sx, zx, true, 0, false},            // stride 3: no JIT rows or planes
        {{1, 3, 45}, {4}, {2}, {1, 2}, {}, 0, 0.1f, 0, true},                          // 1-D (planes of one row)
        {{1, 300, 7, 7}, {7, 7}, {1, 1}, {}, {}, 0, 0.01f, 0, true},                   // a whole 7x7 plane
    };
    check_qdq_pools(cases, sx, zx, 950);
    // dilated: the float path's own steps
    QdqPool dilated{{1, 2, 9, 20}, {3, 2}, {1, 1}, {}, {2, 2}, 0, sx, zx, true};
    std::vector<uint8_t> x((size_t)count_of(dilated.x), 7);
    Quantized fast = run_qdq_pool(dilated, x, sx, zx, true, 1);
    INFO(fast.kernels);
    CHECK(fast.kernels.find(":DequantizeLinear ") != std::string::npos);
    CHECK(fast.kernels.find(":QuantizeLinear ") != std::string::npos);
}

// ---- DequantizeLinears -> Concat -> QuantizeLinear on uint8 ----
TEST_CASE("int8: QDQ Concat on uint8 with a table per input, bit for bit the float path's") {
    struct Input { Shape shape; float scale; uint8_t zero_point; };
    struct Case { std::vector<Input> inputs; int64_t axis; float sy; uint8_t zy; };
    const std::vector<Case> cases = {
        {{{{1, 3, 5, 7}, 0.05f, 100}, {{1, 4, 5, 7}, 0.05f, 100}}, 1, 0.05f, 100},                 // the same grids: copies
        {{{{2, 3, 4, 9}, 0.05f, 100}, {{2, 1, 4, 9}, 0.02f, 7}, {{2, 2, 4, 9}, 0.11f, 255}}, 1, 0.06f, 90},  // tables
        {{{{2, 3, 17}, 0.04f, 0}, {{2, 3, 5}, 0.04f, 0}}, -1, 0.03f, 10},                         // the last axis
        {{{{2, 16, 30, 31}, 0.05f, 100}, {{2, 9, 30, 31}, 0.02f, 7}}, 1, 0.03f, 10},              // split over 2 threads
    };
    uint32_t seed = 1200;
    for (const Case& cc : cases) {
        CAPTURE(seed);
        std::mt19937 rng(seed++);
        std::vector<std::vector<uint8_t>> data;
        for (const Input& in : cc.inputs) {
            int64_t n = 1;
            for (int64_t d : in.shape) n *= d;
            data.emplace_back((size_t)n);
            for (uint8_t& v : data.back()) v = (uint8_t)(rng() % 256);
        }
        auto run = [&](bool fusion, uint32_t threads) {
            OpTest t;
            t.opset = 13;
            std::vector<InputRef> parts;
            for (size_t k = 0; k < cc.inputs.size(); ++k) {
                const Input& in = cc.inputs[k];
                InputRef xin = t.input(in.shape, data[k]);
                parts.push_back(InputRef::by_id(t.op("DequantizeLinear", {xin, t.constant(Shape{}, std::vector<float>{in.scale}),
                                                                          t.constant(Shape{}, std::vector<uint8_t>{in.zero_point})})));
            }
            NodeId concat = t.op("Concat", parts);
            t.set_int("axis", cc.axis);
            t.op("QuantizeLinear", {InputRef::by_id(concat), t.constant(Shape{}, std::vector<float>{cc.sy}),
                                    t.constant(Shape{}, std::vector<uint8_t>{cc.zy})});
            return run_quantized(t, fusion, threads);
        };
        Quantized reference = run(false, 1);
        CHECK(reference.kernels.find("int8:") == std::string::npos);
        for (uint32_t threads : {1u, 2u}) {
            Quantized fast = run(true, threads);
            INFO(fast.kernels);
            bool tables = false;
            for (const Input& in : cc.inputs) tables = tables || in.scale != cc.sy || in.zero_point != cc.zy;
            CHECK(test::has_int8_step(fast.kernels, "Concat", tables));
            CHECK(fast.kernels.find("DequantizeLinear") == std::string::npos);
            CHECK(fast.y == reference.y);
        }
    }
}
