// Gemm::run's row bias (C = alpha A B + row_bias[i], added by the tiles as they store): bit for
// bit what the same Gemm gives with C filled with the bias and beta 1 (the way a Conv added
// its bias before), at alpha 1; within the GEMM bound of a double reference at other alphas.
// Its store operations (a residual added, a clamp): bit for bit the same run without them,
// then v + R or R + v and Min(hi, Max(lo, v)) per element.
// Every remainder of M and N, K over several cache blocks, packed or strided operands, parts.
// The target comes from TESSEL_ISA (the Makefile runs the suite once per ISA).
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <vector>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {

using test::random_floats;

// A (m x k) and B (k x n) as Gemm::run's operands: strided, packed, or B by row offsets (row p
// at slot k - 1 - p of n + 5 floats, one float in: gaps and an odd start).
struct Operands {
    std::vector<float> packed_a, packed_b, b_rows_buffer;
    std::vector<int64_t> b_rows;
    GemmOperand a, b;
};

void make_operands(const Gemm& gemm, int64_t m, int64_t n, int64_t k, const std::vector<float>& a, const std::vector<float>& b,
                   bool pack_a, bool pack_b, bool b_by_rows, Operands* o) {
    o->a.data = a.data(); o->a.row = k; o->a.col = 1;
    o->b.data = b.data(); o->b.row = n; o->b.col = 1;
    if (pack_a) {
        o->packed_a.assign(gemm.packed_a_floats(m, k), NAN);
        gemm.pack_a(m, k, a.data(), k, 1, o->packed_a.data());
        o->a.data = o->packed_a.data();
        o->a.packed = true;
    }
    if (pack_b) {
        o->packed_b.assign(gemm.packed_b_floats(k, n), NAN);
        gemm.pack_b(k, n, b.data(), n, 1, o->packed_b.data());
        o->b.data = o->packed_b.data();
        o->b.packed = true;
    } else if (b_by_rows) {
        o->b_rows_buffer.assign((size_t)(k * (n + 5)), NAN);
        for (int64_t p = 0; p < k; ++p) {
            o->b_rows.push_back((k - 1 - p) * (n + 5) + 1);
            for (int64_t j = 0; j < n; ++j) o->b_rows_buffer[(size_t)(o->b_rows.back() + j)] = b[(size_t)(p * n + j)];
        }
        o->b.data = o->b_rows_buffer.data();
        o->b.rows = o->b_rows.data();
    }
}

struct BiasCase {
    int64_t m, n, k;
    float alpha = 1.0f;
    bool pack_a = false, pack_b = false;
    uint32_t parts = 1;
};

// C (m x (n + 3)) from Gemm::run in `parts` parts, starting from `c`; row_bias may be null.
std::vector<float> run_parts(const Gemm& gemm, const BiasCase& g, const GemmOperand& a, const GemmOperand& b, float beta,
                             std::vector<float> c, const float* row_bias) {
    const size_t slice = gemm.scratch_floats(g.m, g.n, g.k, g.pack_a, g.pack_b);
    std::vector<float> scratch(slice * g.parts + 1, NAN);
    for (uint32_t part = 0; part < g.parts; ++part)
        gemm.run(g.m, g.n, g.k, g.alpha, a, b, beta, c.data(), g.n + 3, scratch.data() + part * slice, part, g.parts, row_bias);
    return c;
}

void check_bias(const Gemm& gemm, const BiasCase& g, uint32_t seed) {
    CAPTURE(g.m); CAPTURE(g.n); CAPTURE(g.k); CAPTURE(g.alpha); CAPTURE(g.pack_a); CAPTURE(g.pack_b); CAPTURE(g.parts);
    const int64_t ldc = g.n + 3;
    std::vector<float> a = random_floats(g.m * g.k, seed), b = random_floats(g.k * g.n, seed + 1);
    std::vector<float> bias = random_floats(g.m, seed + 2);
    Operands o;
    make_operands(gemm, g.m, g.n, g.k, a, b, g.pack_a, g.pack_b, false, &o);
    const GemmOperand &oa = o.a, &ob = o.b;
    // C holds NaN (never read with a row bias) and sentinels past column n (never written).
    std::vector<float> start = random_floats(g.m * ldc, seed + 3);
    for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = 0; j < g.n; ++j) start[(size_t)(i * ldc + j)] = NAN;
    std::vector<float> got = run_parts(gemm, g, oa, ob, 2.0f, start, bias.data());
    int64_t touched = 0, bad = 0;
    for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = g.n; j < ldc; ++j)
            touched += std::memcmp(&got[(size_t)(i * ldc + j)], &start[(size_t)(i * ldc + j)], 4) != 0;
    CHECK(touched == 0);
    if (g.alpha == 1.0f) {   // the old way: C filled with the bias, then beta 1
        std::vector<float> filled = start;
        for (int64_t i = 0; i < g.m; ++i)
            for (int64_t j = 0; j < g.n; ++j) filled[(size_t)(i * ldc + j)] = bias[(size_t)i];
        std::vector<float> want = run_parts(gemm, g, oa, ob, 1.0f, filled, nullptr);
        for (int64_t i = 0; i < g.m; ++i)
            for (int64_t j = 0; j < g.n; ++j)
                if (std::memcmp(&got[(size_t)(i * ldc + j)], &want[(size_t)(i * ldc + j)], 4) != 0 && bad++ < 5)
                    MESSAGE("C[" << i << "][" << j << "] = " << got[(size_t)(i * ldc + j)] << ", want " << want[(size_t)(i * ldc + j)]);
    } else {                 // |got - want| <= 1e-5 (|alpha| sum |a||b| + |bias|)
        for (int64_t i = 0; i < g.m; ++i)
            for (int64_t j = 0; j < g.n; ++j) {
                double s = 0, mag = 0;
                for (int64_t p = 0; p < g.k; ++p) {
                    double x = (double)a[(size_t)(i * g.k + p)] * (double)b[(size_t)(p * g.n + j)];
                    s += x;
                    mag += std::fabs(x);
                }
                double want = g.alpha * s + bias[(size_t)i], bound = 1e-5 * (std::fabs(g.alpha) * mag + std::fabs(bias[(size_t)i])) + 1e-30;
                double v = got[(size_t)(i * ldc + j)];
                if (!(std::fabs(v - want) <= bound) && bad++ < 5) MESSAGE("C[" << i << "][" << j << "] = " << v << ", want " << want);
            }
    }
    CHECK(bad == 0);
}

