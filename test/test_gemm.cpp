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
#include <unistd.h>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {

using test::random_floats;

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
    bool b_by_rows = false;   // B through GemmOperand::rows: its rows shuffled in a NaN-filled buffer
};

// One Gemm::run (in `parts` parts) against the reference; C has 3 extra columns that must
// stay untouched.
void check_gemm(const Gemm& gemm, const GemmCase& g, uint32_t seed) {
    CAPTURE(g.m); CAPTURE(g.n); CAPTURE(g.k); CAPTURE(g.alpha); CAPTURE(g.beta); CAPTURE(g.trans_a); CAPTURE(g.trans_b);
    CAPTURE(g.pack_a); CAPTURE(g.pack_b); CAPTURE(g.parts); CAPTURE(g.b_by_rows);
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
    std::vector<float> b_rows_buffer;
    // B's row offsets end at a PROT_NONE page: the tiles, which fetch rows ahead, read none past k
    test::GuardedBuffer b_rows_guarded(g.b_by_rows ? (size_t)(2 * g.k) : 0, true);
    if (g.b_by_rows) {   // row p at slot k - 1 - p of n + 3 floats, one float in: gaps and an odd start
        const int64_t pitch = g.n + 3;
        int64_t* b_rows = reinterpret_cast<int64_t*>(b_rows_guarded.data);
        b_rows_buffer.assign((size_t)(g.k * pitch), NAN);
        for (int64_t p = 0; p < g.k; ++p) {
            b_rows[p] = (g.k - 1 - p) * pitch + 1;
            for (int64_t j = 0; j < g.n; ++j) b_rows_buffer[(size_t)(b_rows[p] + j)] = b[(size_t)(p * b_row + j * b_col)];
        }
        ob.data = b_rows_buffer.data();
        ob.rows = b_rows;
    }
    // Each part's scratch exactly scratch_floats long, ending at a PROT_NONE page, so at the
    // alignment that length leaves: run() starts its panels at a 64-byte boundary within it.
    const size_t slice = gemm.scratch_floats(g.m, g.n, g.k, g.pack_a, g.pack_b);
    for (uint32_t part = 0; part < g.parts; ++part) {
        test::GuardedBuffer scratch(slice, true);
        std::fill(scratch.data, scratch.data + slice, NAN);
        gemm.run(g.m, g.n, g.k, g.alpha, oa, ob, g.beta, c.data(), ldc, scratch.data, part, g.parts);
    }
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
    CHECK(gemm.jit() == (isa == Isa::Avx2 || isa == Isa::Avx512 || isa == Isa::Neon));
    const GemmBlocking& b = gemm.blocking();
    INFO(std::string(isa_name(isa)) << ": " << b.mr << " x " << b.nr << " tiles, kc " << b.kc << ", mc " << b.mc << ", nc " << b.nc);
    CHECK(b.mc % b.mr == 0);
    CHECK(b.nc % b.nr == 0);
    CHECK(b.kc >= 64);
    CacheSizes caches = cpu_cache_sizes();
    CHECK(caches.l1d >= 4096);
    CHECK(caches.l2 >= caches.l1d);
#if (defined(__x86_64__) || defined(__i386__)) && defined(_SC_LEVEL2_CACHE_SIZE)
    // CPUID's sizes are glibc's (which also reads AMD's older leaves where a hypervisor leaves
    // the newer one empty)
    const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l1 > 0) CHECK(caches.l1d == (uint64_t)l1);
    if (l2 > 0) CHECK(caches.l2 == (uint64_t)l2);
#endif
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

