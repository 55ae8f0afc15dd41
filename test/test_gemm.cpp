// snippets.h's GEMM (Gemm: packing, cache blocking, JIT tiles) and the runtime ops on it
// (MatMul, Gemm, Conv on the CPU device), against a naive double-precision reference. The
// target comes from TESSEL_ISA (the Makefile runs the suite once per ISA).
// Error bound: the sums run in another order (and with FMA), so each element is bounded by
// its own magnitude: |got - want| <= 1e-5 * sum_p |a_ip| |b_pj| (+ beta |c_ij|) + 1e-30.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-scale, scale);
    std::vector<float> v((size_t)n);
    for (float& f : v) f = uniform(rng);
    return v;
}

// want = alpha A B + beta C0 in double, with bound = 1e-5 (|alpha| sum |a||b| + |beta c0|) + tiny.
struct Reference {
    std::vector<double> want, bound;
};

Reference reference_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col,
                         const float* b, int64_t b_row, int64_t b_col, float beta, const float* c0, int64_t ldc) {
    Reference r;
    r.want.assign((size_t)(m * n), 0.0);
    r.bound.assign((size_t)(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double s = 0, mag = 0;
            for (int64_t p = 0; p < k; ++p) {
                double x = (double)a[i * a_row + p * a_col] * (double)b[p * b_row + j * b_col];
                s += x;
                mag += std::fabs(x);
            }
            double cv = beta != 0.0f ? (double)beta * c0[i * ldc + j] : 0.0;
            r.want[(size_t)(i * n + j)] = alpha * s + cv;
            r.bound[(size_t)(i * n + j)] = 1e-5 * (std::fabs(alpha) * mag + std::fabs(cv)) + 1e-30;
        }
    return r;
}

// Counts the elements of C (m x n, leading dim ldc) outside the bound; at most 5 are printed.
int64_t check_close(const Reference& r, int64_t m, int64_t n, const float* c, int64_t ldc) {
    int64_t bad = 0;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double got = c[i * ldc + j], want = r.want[(size_t)(i * n + j)];
            if (!(std::fabs(got - want) <= r.bound[(size_t)(i * n + j)])) {
                if (bad++ < 5) MESSAGE("C[" << i << "][" << j << "] = " << got << ", want " << want);
            }
        }
    return bad;
}

struct GemmCase {
    int64_t m, n, k;
    float alpha = 1.0f, beta = 0.0f;
    bool trans_a = false, trans_b = false, pack_a = false, pack_b = false;
    uint32_t parts = 1;
};

// One Gemm::run (in `parts` parts) against the reference; C has 3 extra columns that must
// stay untouched.
void check_gemm(const Gemm& gemm, const GemmCase& g, uint32_t seed) {
    CAPTURE(g.m); CAPTURE(g.n); CAPTURE(g.k); CAPTURE(g.alpha); CAPTURE(g.beta); CAPTURE(g.trans_a); CAPTURE(g.trans_b);
    CAPTURE(g.pack_a); CAPTURE(g.pack_b); CAPTURE(g.parts);
    std::vector<float> a = random_floats(g.m * g.k, seed), b = random_floats(g.k * g.n, seed + 1);
    const int64_t ldc = g.n + 3;
    std::vector<float> c = random_floats(g.m * ldc, seed + 2);
    const std::vector<float> c0 = c;
    int64_t a_row = g.trans_a ? 1 : g.k, a_col = g.trans_a ? g.m : 1;
    int64_t b_row = g.trans_b ? 1 : g.n, b_col = g.trans_b ? g.k : 1;
    Reference r = reference_gemm(g.m, g.n, g.k, g.alpha, a.data(), a_row, a_col, b.data(), b_row, b_col, g.beta, c0.data(), ldc);
    std::vector<float> packed_a, packed_b;
    GemmOperand oa, ob;
    oa.data = a.data(); oa.row = a_row; oa.col = a_col;
    ob.data = b.data(); ob.row = b_row; ob.col = b_col;
    if (g.pack_a) {
        packed_a.assign(gemm.packed_a_floats(g.m, g.k), NAN);
        gemm.pack_a(g.m, g.k, a.data(), a_row, a_col, packed_a.data());
        oa.data = packed_a.data();
        oa.packed = true;
    }
    if (g.pack_b) {
        packed_b.assign(gemm.packed_b_floats(g.k, g.n), NAN);
        gemm.pack_b(g.k, g.n, b.data(), b_row, b_col, packed_b.data());
        ob.data = packed_b.data();
        ob.packed = true;
    }
    const size_t slice = gemm.scratch_floats(g.m, g.n, g.k, g.pack_a, g.pack_b);
    std::vector<float> scratch(slice * g.parts + 1, NAN);
    for (uint32_t part = 0; part < g.parts; ++part)
        gemm.run(g.m, g.n, g.k, g.alpha, oa, ob, g.beta, c.data(), ldc, scratch.data() + part * slice, part, g.parts);
    CHECK(check_close(r, g.m, g.n, c.data(), ldc) == 0);
    int64_t touched = 0;
    for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = g.n; j < ldc; ++j) touched += std::memcmp(&c[(size_t)(i * ldc + j)], &c0[(size_t)(i * ldc + j)], 4) != 0;
    CHECK(touched == 0);
}

