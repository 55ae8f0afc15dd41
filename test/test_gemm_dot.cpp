// GemmDot (snippets.h >>gemm dot): one row times a block of rows of B (4 or 8) or one at every ISA the machine has
// and the portable loop, every k from 1 to past two vectors of the widest width a step and a
// few large ones, against a double-precision sum within (k + 2) 2^-23 sum |x||b| (the sum order
// is not the reference's); x and B end at a PROT_NONE page, so a read past k floats faults.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {
using test::GuardedBuffer;

// Rows of `got` (4 or 1) outside the bound.
int check_rows(const float* x, const float* b, int64_t k, const float* got, int rows) {
    int bad = 0;
    for (int r = 0; r < rows; ++r) {
        double exact = 0.0, magnitude = 0.0;
        for (int64_t p = 0; p < k; ++p) {
            exact += (double)x[p] * (double)b[r * k + p];
            magnitude += std::fabs((double)x[p] * (double)b[r * k + p]);
        }
        const double bound = (double)(k + 2) * std::ldexp(1.0, -23) * magnitude;
        if (!(std::fabs((double)got[r] - exact) <= bound)) {
            if (bad++ < 2) MESSAGE("row " << r << ": " << got[r] << ", exact " << exact << ", bound " << bound);
        }
    }
    return bad;
}
}  // namespace

TEST_CASE("gemm dot: a block of rows and 1 row, every k to past two vectors a step, at every ISA, reads stop at k") {
    std::mt19937 rng(77);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<int64_t> ks;
    for (int64_t k = 1; k <= 70; ++k) ks.push_back(k);
    for (int64_t k : {95, 96, 97, 300, 1024, 1031}) ks.push_back(k);
    int64_t checked = 0;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        const std::string target = isa_name(isa);
        CAPTURE(target);
        for (int64_t k : ks) {
            CAPTURE(k);
            GemmDot dot;
            REQUIRE(dot.init(k, isa) == Status::Ok);
            CHECK(dot.jit() == (isa != Isa::Ref));
            const int block = dot.block();
            REQUIRE((block == 4 || block == 8));
            GuardedBuffer x((size_t)k, true), b((size_t)(block * k), true);
            for (int64_t p = 0; p < k; ++p) x.data[p] = dist(rng);
            for (int64_t p = 0; p < block * k; ++p) b.data[p] = dist(rng);
            float out[8] = {};
            dot.run_block(x.data, b.data, out);
            CHECK(check_rows(x.data, b.data, k, out, block) == 0);
            dot.run1(x.data, b.data + (block - 1) * k, out);   // the last row: its last float ends the page
            CHECK(check_rows(x.data, b.data + (block - 1) * k, k, out, 1) == 0);
            ++checked;
        }
    }
    MESSAGE(checked << " sizes checked");
}

TEST_CASE("gemm dot: bad sizes") {
    GemmDot dot;
    CHECK(dot.init(0, Isa::Ref) == Status::InvalidArgument);
    CHECK(dot.init(((int64_t)1 << 24) + 1, Isa::Ref) == Status::InvalidArgument);
    for (Isa isa : {Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon})
        if (!isa_available(isa)) CHECK(dot.init(8, isa) == Status::Unsupported);
}