TEST_CASE("gemm: pack_a's panels hold A's elements where its layout says, bit for bit") {
    Gemm gemm = target_gemm();
    const int64_t mr = gemm.blocking().mr, kc = gemm.blocking().kc;
    uint32_t seed = 50;
    // Row-major A with a row pitch past k (the vector path's 4 x 4 blocks), transposed A, every
    // remainder of M, K tails of 1-3 and a K past one block.
    for (bool trans : {false, true})
        for (int64_t m = 1; m <= 2 * mr + 1; ++m)
            for (int64_t k : {(int64_t)1, (int64_t)3, (int64_t)4, (int64_t)7, (int64_t)10, kc + 5}) {
                CAPTURE(trans); CAPTURE(m); CAPTURE(k);
                const int64_t pitch = trans ? m + 2 : k + 3, a_row = trans ? 1 : pitch, a_col = trans ? pitch : 1;
                const std::vector<float> a = random_floats((trans ? k : m) * pitch, seed++);
                std::vector<float> packed(gemm.packed_a_floats(m, k), NAN);
                gemm.pack_a(m, k, a.data(), a_row, a_col, packed.data());
                const int64_t mp = (m + mr - 1) / mr * mr;
                int64_t wrong = 0;
                for (int64_t pc = 0; pc < k; pc += kc) {   // block pc, then its panels: per k, mr floats
                    const int64_t depth = k - pc < kc ? k - pc : kc;
                    for (int64_t i = 0; i < mp; ++i)
                        for (int64_t p = 0; p < depth; ++p) {
                            const float want = i < m ? a[(size_t)(i * a_row + (pc + p) * a_col)] : 0.0f;
                            const float got = packed[(size_t)(pc * mp + i / mr * mr * depth + p * mr + i % mr)];
                            wrong += std::memcmp(&want, &got, 4) != 0;
                        }
                }
                CHECK(wrong == 0);
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
    big.pack_b = true;   // both packed: row bands outer, over every K block
    big.beta = 0.5f;
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
    // N of two uneven panels (a 7 x 7 conv's 49 positions): the parts split M instead
    for (bool pb : {false, true})
        for (uint32_t parts : {2u, 3u}) {
            GemmCase small_n{300, 49, 64, 1.0f, 0.0f, false, false, true, pb, parts};
            check_gemm(gemm, small_n, seed++);
        }
}

TEST_CASE("gemm: B by row offsets (in place, or packed as the first row band reads them): every remainder, K blocks, parts") {
    Gemm gemm = target_gemm();
    CHECK(gemm.reads_b_rows() == (gemm.isa() == Isa::Avx2 || gemm.isa() == Isa::Avx512));
    const GemmBlocking& bl = gemm.blocking();
    const int64_t mr = bl.mr, nr = bl.nr;
    uint32_t seed = 400;
    for (int64_t m : {(int64_t)1, mr - 1, mr, mr + 3, 2 * mr + 1, 3 * mr - 2})   // from 2 mr + 1 rows the first band packs
        for (int64_t n : {(int64_t)1, (int64_t)5, nr / 2 + 1, nr - 1, nr, nr + 1, 2 * nr + 7})
            for (int64_t k : {(int64_t)1, (int64_t)6, (int64_t)9, (int64_t)12, (int64_t)13, (int64_t)23})   // K steps in fours and singles; rows fetched ahead from 12
                for (bool pa : {false, true}) {
                    GemmCase g{m, n, k};
                    g.pack_a = pa;
                    g.b_by_rows = true;
                    check_gemm(gemm, g, seed++);
                }
    for (bool pa : {false, true})
        for (uint32_t parts : {1u, 2u, 3u}) {
            GemmCase g{bl.mc + 5, 3 * nr + 2, 2 * bl.kc + 13, 1.0f, 0.0f, false, false, pa, false, parts};
            g.b_by_rows = true;
            check_gemm(gemm, g, seed++);
            g.beta = 0.5f;
            g.n = nr + 3;
            check_gemm(gemm, g, seed++);
        }
}

TEST_CASE("gemm: column tiles (A read by column offsets), JIT or portable: every rows and columns, K steps, overwrite and add, A fetched ahead") {
    Gemm gemm = target_gemm();
    CHECK(gemm.reads_a_columns() == (gemm.isa() == Isa::Avx2 || gemm.isa() == Isa::Avx512));   // else a portable loop
    const int64_t mr = gemm.blocking().mr, nr = gemm.blocking().nr;
    uint32_t seed = 450;
    for (int64_t rows = 1; rows <= mr; ++rows)
        for (int64_t cols : {(int64_t)1, (int64_t)3, nr / 2, nr / 2 + 1, nr - 1, nr})
            for (int64_t k : {(int64_t)1, (int64_t)6, (int64_t)9, (int64_t)20, (int64_t)23})   // K steps in fours and singles; fetched ahead from 20
                for (int mode = 0; mode < 3; ++mode) {   // overwrite, add (streamed), overwrite with A fetched ahead
                    const bool add = mode == 1, fetch_a = mode == 2;
                    CAPTURE(rows); CAPTURE(cols); CAPTURE(k); CAPTURE(add); CAPTURE(fetch_a);
                    // Column p of A at slot k - 1 - p of rows + 5 floats, 2 in, in a NaN-filled buffer: no
                    // row past `rows` may be read (NaN would reach C).
                    const int64_t pitch = rows + 5, ldc = cols + 3;
                    std::vector<float> a = random_floats(rows * k, seed), b = random_floats(k * cols, seed + 1);
                    std::vector<float> c = random_floats(rows * ldc, seed + 2), buffer((size_t)(k * pitch), NAN);
                    const std::vector<float> c0 = c;
                    // the offsets end at a PROT_NONE page: tiles that fetch A ahead read none past k
                    test::GuardedBuffer offsets_guarded((size_t)(2 * k), true);
                    int64_t* offsets = reinterpret_cast<int64_t*>(offsets_guarded.data);
                    for (int64_t p = 0; p < k; ++p) {
                        offsets[p] = (k - 1 - p) * pitch + 2;
                        for (int64_t i = 0; i < rows; ++i) buffer[(size_t)(offsets[p] + i)] = a[(size_t)(i * k + p)];
                    }
                    std::vector<float> panel(gemm.packed_b_floats(k, cols), NAN);
                    gemm.pack_b(k, cols, b.data(), cols, 1, panel.data());
                    gemm.column_tile(buffer.data(), offsets, panel.data(), rows, cols, k, add, c.data(), ldc, add, fetch_a);   // streamed when adding
                    Reference r = reference_gemm(rows, cols, k, 1.0f, a.data(), k, 1, b.data(), cols, 1, add ? 1.0f : 0.0f,
                                                 c0.data(), ldc);
                    CHECK(check_close(r, rows, cols, c.data(), ldc) == 0);
                    int64_t touched = 0;
                    for (int64_t i = 0; i < rows; ++i)
                        for (int64_t j = cols; j < ldc; ++j)
                            touched += std::memcmp(&c[(size_t)(i * ldc + j)], &c0[(size_t)(i * ldc + j)], 4) != 0;
                    CHECK(touched == 0);
                    seed += 3;
                }
}

TEST_CASE("gemm: column tiles' C stored transposed: every count and maps tail, bias, residual in both orders, clamp") {
    Gemm gemm = target_gemm();
    uint32_t seed = 470;
    for (int64_t count : {1, 5, 7, 8, 9, 15, 16, 17, 31, 40})
        for (int64_t maps : {1, 8, 9, 15, 16, 17, 48})
            for (int variant = 0; variant < 8; ++variant) {
                const bool with_bias = variant & 1, clamp = variant & 2;
                const int residual = variant >> 2 ? (int)(seed % 2) + 1 : 0;   // 1: v + R, 2: R + v
                CAPTURE(count); CAPTURE(maps); CAPTURE(with_bias); CAPTURE(residual); CAPTURE(clamp);
                const int64_t ldc = maps + 3, stride = count + 7;
                std::vector<float> c = random_floats(count * ldc, seed), bias = random_floats(maps, seed + 1);
                std::vector<float> r = random_floats(maps * stride, seed + 2), y = random_floats(maps * stride, seed + 3);
                c[(size_t)(seed % (uint32_t)(count * ldc))] = NAN;   // a NaN through every step, and -0 + +0
                c[(size_t)((seed / 3) % (uint32_t)(count * ldc))] = -0.0f;
                r[(size_t)(seed % (uint32_t)(maps * stride))] = NAN;
                const std::vector<float> y0 = y;
                GemmStoreOps ops;
                ops.residual = residual ? r.data() : nullptr;
                ops.residual_first = residual == 2;
                ops.clamp = clamp;
                ops.lo = -0.5f;
                ops.hi = 0.75f;
                gemm.store_transposed(c.data(), ldc, count, maps, with_bias ? bias.data() : nullptr, y.data(), stride, &ops);
                int64_t wrong = 0;
                for (int64_t m = 0; m < maps; ++m)
                    for (int64_t i = 0; i < stride; ++i) {
                        float want = y0[(size_t)(m * stride + i)];
                        if (i < count) {
                            want = c[(size_t)(i * ldc + m)];
                            if (with_bias) want = want + bias[(size_t)m];
                            const float rv = r[(size_t)(m * stride + i)];
                            if (residual) want = residual == 2 ? rv + want : want + rv;
                            if (clamp) {   // Max(lo, v), Min(hi, v): NaN stays
                                want = -0.5f > want ? -0.5f : want;
                                want = 0.75f < want ? 0.75f : want;
                            }
                        }
                        const float got = y[(size_t)(m * stride + i)];
                        wrong += !(std::isnan(got) && std::isnan(want)) && std::memcmp(&got, &want, 4) != 0;
                    }
                CHECK(wrong == 0);
                seed += 5;
            }
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

// ---- the runtime's ops on the CPU device ----
namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

using test::count_of;

// Compiles the OpTest's node on CPU (NUM_THREADS `threads`), infers once (allocating
// nothing) and returns output 0; `kernels` receives the steps' kernel names (PERF_COUNT).
std::vector<float> infer_cpu(OpTest& t, uint32_t threads, std::string* kernels) {
    std::string name = t.fresh("out");
    REQUIRE(t.model.add_output(StringView(name.data(), name.size()), InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}};
    test::CompiledRun run;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 2), &run);
    if (!run.compiled.output_count()) return {};
    *kernels = run.kernels;
    const Tensor& out = run.request.output(0);
    const float* p = out.data_as<float>();
    return std::vector<float>(p, p + out.elements());
}