Gemm target_gemm() {
    Gemm gemm;
    REQUIRE(gemm.init() == Status::Ok);
    return gemm;
}

// fn(m, n, k) for every remainder of M and N (up to 2 mr + 1 rows, around nr's multiples) and
// K of 0, 1 and 7.
template <class Fn>
void for_each_remainder(const Gemm& gemm, Fn fn) {
    const int64_t mr = gemm.blocking().mr, nr = gemm.blocking().nr;
    for (int64_t m = 1; m <= 2 * mr + 1; ++m)
        for (int64_t n : {(int64_t)1, (int64_t)3, nr / 2 + 1, nr - 1, nr, nr + 1, 2 * nr + 5})
            for (int64_t k : {(int64_t)0, (int64_t)1, (int64_t)7}) fn(m, n, k);
}

}  // namespace

TEST_CASE("gemm bias: every remainder of M and N, K of 1, 7 and none") {
    Gemm gemm = target_gemm();
    uint32_t seed = 11;
    for_each_remainder(gemm, [&](int64_t m, int64_t n, int64_t k) { check_bias(gemm, BiasCase{m, n, k}, seed++); });
}

TEST_CASE("gemm bias: K over several cache blocks, packed operands, alpha, parts") {
    Gemm gemm = target_gemm();
    const int64_t mr = gemm.blocking().mr, kc = gemm.blocking().kc;
    uint32_t seed = 500;
    for (bool pa : {false, true})
        for (bool pb : {false, true})
            for (float alpha : {1.0f, -0.75f})
                for (uint32_t parts : {1u, 2u, 3u}) {
                    BiasCase g{2 * mr + 3, 41, 2 * kc + 5, alpha, pa, pb, parts};
                    check_bias(gemm, g, seed);
                    seed += 4;
                }
    // M beyond one mc block, N beyond one nc block (rows of the bias advance with both).
    BiasCase wide{gemm.blocking().mc + mr + 1, gemm.blocking().nc + 7, 9};
    check_bias(gemm, wide, seed);
}