Gemm target_gemm() {
    Gemm gemm;
    REQUIRE(gemm.init() == Status::Ok);
    return gemm;
}

}  // namespace

TEST_CASE("gemm: the target's tiles and blocking") {
    Gemm gemm = target_gemm();
    Isa isa = default_isa();
    CHECK(gemm.isa() == isa);
    CHECK(gemm.jit() == (isa == Isa::Avx2 || isa == Isa::Avx512));
    const GemmBlocking& b = gemm.blocking();
    INFO(std::string(isa_name(isa)) << ": " << b.mr << " x " << b.nr << " tiles, kc " << b.kc << ", mc " << b.mc << ", nc " << b.nc);
    CHECK(b.mc % b.mr == 0);
    CHECK(b.nc % b.nr == 0);
    CHECK(b.kc >= 64);
    CacheSizes caches = cpu_cache_sizes();
    CHECK(caches.l1d >= 4096);
    CHECK(caches.l2 >= caches.l1d);
}

TEST_CASE("gemm: every remainder of M and N, K of 1 and primes, packed or strided operands") {
    Gemm gemm = target_gemm();
    const int64_t mr = gemm.blocking().mr, nr = gemm.blocking().nr;
    uint32_t seed = 1;
    for (int64_t m = 1; m <= 2 * mr + 1; ++m)
        for (int64_t n : {(int64_t)1, (int64_t)3, nr / 2, nr / 2 + 1, nr - 1, nr, nr + 1, 2 * nr + 5})
            for (int64_t k : {(int64_t)1, (int64_t)7})
                check_gemm(gemm, GemmCase{m, n, k}, seed++);
    for (int64_t k : {(int64_t)2, (int64_t)3, (int64_t)4, (int64_t)5, (int64_t)13, (int64_t)31, (int64_t)97})
        for (bool pa : {false, true})
            for (bool pb : {false, true}) {
                GemmCase g{17, 37, k};
                g.pack_a = pa;
                g.pack_b = pb;
                check_gemm(gemm, g, seed++);
            }
}

TEST_CASE("gemm: K beyond one cache block, M and N beyond one block, alpha and beta") {
    Gemm gemm = target_gemm();
    const GemmBlocking& bl = gemm.blocking();
    uint32_t seed = 100;
    GemmCase big{bl.mc + 5, 67, 2 * bl.kc + 13};
    check_gemm(gemm, big, seed++);
    big.pack_a = true;
    check_gemm(gemm, big, seed++);
    GemmCase wide{9, bl.nc + bl.nr + 3, bl.kc + 1};
    wide.pack_b = true;
    check_gemm(gemm, wide, seed++);
    for (float alpha : {1.0f, -0.5f, 2.0f})
        for (float beta : {0.0f, 1.0f, 0.25f}) {
            GemmCase g{23, 45, 300, alpha, beta};
            check_gemm(gemm, g, seed++);
            g.pack_b = true;
            g.pack_a = true;
            check_gemm(gemm, g, seed++);
        }
    GemmCase zero_k{5, 9, 0, 1.0f, 0.5f};
    check_gemm(gemm, zero_k, seed++);
    zero_k.beta = 0.0f;
    check_gemm(gemm, zero_k, seed++);
}

TEST_CASE("gemm: transposed operands and parts") {
    Gemm gemm = target_gemm();
    uint32_t seed = 200;
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (bool pa : {false, true})
                for (bool pb : {false, true})
                    for (uint32_t parts : {1u, 2u, 3u, 7u}) {
                        GemmCase g{29, 53, 41, 1.5f, 0.5f, ta, tb, pa, pb, parts};
                        check_gemm(gemm, g, seed++);
                    }
    GemmCase tall{200, 5, 16};
    tall.parts = 4;
    check_gemm(gemm, tall, seed++);
    tall.pack_b = true;
    check_gemm(gemm, tall, seed++);
}

TEST_CASE("gemm: beta 0 never reads C (NaN there is overwritten)") {
    Gemm gemm = target_gemm();
    const int64_t m = 7, n = 19, k = 5;
    std::vector<float> a = random_floats(m * k, 5), b = random_floats(k * n, 6), c((size_t)(m * n), NAN);
    GemmOperand oa, ob;
    oa.data = a.data(); oa.row = k; oa.col = 1;
    ob.data = b.data(); ob.row = n; ob.col = 1;
    std::vector<float> scratch(gemm.scratch_floats(m, n, k, false, false));
    gemm.run(m, n, k, 1.0f, oa, ob, 0.0f, c.data(), n, scratch.data());
    int64_t nans = 0;
    for (float v : c) nans += std::isnan(v) ? 1 : 0;
    CHECK(nans == 0);
}