// Whether the compile put `op` on the JIT GEMM: where the target has tiles, it must.
void check_kernel(const std::string& kernels, const char* op) {
    Isa isa = default_isa();
    bool jit = isa == Isa::Avx2 || isa == Isa::Avx512 || isa == Isa::Neon;
    std::string name = std::string("gemm:") + isa_name(isa) + ":" + op;
    INFO(kernels);
    CHECK((kernels.find(name) != std::string::npos) == jit);
}

int64_t count_bad(const std::vector<float>& got, const Reference& r) {
    REQUIRE(got.size() == r.want.size());
    int64_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (!(std::fabs((double)got[i] - r.want[i]) <= r.bound[i])) {
            if (bad++ < 5) MESSAGE("y[" << i << "] = " << got[i] << ", want " << r.want[i]);
        }
    return bad;
}

struct ConvCase {
    Shape x, w;
    bool bias;
    int64_t group;
    Shape strides, dilations, pads;
};

// The naive convolution in double (bound as GEMM's: 1e-5 sum |w||x| + |bias|).
Reference reference_conv(const ConvCase& cc, const std::vector<float>& x, const std::vector<float>& w,
                         const std::vector<float>& bias, Shape* out_shape) {
    const int sp = (int)cc.x.size() - 2;
    const int64_t batch = cc.x[0], channels = cc.x[1], maps = cc.w[0], cg = cc.w[1], mg = maps / cc.group;
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
    *out_shape = {batch, maps};
    for (int i = 0; i < sp; ++i) out_shape->push_back(out[3 - sp + i]);
    Reference r;
    const int64_t positions = out[0] * out[1] * out[2];
    r.want.assign((size_t)(batch * maps * positions), 0.0);
    r.bound.assign(r.want.size(), 0.0);
    for (int64_t n = 0; n < batch; ++n)
        for (int64_t m = 0; m < maps; ++m)
            for (int64_t o0 = 0; o0 < out[0]; ++o0)
                for (int64_t o1 = 0; o1 < out[1]; ++o1)
                    for (int64_t o2 = 0; o2 < out[2]; ++o2) {
                        double sum = bias.empty() ? 0.0 : bias[(size_t)m], mag = std::fabs(sum);
                        int64_t g = m / mg;
                        for (int64_t c = 0; c < cg; ++c)
                            for (int64_t k0 = 0; k0 < k[0]; ++k0)
                                for (int64_t k1 = 0; k1 < k[1]; ++k1)
                                    for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                                        int64_t i0 = o0 * s[0] - pb[0] + k0 * d[0], i1 = o1 * s[1] - pb[1] + k1 * d[1],
                                                i2 = o2 * s[2] - pb[2] + k2 * d[2];
                                        if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                                        double xv = x[(size_t)((((n * channels + g * cg + c) * in[0] + i0) * in[1] + i1) * in[2] + i2)];
                                        double wv = w[(size_t)((((m * cg + c) * k[0] + k0) * k[1] + k1) * k[2] + k2)];
                                        sum += xv * wv;
                                        mag += std::fabs(xv * wv);
                                    }
                        size_t at = (size_t)(((n * maps + m) * out[0] + o0) * out[1] + o1) * (size_t)out[2] + (size_t)o2;
                        r.want[at] = sum;
                        r.bound[at] = 1e-5 * mag + 1e-30;
                    }
    (void)channels;
    return r;
}