namespace {

struct StoreCase {
    int64_t m, n, k;
    float alpha = 1.0f, beta = 0.0f;
    bool bias = false, pack_a = false, pack_b = false, b_by_rows = false;
    uint32_t parts = 1;
    bool clamp = true;
    float lo = 0.0f, hi = INFINITY;
    int residual = 0;   // 0 none, 1 v + R, 2 R + v
};

// Gemm::run with store operations against the same run without them, then per element the
// residual added in its order and the snippets' clamp (Max(lo, v) = lo > v ? lo : v, then
// Min(hi, v) = hi < v ? hi : v): bit for bit (a NaN for a NaN: C++ may add in either order);
// columns past n untouched. A's row 1 is zeros (alpha < 0, no bias: -0) and row 2 holds a
// NaN; R holds -0, NaN and infinities.
void check_store(const Gemm& gemm, const StoreCase& g, uint32_t seed) {
    CAPTURE(g.m); CAPTURE(g.n); CAPTURE(g.k); CAPTURE(g.alpha); CAPTURE(g.beta); CAPTURE(g.bias); CAPTURE(g.pack_a);
    CAPTURE(g.pack_b); CAPTURE(g.b_by_rows); CAPTURE(g.parts); CAPTURE(g.clamp); CAPTURE(g.lo); CAPTURE(g.hi); CAPTURE(g.residual);
    const int64_t ldc = g.n + 3;
    std::vector<float> a = random_floats(g.m * g.k, seed), b = random_floats(g.k * g.n, seed + 1);
    std::vector<float> bias = random_floats(g.m, seed + 2), start = random_floats(g.m * ldc, seed + 3);
    std::vector<float> residual = random_floats(g.m * ldc, seed + 4);
    for (int64_t p = 0; p < g.k; ++p) {
        if (g.m > 1) a[(size_t)(g.k + p)] = 0.0f;
        if (g.m > 2 && p == g.k / 2) a[(size_t)(2 * g.k + p)] = NAN;
    }
    const float specials[] = {-0.0f, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < residual.size(); i += 7) residual[i] = specials[i / 7 % 4];
    Operands o;
    make_operands(gemm, g.m, g.n, g.k, a, b, g.pack_a, g.pack_b, g.b_by_rows, &o);
    GemmStoreOps ops;
    ops.clamp = g.clamp;
    ops.lo = g.lo;
    ops.hi = g.hi;
    ops.residual = g.residual ? residual.data() : nullptr;
    ops.residual_first = g.residual == 2;
    auto run = [&](const GemmStoreOps* store) {
        std::vector<float> c = start;
        const size_t slice = gemm.scratch_floats(g.m, g.n, g.k, g.pack_a, g.pack_b);
        std::vector<float> scratch(slice * g.parts + 1, NAN);
        for (uint32_t part = 0; part < g.parts; ++part)
            gemm.run(g.m, g.n, g.k, g.alpha, o.a, o.b, g.beta, c.data(), ldc, scratch.data() + part * slice, part, g.parts,
                     g.bias ? bias.data() : nullptr, store);
        return c;
    };
    std::vector<float> got = run(&ops), want = run(nullptr);
    int64_t bad = 0, clamped = 0;
    for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
            float v = want[(size_t)(i * ldc + j)];
            if (j < g.n) {
                const float r = residual[(size_t)(i * ldc + j)];
                if (g.residual) v = g.residual == 2 ? r + v : v + r;
                if (g.clamp) {
                    const float u = g.lo > v ? g.lo : v;
                    clamped += u != v;
                    v = g.hi < u ? g.hi : u;
                    clamped += v != u;
                }
            }
            const float x = got[(size_t)(i * ldc + j)];
            if (std::memcmp(&x, &v, 4) != 0 && !(std::isnan(x) && std::isnan(v)) && bad++ < 5)
                MESSAGE("C[" << i << "][" << j << "] = " << x << ", want " << v);
        }
    CHECK(bad == 0);
    if (g.clamp && g.k > 0 && g.m * g.n >= 16) CHECK(clamped > 0);   // the bounds cut something
}

}  // namespace

TEST_CASE("gemm store: every remainder of M and N, K of 0, 1 and 7, bias, beta, residual, clamp, -0 and NaN") {
    Gemm gemm = target_gemm();
    uint32_t seed = 700;
    for_each_remainder(gemm, [&](int64_t m, int64_t n, int64_t k) {
        StoreCase g{m, n, k};
        g.bias = seed % 3 == 0;
        g.beta = seed % 3 == 1 ? 0.5f : 0.0f;
        g.alpha = seed % 2 ? -1.0f : 1.0f;
        g.residual = (int)(seed % 3);
        g.clamp = g.residual == 0 || seed % 5 != 0;
        check_store(gemm, g, seed++);
    });
}

TEST_CASE("gemm store: only the last K block's tiles; Relu, Relu6, [-0.5, 0.5], -0 bounds, residuals; packed, by rows, parts") {
    Gemm gemm = target_gemm();
    const int64_t mr = gemm.blocking().mr, kc = gemm.blocking().kc;
    uint32_t seed = 1700;
    const float bounds[][2] = {{0.0f, INFINITY}, {0.0f, 6.0f}, {-0.5f, 0.5f}, {-0.0f, 0.25f}};
    for (const auto& bd : bounds)
        for (int residual = 0; residual < 3; ++residual)
            for (int layout = 0; layout < 4; ++layout)   // strided, packed A and B, B by rows, packed A and B by rows
                for (uint32_t parts : {1u, 3u}) {
                    StoreCase g{3 * mr + 2, 45, 2 * kc + 5};
                    g.lo = bd[0];
                    g.hi = bd[1];
                    g.residual = residual;
                    g.pack_a = layout == 1 || layout == 3;
                    g.pack_b = layout == 1;
                    g.b_by_rows = layout >= 2;
                    g.parts = parts;
                    g.bias = seed % 2 == 0;
                    g.alpha = seed % 4 < 2 ? 1.0f : -0.75f;
                    check_store(gemm, g, seed);
                    seed += 5;
                }
    // The residual alone; M beyond one mc block, N beyond one nc block.
    StoreCase alone{2 * mr + 1, 37, kc + 3};
    alone.clamp = false;
    alone.residual = 1;
    check_store(gemm, alone, seed);
    StoreCase wide{gemm.blocking().mc + mr + 1, gemm.blocking().nc + 7, 9};
    wide.bias = true;
    wide.residual = 2;
    check_store(gemm, wide, seed + 5);
}
