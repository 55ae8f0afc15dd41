// Gemm::run's row bias (C = alpha A B + row_bias[i], added by the tiles as they store): bit for
// bit what the same Gemm gives with C filled with the bias and beta 1 (the way a Conv added
// its bias before), at alpha 1; within the GEMM bound of a double reference at other alphas.
// Its clamp: bit for bit the same run unclamped, then Min(hi, Max(lo, v)) per element.
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
    std::vector<float> packed_a, packed_b;
    GemmOperand oa, ob;
    oa.data = a.data(); oa.row = g.k; oa.col = 1;
    ob.data = b.data(); ob.row = g.n; ob.col = 1;
    if (g.pack_a) {
        packed_a.assign(gemm.packed_a_floats(g.m, g.k), NAN);
        gemm.pack_a(g.m, g.k, a.data(), g.k, 1, packed_a.data());
        oa.data = packed_a.data();
        oa.packed = true;
    }
    if (g.pack_b) {
        packed_b.assign(gemm.packed_b_floats(g.k, g.n), NAN);
        gemm.pack_b(g.k, g.n, b.data(), g.n, 1, packed_b.data());
        ob.data = packed_b.data();
        ob.packed = true;
    }
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

}  // namespace

TEST_CASE("gemm bias: every remainder of M and N, K of 1, 7 and none") {
    Gemm gemm = target_gemm();
    const int64_t mr = gemm.blocking().mr, nr = gemm.blocking().nr;
    uint32_t seed = 11;
    for (int64_t m = 1; m <= 2 * mr + 1; ++m)
        for (int64_t n : {(int64_t)1, (int64_t)3, nr / 2 + 1, nr - 1, nr, nr + 1, 2 * nr + 5})
            for (int64_t k : {(int64_t)0, (int64_t)1, (int64_t)7})
                check_bias(gemm, BiasCase{m, n, k}, seed++);
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

struct ClampCase {
    int64_t m, n, k;
    float alpha = 1.0f, beta = 0.0f;
    bool bias = false, pack_a = false, pack_b = false, b_by_rows = false;
    uint32_t parts = 1;
    float lo = 0.0f, hi = INFINITY;
};

// Gemm::run with the clamp against the same run without it, clamped afterwards by the
// snippets' rule (Max(lo, v) = lo > v ? lo : v, then Min(hi, v) = hi < v ? hi : v), bit for
// bit; columns past n untouched. A's row 1 is zeros (with alpha < 0 and no bias: -0 outputs)
// and row 2 holds a NaN (NaN outputs).
void check_clamp(const Gemm& gemm, const ClampCase& g, uint32_t seed) {
    CAPTURE(g.m); CAPTURE(g.n); CAPTURE(g.k); CAPTURE(g.alpha); CAPTURE(g.beta); CAPTURE(g.bias); CAPTURE(g.pack_a);
    CAPTURE(g.pack_b); CAPTURE(g.b_by_rows); CAPTURE(g.parts); CAPTURE(g.lo); CAPTURE(g.hi);
    const int64_t ldc = g.n + 3;
    std::vector<float> a = random_floats(g.m * g.k, seed), b = random_floats(g.k * g.n, seed + 1);
    std::vector<float> bias = random_floats(g.m, seed + 2), start = random_floats(g.m * ldc, seed + 3);
    for (int64_t p = 0; p < g.k; ++p) {
        if (g.m > 1) a[(size_t)(g.k + p)] = 0.0f;
        if (g.m > 2 && p == g.k / 2) a[(size_t)(2 * g.k + p)] = NAN;
    }
    std::vector<float> packed_a, packed_b, b_rows_buffer;
    std::vector<int64_t> b_rows;
    GemmOperand oa, ob;
    oa.data = a.data(); oa.row = g.k;
    ob.data = b.data(); ob.row = g.n;
    if (g.pack_a) {
        packed_a.assign(gemm.packed_a_floats(g.m, g.k), NAN);
        gemm.pack_a(g.m, g.k, a.data(), g.k, 1, packed_a.data());
        oa.data = packed_a.data();
        oa.packed = true;
    }
    if (g.pack_b) {
        packed_b.assign(gemm.packed_b_floats(g.k, g.n), NAN);
        gemm.pack_b(g.k, g.n, b.data(), g.n, 1, packed_b.data());
        ob.data = packed_b.data();
        ob.packed = true;
    } else if (g.b_by_rows) {   // row p at slot k - 1 - p of n + 5 floats, one float in
        b_rows_buffer.assign((size_t)(g.k * (g.n + 5)), NAN);
        for (int64_t p = 0; p < g.k; ++p) {
            b_rows.push_back((g.k - 1 - p) * (g.n + 5) + 1);
            for (int64_t j = 0; j < g.n; ++j) b_rows_buffer[(size_t)(b_rows.back() + j)] = b[(size_t)(p * g.n + j)];
        }
        ob.data = b_rows_buffer.data();
        ob.rows = b_rows.data();
    }
    const float bounds[2] = {g.lo, g.hi};
    auto run = [&](const float* clamp) {
        std::vector<float> c = start;
        const size_t slice = gemm.scratch_floats(g.m, g.n, g.k, g.pack_a, g.pack_b);
        std::vector<float> scratch(slice * g.parts + 1, NAN);
        for (uint32_t part = 0; part < g.parts; ++part)
            gemm.run(g.m, g.n, g.k, g.alpha, oa, ob, g.beta, c.data(), ldc, scratch.data() + part * slice, part, g.parts,
                     g.bias ? bias.data() : nullptr, clamp);
        return c;
    };
    std::vector<float> got = run(bounds), want = run(nullptr);
    int64_t bad = 0, clamped = 0;
    for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
            float v = want[(size_t)(i * ldc + j)];
            if (j < g.n) {
                const float u = g.lo > v ? g.lo : v;
                clamped += u != v;
                v = g.hi < u ? g.hi : u;
                clamped += v != u;
            }
            if (std::memcmp(&got[(size_t)(i * ldc + j)], &v, 4) != 0 && bad++ < 5)
                MESSAGE("C[" << i << "][" << j << "] = " << got[(size_t)(i * ldc + j)] << ", want " << v);
        }
    CHECK(bad == 0);
    if (g.k > 0 && g.m * g.n >= 16) CHECK(clamped > 0);   // the bounds cut something
}

}  // namespace