void check_conv_cpu(const ConvCase& cc, uint32_t seed) {
    std::vector<float> x = random_floats(count_of(cc.x), seed), w = random_floats(count_of(cc.w), seed + 1);
    std::vector<float> bias = cc.bias ? random_floats(cc.w[0], seed + 2) : std::vector<float>();
    Shape out_shape;
    Reference r = reference_conv(cc, x, w, bias, &out_shape);
    for (bool constant : {true, false})
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(constant);
            CAPTURE(threads);
            OpTest t;
            std::vector<InputRef> in = {t.input(cc.x, x), constant ? t.constant(cc.w, w) : t.input(cc.w, w)};
            if (cc.bias) in.push_back(t.constant(Shape{cc.w[0]}, bias));
            t.op("Conv", in);
            if (cc.group != 1) t.set_int("group", cc.group);
            if (!cc.strides.empty()) t.set_ints("strides", cc.strides);
            if (!cc.dilations.empty()) t.set_ints("dilations", cc.dilations);
            if (!cc.pads.empty()) t.set_ints("pads", cc.pads);
            std::string kernels;
            std::vector<float> y = infer_cpu(t, threads, &kernels);
            CHECK(count_bad(y, r) == 0);
            const bool depthwise = cc.w[1] == 1 && cc.w[0] / cc.group < 4 && !(count_of(Shape(cc.w.begin() + 2, cc.w.end())) == 1);
            if (cc.x[0] == 0) CHECK(kernels.find("Conv") != std::string::npos);   // an empty batch: any conv path (Winograd too)
            else if (!depthwise) check_kernel(kernels, "Conv");
        }
}
}  // namespace

