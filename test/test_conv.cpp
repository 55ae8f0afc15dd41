// Gemm::run's BlockDone (the hook fused epilogues run on): every block it reports is final
// when reported (equal to the finished product), the blocks of all parts tile C exactly once,
// and nothing outside C is reported. The target comes from TESSEL_ISA, as in test_gemm.cpp.
#include <doctest/doctest.h>
#include <cstring>
#include <random>
#include <vector>
#include "runtime.h"

using namespace tessel;

namespace {

struct DoneCase {
    int64_t m, n, k;
    float beta;
    bool pack_a, pack_b;
    uint32_t parts;
};

struct Seen {
    const float* c = nullptr;
    int64_t ldc = 0, m = 0, n = 0;
    std::vector<float> snapshot;   // C as each block was reported, NAN where never reported
    std::vector<int> reports;      // reports per element
    int64_t outside = 0;           // blocks reaching past C
};

void check_block_done(const Gemm& gemm, const DoneCase& d, uint32_t seed) {
    CAPTURE(d.m); CAPTURE(d.n); CAPTURE(d.k); CAPTURE(d.beta); CAPTURE(d.pack_a); CAPTURE(d.pack_b); CAPTURE(d.parts);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> a((size_t)(d.m * d.k)), b((size_t)(d.k * d.n)), c((size_t)(d.m * d.n));
    for (float& f : a) f = uniform(rng);
    for (float& f : b) f = uniform(rng);
    for (float& f : c) f = uniform(rng);
    GemmOperand oa, ob;
    oa.data = a.data(); oa.row = d.k; oa.col = 1;
    ob.data = b.data(); ob.row = d.n; ob.col = 1;
    std::vector<float> packed_a, packed_b;
    if (d.pack_a) {
        packed_a.resize(gemm.packed_a_floats(d.m, d.k));
        gemm.pack_a(d.m, d.k, a.data(), d.k, 1, packed_a.data());
        oa.data = packed_a.data();
        oa.packed = true;
    }
    if (d.pack_b) {
        packed_b.resize(gemm.packed_b_floats(d.k, d.n));
        gemm.pack_b(d.k, d.n, b.data(), d.n, 1, packed_b.data());
        ob.data = packed_b.data();
        ob.packed = true;
    }
    Seen seen;
    seen.c = c.data();
    seen.ldc = d.n;
    seen.m = d.m;
    seen.n = d.n;
    seen.snapshot.assign(c.size(), NAN);
    seen.reports.assign(c.size(), 0);
    Gemm::BlockDone done;
    done.user = &seen;
    done.fn = [](void* user, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
        Seen& s = *static_cast<Seen*>(user);
        if (m0 < 0 || n0 < 0 || m1 > s.m || n1 > s.n || m0 >= m1 || n0 >= n1) { ++s.outside; return; }
        for (int64_t i = m0; i < m1; ++i)
            for (int64_t j = n0; j < n1; ++j) {
                s.snapshot[(size_t)(i * s.ldc + j)] = s.c[i * s.ldc + j];
                ++s.reports[(size_t)(i * s.ldc + j)];
            }
    };
    const size_t slice = gemm.scratch_floats(d.m, d.n, d.k, d.pack_a, d.pack_b);
    std::vector<float> scratch(slice * d.parts + 1);
    for (uint32_t part = 0; part < d.parts; ++part)
        gemm.run(d.m, d.n, d.k, 1.0f, oa, ob, d.beta, c.data(), d.n, scratch.data() + part * slice, part, d.parts, &done);
    CHECK(seen.outside == 0);
    int64_t twice = 0, missed = 0, changed = 0;
    for (size_t e = 0; e < c.size(); ++e) {
        missed += seen.reports[e] == 0;
        twice += seen.reports[e] > 1;
        changed += seen.reports[e] == 1 && std::memcmp(&seen.snapshot[e], &c[e], sizeof(float)) != 0;
    }
    CHECK(missed == 0);
    CHECK(twice == 0);
    CHECK(changed == 0);   // bitwise: nothing wrote the block after it was reported
}

}  // namespace

TEST_CASE("conv: Gemm::run reports each block of C once, when final, over parts, K blocks and tails") {
    Gemm gemm;
    REQUIRE(gemm.init() == Status::Ok);
    const GemmBlocking& bl = gemm.blocking();
    const int64_t mr = bl.mr, nr = bl.nr;
    uint32_t seed = 700;
    const std::vector<DoneCase> cases = {
        {1, 1, 1, 0.0f, false, false, 1},
        {mr + 1, nr + 3, 7, 0.0f, false, false, 1},
        {2 * mr + 3, 5 * nr + 1, 33, 1.0f, true, false, 2},
        {bl.mc + 5, 3 * nr - 1, 19, 0.0f, false, true, 2},      // two row blocks
        {9, 2 * nr + 7, bl.kc + 5, 0.5f, false, true, 1},       // two K blocks: reported after the last
        {3 * mr, 9 * nr, bl.kc + 9, 0.0f, true, true, 3},
        {4, 200 * nr + 5, 3, 0.0f, false, false, 2},            // blocks of many tiles' columns
        {5, 7, 0, 0.0f, false, false, 2},                       // K = 0: C = beta C, still reported
    };
    for (const DoneCase& d : cases) check_block_done(gemm, d, seed++);
}