TEST_CASE("gemm clamp: every remainder of M and N, K of 0, 1 and 7, bias, beta, -0 and NaN") {
    Gemm gemm = target_gemm();
    const int64_t mr = gemm.blocking().mr, nr = gemm.blocking().nr;
    uint32_t seed = 700;
    for (int64_t m = 1; m <= 2 * mr + 1; ++m)
        for (int64_t n : {(int64_t)1, (int64_t)3, nr / 2 + 1, nr - 1, nr, nr + 1, 2 * nr + 5})
            for (int64_t k : {(int64_t)0, (int64_t)1, (int64_t)7}) {
                ClampCase g{m, n, k};
                g.bias = seed % 3 == 0;
                g.beta = seed % 3 == 1 ? 0.5f : 0.0f;
                g.alpha = seed % 2 ? -1.0f : 1.0f;
                check_clamp(gemm, g, seed++);
            }
}

TEST_CASE("gemm clamp: only the last K block clamps; Relu, Relu6, [-0.5, 0.5] and -0 bounds; packed, by rows, parts") {
    Gemm gemm = target_gemm();
    const int64_t mr = gemm.blocking().mr, kc = gemm.blocking().kc;
    uint32_t seed = 1700;
    const float bounds[][2] = {{0.0f, INFINITY}, {0.0f, 6.0f}, {-0.5f, 0.5f}, {-0.0f, 0.25f}};
    for (const auto& bd : bounds)
        for (int layout = 0; layout < 4; ++layout)   // strided, packed A and B, B by rows, packed A and B by rows
            for (uint32_t parts : {1u, 3u}) {
                ClampCase g{3 * mr + 2, 45, 2 * kc + 5};
                g.lo = bd[0];
                g.hi = bd[1];
                g.pack_a = layout == 1 || layout == 3;
                g.pack_b = layout == 1;
                g.b_by_rows = layout >= 2;
                g.parts = parts;
                g.bias = seed % 2 == 0;
                g.alpha = seed % 4 < 2 ? 1.0f : -0.75f;
                check_clamp(gemm, g, seed);
                seed += 4;
            }
    // M beyond one mc block, N beyond one nc block.
    ClampCase wide{gemm.blocking().mc + mr + 1, gemm.blocking().nc + 7, 9};
    wide.bias = true;
    check_clamp(gemm, wide, seed);
}