TEST_CASE("gemm: Conv on the CPU device: 1x1, 3x3, strided, dilated, grouped, padded, 1-D") {
    uint32_t seed = 300;
    const std::vector<ConvCase> cases = {
        {{1, 16, 9, 11}, {24, 16, 1, 1}, true, 1, {}, {}, {}},                       // 1x1 straight on NCHW
        {{2, 5, 7, 19}, {13, 5, 1, 1}, false, 1, {}, {}, {}},                         // 1x1, M and N tails
        {{1, 3, 6, 6}, {2, 3, 1, 1}, true, 1, {2, 2}, {}, {}},                        // strided 1x1 (im2col)
        {{1, 8, 13, 17}, {16, 8, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}},               // 3x3 padded
        {{2, 3, 7, 6}, {4, 3, 3, 2}, true, 1, {2, 1}, {1, 2}, {1, 0, 2, 1}},          // strided, dilated, asymmetric pads
        {{1, 4, 8, 7}, {6, 2, 3, 3}, true, 2, {1, 2}, {}, {1, 1, 0, 0}},              // 2 groups
        {{1, 8, 10, 10}, {16, 2, 3, 3}, false, 4, {}, {}, {1, 1, 1, 1}},              // 4 groups, 4 maps each
        {{1, 32, 21, 23}, {19, 32, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}},             // depth 288, 483 positions
        {{1, 64, 30, 30}, {7, 64, 3, 3}, false, 1, {}, {}, {1, 1, 1, 1}},             // depth 576: several im2col blocks
        {{2, 3, 17}, {5, 3, 4}, true, 1, {3}, {2}, {2, 1}},                           // 1-D
        {{1, 64, 5, 5}, {40, 64, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}},               // one small unit: GEMM parts
        {{1, 32, 4, 4}, {48, 32, 1, 1}, true, 1, {}, {}, {}},                         // the same, 1x1
        {{1, 16, 100, 100}, {24, 16, 1, 1}, true, 1, {}, {}, {}},                     // 1x1 in several blocks
        {{2, 1100, 5, 5}, {20, 1100, 1, 1}, false, 1, {}, {}, {}},                    // 1x1, K beyond kc (at most 1024)
        {{1, 1100, 6, 5}, {17, 1100, 1, 1}, true, 1, {}, {}, {}},                     // the same with a bias (the tiles add it)
        {{1, 1100, 6, 7}, {45, 1100, 1, 1}, true, 1, {}, {}, {}},                     // x86: the first row tile packs, two K blocks
        {{1, 128, 9, 9}, {32, 128, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}},            // 32 maps, K beyond kc (two K blocks)
        {{1, 6, 9, 9}, {6, 1, 3, 3}, true, 6, {2, 2}, {2, 2}, {2, 2, 2, 2}},          // depthwise (stays reference)
        // k x k on padded planes: M <= 64 and K >= 4 M read them in place on x86 (Y through a wide buffer), else packed
        // panels; under 16 tiles of 4 x 4 output pixels or under 16 channels, else AVX2 takes Winograd (test_winograd.cpp)
        {{1, 32, 4, 37}, {64, 32, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}},             // in place, 64 maps (the first row tile packs)
        {{1, 24, 11, 40}, {6, 24, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}},             // in place, rows of 40 in 42
        {{2, 9, 13, 7}, {5, 9, 3, 3}, false, 1, {}, {2, 1}, {2, 1, 0, 2}},           // in place, dilated, asymmetric pads
        {{1, 3, 20, 21}, {24, 3, 3, 3}, true, 1, {2, 2}, {}, {1, 1, 1, 1}},           // packed, strided (phase planes)
        {{1, 15, 12, 40}, {64, 15, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}},             // packed, 64 maps
        // AVX-512, maps a multiple of 16 and K >= 64: pixel tiles (A in place by columns, B the packed weights)
        {{1, 16, 7, 7}, {32, 16, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}},               // 7 x 7: rows of 7 pixels
        {{2, 24, 3, 30}, {48, 24, 3, 3}, false, 1, {}, {}, {1, 1, 1, 1}},             // rows of 30 in tiles of 10, 32 + 16 maps
        {{1, 32, 15, 17}, {16, 32, 3, 3}, true, 1, {2, 2}, {}, {1, 0, 1, 1}},         // strided (phase planes), asymmetric pads
        {{1, 64, 15, 17}, {64, 64, 3, 3}, true, 1, {2, 2}, {}, {1, 1, 1, 1}},         // strided, K of 576: K blocks of a panel in L1
        {{1, 16, 12, 11}, {16, 16, 3, 3}, true, 1, {}, {2, 2}, {2, 2, 2, 2}},         // dilated
        {{1, 64, 8, 9}, {64, 32, 3, 3}, true, 2, {}, {}, {1, 1, 1, 1}},               // 2 groups of 32 maps
        {{1, 144, 5, 6}, {32, 144, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}},             // K of 1296: two K blocks
        {{1, 64, 7, 7}, {32, 64, 1, 1}, true, 1, {}, {}, {}},                         // 1x1 on 7 x 7 (49 pixels, not 64 columns)
        {{2, 96, 5, 9}, {48, 96, 1, 1}, false, 1, {}, {}, {}},                        // 1x1, 2 images, tiles across rows
        {{1, 128, 6, 6}, {64, 64, 1, 1}, true, 2, {}, {}, {}},                        // 1x1, 2 groups
        {{1, 80, 20}, {16, 80, 1}, true, 1, {}, {}, {}},                              // 1x1 1-D
        {{1, 64, 2, 3, 5}, {16, 64, 1, 1, 1}, true, 1, {}, {}, {}},                   // 1x1 3-D
        {{1, 1100, 5, 5}, {32, 1100, 1, 1}, true, 1, {}, {}, {}},                     // 1x1, K of 1100: two K blocks
        // more maps than pixels, pixels x maps past a quarter of L2: all rows, the maps in chunks
        {{1, 64, 9, 9}, {4096, 64, 1, 1}, true, 1, {}, {}, {}},
        {{1, 16, 6, 6}, {4096, 16, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}},
        // an empty batch: every kind of unit plan with no images (nothing to divide among the threads)
        {{0, 16, 9, 11}, {24, 16, 1, 1}, true, 1, {}, {}, {}},                       // 1x1
        {{0, 3, 6, 6}, {2, 3, 1, 1}, true, 1, {2, 2}, {}, {}},                        // strided 1x1 (im2col)
        {{0, 24, 11, 40}, {6, 24, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}},             // in place
        {{0, 32, 15, 17}, {16, 32, 3, 3}, true, 1, {2, 2}, {}, {1, 0, 1, 1}},         // pixel tiles, strided
        {{0, 32, 28, 28}, {32, 32, 3, 3}, true, 1, {}, {}, {1, 1, 1, 1}},             // Winograd where it runs
        {{0, 64, 8, 9}, {64, 32, 3, 3}, true, 2, {}, {}, {1, 1, 1, 1}},               // 2 groups
        {{0, 64, 9, 9}, {4096, 64, 1, 1}, true, 1, {}, {}, {}},                       // the maps in chunks
        {{0, 6, 9, 9}, {6, 1, 3, 3}, true, 6, {2, 2}, {2, 2}, {2, 2, 2, 2}},          // depthwise
    };
    for (const ConvCase& cc : cases) {
        CAPTURE(seed);
        check_conv_cpu(cc, seed);
        seed += 3;
    }
}

TEST_CASE("gemm: a strided Conv after another finds zeros in its phase planes' borders, not the first one's scratch") {
    // A: a 3x3 identity (the centre tap of each channel 1, no bias: y = x exactly), whose padded
    // planes fill the scratch; B: strided, asymmetric pads, planes split in phases whose borders
    // it must zero itself. B's output against the reference on x.
    const ConvCase b_case{{1, 16, 15, 16}, {32, 16, 3, 3}, true, 1, {2, 2}, {}, {1, 2, 2, 1}};   // every pad read
    for (const std::vector<int64_t>& strides : {std::vector<int64_t>{2, 2}, std::vector<int64_t>{3, 2}}) {
        ConvCase cc = b_case;
        cc.strides = strides;
        CAPTURE(strides[0]);
        std::vector<float> x = random_floats(count_of(cc.x), 470), w = random_floats(count_of(cc.w), 471);
        std::vector<float> bias = random_floats(cc.w[0], 472), identity((size_t)(16 * 16 * 9), 0.0f);
        for (int64_t c = 0; c < 16; ++c) identity[(size_t)((c * 16 + c) * 9 + 4)] = 1.0f;
        Shape out_shape;
        Reference r = reference_conv(cc, x, w, bias, &out_shape);
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(threads);
            OpTest t;
            NodeId a = t.op("Conv", {t.input(cc.x, x), t.constant(Shape{16, 16, 3, 3}, identity)});
            t.set_ints("pads", {1, 1, 1, 1});
            t.op("Conv", {InputRef::by_id(a, 0), t.constant(cc.w, w), t.constant(Shape{cc.w[0]}, bias)});
            t.set_ints("strides", cc.strides);
            t.set_ints("pads", cc.pads);
            std::string kernels;
            CHECK(count_bad(infer_cpu(t, threads, &kernels), r) == 0);
        }
    }
}

TEST_CASE("gemm: MatMul on the CPU device: constant and run-time B, batches, 1 and 2 threads") {
    uint32_t seed = 400;
    struct Case { Shape a, b; };
    const std::vector<Case> cases = {{{7, 13}, {13, 29}}, {{1, 64}, {64, 100}}, {{3, 37, 19}, {19, 41}},
                                     {{2, 3, 5, 11}, {2, 3, 11, 17}}, {{64, 300}, {300, 65}}, {{2, 1, 9, 4}, {3, 4, 33}},
                                     {{9, 1030}, {1030, 21}}};   // K beyond kc (at most 1024)
    for (const Case& mc : cases)
        for (bool constant : {true, false})
            for (uint32_t threads : {1u, 2u}) {
                CAPTURE(seed); CAPTURE(constant); CAPTURE(threads);
                std::vector<float> a = random_floats(count_of(mc.a), seed), b = random_floats(count_of(mc.b), seed + 1);
                ++seed;
                OpTest t;
                t.op("MatMul", {t.input(mc.a, a), constant ? t.constant(mc.b, b) : t.input(mc.b, b)});
                std::string kernels;
                std::vector<float> y = infer_cpu(t, threads, &kernels);
                if (constant || mc.a[mc.a.size() - 2] >= 8) check_kernel(kernels, "MatMul");   // else the reference streams B
                // reference: broadcast the batch dims by hand (ranks here are equal or B is 2-D)
                const int64_t m = mc.a[mc.a.size() - 2], k = mc.a.back(), n = mc.b.back();
                Shape ab(mc.a.begin(), mc.a.end() - 2), bb(mc.b.begin(), mc.b.end() - 2), ob;
                size_t rank = std::max(ab.size(), bb.size());
                while (ab.size() < rank) ab.insert(ab.begin(), 1);
                while (bb.size() < rank) bb.insert(bb.begin(), 1);
                for (size_t i = 0; i < rank; ++i) ob.push_back(std::max(ab[i], bb[i]));
                Reference all;
                for (int64_t index = 0; index < count_of(ob); ++index) {
                    int64_t ai = 0, bi = 0, rest = index;
                    int64_t astride = 1, bstride = 1;
                    for (size_t i = rank; i-- > 0;) {
                        int64_t digit = rest % ob[i];
                        rest /= ob[i];
                        ai += (ab[i] == 1 ? 0 : digit) * astride;
                        bi += (bb[i] == 1 ? 0 : digit) * bstride;
                        astride *= ab[i];
                        bstride *= bb[i];
                    }
                    Reference r = reference_gemm(m, n, k, 1.0f, a.data() + ai * m * k, k, 1, b.data() + bi * k * n, n, 1, 0.0f,
                                                 nullptr, n);
                    all.want.insert(all.want.end(), r.want.begin(), r.want.end());
                    all.bound.insert(all.bound.end(), r.bound.begin(), r.bound.end());
                }
                CHECK(count_bad(y, all) == 0);
            }
}

TEST_CASE("gemm: Gemm on the CPU device: transA, transB, alpha, beta, broadcast C") {
    uint32_t seed = 500;
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (int c_kind : {0, 1, 2, 3})   // none, [n], [m, 1], [m, n]
                for (bool constant : {true, false}) {
                    const int64_t m = 19, n = 35, k = 300;
                    const float alpha = 0.75f, beta = c_kind ? -1.5f : 1.0f;
                    CAPTURE(ta); CAPTURE(tb); CAPTURE(c_kind); CAPTURE(constant);
                    std::vector<float> a = random_floats(m * k, seed), b = random_floats(k * n, seed + 1);
                    Shape cs = c_kind == 1 ? Shape{n} : c_kind == 2 ? Shape{m, 1} : Shape{m, n};
                    std::vector<float> cv = random_floats(count_of(cs), seed + 2);
                    ++seed;
                    OpTest t;
                    std::vector<InputRef> in = {t.input(ta ? Shape{k, m} : Shape{m, k}, a),
                                                constant ? t.constant(tb ? Shape{n, k} : Shape{k, n}, b)
                                                         : t.input(tb ? Shape{n, k} : Shape{k, n}, b)};
                    if (c_kind) in.push_back(t.constant(cs, cv));
                    t.op("Gemm", in);
                    t.set_int("transA", ta);
                    t.set_int("transB", tb);
                    t.set_float("alpha", alpha);
                    t.set_float("beta", beta);
                    std::vector<float> full((size_t)(m * n));
                    for (int64_t i = 0; i < m; ++i)
                        for (int64_t j = 0; j < n; ++j)
                            full[(size_t)(i * n + j)] = c_kind == 0 ? 0.0f : c_kind == 1 ? cv[(size_t)j] : c_kind == 2 ? cv[(size_t)i]
                                                                                                                      : cv[(size_t)(i * n + j)];
                    Reference r = reference_gemm(m, n, k, alpha, a.data(), ta ? 1 : k, ta ? m : 1, b.data(), tb ? 1 : n, tb ? k : 1,
                                                 c_kind ? beta : 0.0f, full.data(), n);
                    std::string kernels;
                    std::vector<float> y = infer_cpu(t, seed % 2 ? 2 : 1, &kernels);
                    check_kernel(kernels, "Gemm");   // m = 19: no dot products
                    CHECK(count_bad(y, r) == 0);
                }
}

namespace {
// ConvTranspose in double, as a scatter: y[o] += x[i] w[k] for o = i s - pad + k d (2-D).
Reference reference_conv_transpose(const Shape& xs, const Shape& ws, int64_t group, const Shape& strides, const Shape& pads,
                                   const Shape& dilations, const std::vector<float>& x, const std::vector<float>& w,
                                   const std::vector<float>& bias, Shape* out_shape) {
    const int64_t batch = xs[0], channels = xs[1], cg = channels / group, mg = ws[1], maps = mg * group;
    int64_t out[2];
    for (int i = 0; i < 2; ++i)
        out[i] = strides[i] * (xs[2 + i] - 1) + (ws[2 + i] - 1) * dilations[i] + 1 - pads[i] - pads[2 + i];
    *out_shape = {batch, maps, out[0], out[1]};
    Reference r;
    std::vector<double> mag((size_t)(batch * maps * out[0] * out[1]), 0.0);
    r.want.assign(mag.size(), 0.0);
    for (int64_t n = 0; n < batch; ++n)
        for (int64_t m = 0; m < maps; ++m)
            for (int64_t o = 0; o < out[0] * out[1]; ++o) {
                size_t at = (size_t)((n * maps + m) * out[0] * out[1] + o);
                r.want[at] = bias.empty() ? 0.0 : bias[(size_t)m];
                mag[at] = std::fabs(r.want[at]);
            }
    for (int64_t n = 0; n < batch; ++n)
        for (int64_t c = 0; c < channels; ++c)
            for (int64_t i0 = 0; i0 < xs[2]; ++i0)
                for (int64_t i1 = 0; i1 < xs[3]; ++i1)
                    for (int64_t mm = 0; mm < mg; ++mm)
                        for (int64_t k0 = 0; k0 < ws[2]; ++k0)
                            for (int64_t k1 = 0; k1 < ws[3]; ++k1) {
                                int64_t o0 = i0 * strides[0] - pads[0] + k0 * dilations[0], o1 = i1 * strides[1] - pads[1] + k1 * dilations[1];
                                if (o0 < 0 || o0 >= out[0] || o1 < 0 || o1 >= out[1]) continue;
                                int64_t m = c / cg * mg + mm;
                                double v = (double)x[(size_t)(((n * channels + c) * xs[2] + i0) * xs[3] + i1)] *
                                           w[(size_t)(((c * mg + mm) * ws[2] + k0) * ws[3] + k1)];
                                size_t at = (size_t)(((n * maps + m) * out[0] + o0) * out[1] + o1);
                                r.want[at] += v;
                                mag[at] += std::fabs(v);
                            }
    r.bound.resize(mag.size());
    for (size_t i = 0; i < mag.size(); ++i) r.bound[i] = 1e-5 * mag[i] + 1e-30;
    return r;
}
}  // namespace

TEST_CASE("gemm: ConvTranspose on the CPU device: strides, pads, dilations, groups") {
    struct Case { Shape x, w; int64_t group; Shape strides, pads, dilations; bool bias; };
    const std::vector<Case> cases = {
        {{1, 8, 7, 9}, {8, 5, 3, 3}, 1, {2, 2}, {1, 1, 1, 1}, {1, 1}, true},
        {{2, 6, 5, 4}, {6, 3, 4, 4}, 2, {2, 1}, {1, 0, 2, 1}, {1, 2}, false},
        {{1, 32, 20, 20}, {32, 16, 2, 2}, 1, {2, 2}, {0, 0, 0, 0}, {1, 1}, true},   // a DB-head upsampling, several blocks
        // kernel == stride, no pads: each output stored once (col2im_store_tiles)
        {{1, 3, 20, 37}, {3, 5, 2, 2}, 1, {2, 2}, {0, 0, 0, 0}, {1, 1}, true},     // blocks end inside rows, row tails
        {{1, 5, 3, 7}, {5, 4, 3, 3}, 1, {3, 3}, {0, 0, 0, 0}, {1, 1}, false},      // 3 taps a row
        {{2, 4, 6, 5}, {4, 6, 2, 1}, 2, {2, 1}, {0, 0, 0, 0}, {1, 1}, true},       // 1 tap a row, groups, batch
    };
    uint32_t seed = 600;
    for (const Case& cc : cases)
        for (bool constant : {true, false})
            for (uint32_t threads : {1u, 2u}) {
                CAPTURE(seed); CAPTURE(constant); CAPTURE(threads);
                std::vector<float> x = random_floats(count_of(cc.x), seed), w = random_floats(count_of(cc.w), seed + 1);
                std::vector<float> bias = cc.bias ? random_floats(cc.w[1] * cc.group, seed + 2) : std::vector<float>();
                ++seed;
                Shape out_shape;
                Reference r = reference_conv_transpose(cc.x, cc.w, cc.group, cc.strides, cc.pads, cc.dilations, x, w, bias, &out_shape);
                OpTest t;
                std::vector<InputRef> in = {t.input(cc.x, x), constant ? t.constant(cc.w, w) : t.input(cc.w, w)};
                if (cc.bias) in.push_back(t.constant(Shape{cc.w[1] * cc.group}, bias));
                t.op("ConvTranspose", in);
                if (cc.group != 1) t.set_int("group", cc.group);
                t.set_ints("strides", cc.strides);
                t.set_ints("pads", cc.pads);
                t.set_ints("dilations", cc.dilations);
                std::string kernels;
                std::vector<float> y = infer_cpu(t, threads, &kernels);
                check_kernel(kernels, "ConvTranspose");
                CHECK(count_bad(y, r) == 0);
            }
}

// Where the CPU device's own kernels run (every ISA but ref), a Gemm with fewer than 8 rows and
// B transposed is dot products over B where it lies: cpu:<lanes>:Gemm, for a constant B too.
bool dot_kernel(const std::string& kernels) {
    INFO(kernels);
    const bool own = default_isa() != Isa::Ref;
    const bool dot = kernels.find("cpu:") != std::string::npos && kernels.find(":Gemm") != std::string::npos;
    CHECK(dot == own);
    CHECK(kernels.find("gemm:") == std::string::npos);
    return dot;
}

TEST_CASE("gemm: a few rows of A times B transposed: dot products over B, every tail of M, N and K") {
    struct Dims { int64_t n, k; };
    const Dims dims[] = {{1, 1}, {3, 7}, {4, 8}, {5, 13}, {67, 300}, {130, 9}};   // N tails of 4 and 64, K tails of 8
    uint32_t seed = 650;
    for (int64_t m : {1, 2, 7})
        for (const Dims& d : dims)
            for (int c_kind : {0, 1, 2})   // none, [n], [m, n]
                for (bool constant : {true, false}) {
                    const int64_t n = d.n, k = d.k;
                    const float alpha = c_kind ? 0.75f : 1.0f, beta = c_kind ? -1.5f : 1.0f;
                    const uint32_t threads = seed % 2 ? 2 : 1;
                    CAPTURE(m); CAPTURE(n); CAPTURE(k); CAPTURE(c_kind); CAPTURE(constant); CAPTURE(threads);
                    std::vector<float> a = random_floats(m * k, seed), b = random_floats(n * k, seed + 1);
                    Shape cs = c_kind == 1 ? Shape{n} : Shape{m, n};
                    std::vector<float> cv = random_floats(count_of(cs), seed + 2);
                    ++seed;
                    OpTest t;
                    std::vector<InputRef> in = {t.input(Shape{m, k}, a), constant ? t.constant(Shape{n, k}, b) : t.input(Shape{n, k}, b)};
                    if (c_kind) in.push_back(t.constant(cs, cv));
                    t.op("Gemm", in);
                    t.set_int("transB", 1);
                    t.set_float("alpha", alpha);
                    t.set_float("beta", beta);
                    std::vector<float> full((size_t)(m * n), 0.0f);
                    for (int64_t i = 0; i < m; ++i)
                        for (int64_t j = 0; j < n; ++j)
                            if (c_kind) full[(size_t)(i * n + j)] = c_kind == 1 ? cv[(size_t)j] : cv[(size_t)(i * n + j)];
                    Reference r = reference_gemm(m, n, k, alpha, a.data(), k, 1, b.data(), 1, k, c_kind ? beta : 0.0f, full.data(), n);
                    std::string kernels;
                    std::vector<float> y = infer_cpu(t, threads, &kernels);
                    dot_kernel(kernels);
                    CHECK(count_bad(y, r) == 0);
                }
}

TEST_CASE("gemm: the dot products' epilogue (bias, Relu) equals the unfused steps bit for bit") {
    const int64_t m = 3, n = 130, k = 70;
    std::vector<float> a = random_floats(m * k, 660), b = random_floats(n * k, 661), bias = random_floats(n, 662);
    a[5] = std::nanf("");   // a NaN row reaches the epilogue as it reaches the island
    for (uint32_t threads : {1u, 2u}) {
        std::vector<float> y[2];
        std::string kernels[2];
        for (int fusion = 0; fusion < 2; ++fusion) {
            OpTest t;
            NodeId g = t.op("Gemm", {t.input(Shape{m, k}, a), t.constant(Shape{n, k}, b), t.constant(Shape{n}, bias)});
            t.set_int("transB", 1);
            t.op("Relu", {InputRef::by_id(g, 0)});
            test::CpuRun run = test::run_last_node_on_cpu(t, threads, fusion != 0);
            y[fusion].resize(run.bytes.size() / sizeof(float));
            if (!run.bytes.empty()) std::memcpy(y[fusion].data(), run.bytes.data(), run.bytes.size());
            kernels[fusion] = run.kernels;
        }
        CAPTURE(threads);
        INFO(kernels[1]);
        REQUIRE(y[0].size() == y[1].size());
        int64_t different = 0;
        for (size_t i = 0; i < y[0].size(); ++i)
            different += std::isnan(y[0][i]) ? !std::isnan(y[1][i]) : std::memcmp(&y[0][i], &y[1][i], sizeof(float)) != 0;
        CHECK(different == 0);
        CHECK((kernels[1].find("Gemm+epilogue:") != std::string::npos) == (default_isa() != Isa::Ref));
    }
}

TEST_CASE("gemm: a few rows times a run-time B: MatMul stays on the reference (it streams B once)") {
    const int64_t m = 3, n = 50, k = 70;
    std::vector<float> a = random_floats(m * k, 700), b = random_floats(k * n, 701);
    for (bool constant : {true, false}) {
        CAPTURE(constant);
        OpTest u;
        std::string kernels;
        Reference rm = reference_gemm(m, n, k, 1.0f, a.data(), k, 1, b.data(), n, 1, 0.0f, nullptr, n);
        u.op("MatMul", {u.input(Shape{m, k}, a), constant ? u.constant(Shape{k, n}, b) : u.input(Shape{k, n}, b)});
        std::vector<float> y = infer_cpu(u, 1, &kernels);
        CHECK(count_bad(y, rm) == 0);
        if (constant) check_kernel(kernels, "MatMul");
        else CHECK(kernels.find("gemm:") == std::string::npos);
    }
}
