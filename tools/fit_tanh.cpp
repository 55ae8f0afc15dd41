// Fits snippets.h's tanh table and checks it: tanh(t)/t as a degree-5 polynomial on each of
// the 16 intervals math_tanh picks by the quarter binade of s = t + 1, in u = t - c with
// c = 1.125 start - 1 (start: s with all but its top 2 mantissa bits cleared).
//
//   make build/fit_tanh && build/fit_tanh [STRIDE]   prints the table rows, then the max ulp of
//                                                    the interpreter's Tanh over every STRIDE-th
//                                                    float in (0, 9.2], with FMA and without
//   build/fit_tanh --check                           the fit equals kLookupTables, and a strided
//                                                    sweep stays within snippet_op_ulp_bound
//                                                    (part of `make test`)
//
// The fit: least squares on 400 Chebyshev nodes in long double, relative weights moved toward
// the minimax error by 10 Lawson steps, then each coefficient rounded to float in turn with the
// later ones refitted around it. The last interval, [9, 9.1], lies far from its expansion
// point (u near -1.2), so its normal equations are ill-conditioned: the same steps in another
// order give another table, as accurate but not the header's.
#define TESSEL_IMPLEMENTATION
#define TESSEL_NO_JIT
#include "snippets.h"
#include "test/reference_math.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace tessel;

namespace {

typedef long double Real;
constexpr int kDegree = 5;
constexpr int kNodes = 400;
constexpr int kIntervals = 14;  // t in [0, 9.1]: the 14th quarter binade of t + 1 holds [9, 9.1]

Real h(Real t) { return t == 0 ? 1.0L : tanhl(t) / t; }
// Interval k in t order: the k % 4-th quarter of the binade [2^(k/4), 2^(k/4 + 1)) of s.
Real interval_start(int k) { return ldexpl(1.0L + (k % 4) / 4.0L, k / 4) - 1.0L; }
Real interval_width(int k) { return ldexpl(0.25L, k / 4); }
Real expansion_point(int k) { return (interval_start(k) + 1.0L) * 1.125L - 1.0L; }
// Its table entry: the exponent's low 2 bits and the top 2 mantissa bits of s.
int table_entry(int k) { return ((127 + k / 4) & 3) << 2 | (k % 4); }

// Solves the m x m system in a (augmented with column m) by Gauss-Jordan with partial pivoting.
void solve(Real a[kDegree + 1][kDegree + 2], int m, Real* x) {
    for (int c = 0; c < m; ++c) {
        int p = c;
        for (int r = c + 1; r < m; ++r)
            if (fabsl(a[r][c]) > fabsl(a[p][c])) p = r;
        for (int q = 0; q <= m; ++q) { Real t = a[c][q]; a[c][q] = a[p][q]; a[p][q] = t; }
        for (int r = 0; r < m; ++r) {
            if (r == c) continue;
            Real f = a[r][c] / a[c][c];
            for (int q = c; q <= m; ++q) a[r][q] -= f * a[c][q];
        }
    }
    for (int i = 0; i < m; ++i) x[i] = a[i][m] / a[i][i];
}

// Least squares weighted by w^2 times `lawson` (if given) for the coefficients j0..kDegree of
// p(u) = sum c_j u^j, the ones below j0 fixed.
void least_squares(const Real* u, const Real* y, const Real* w, const Real* lawson, int j0, const Real* fixed, Real* out) {
    const int m = kDegree - j0 + 1;
    Real a[kDegree + 1][kDegree + 2] = {};
    for (int i = 0; i < kNodes; ++i) {
        Real r = y[i];
        for (int j = 0; j < j0; ++j) r -= fixed[j] * powl(u[i], j);
        const Real w2 = lawson ? w[i] * w[i] * lawson[i] : w[i] * w[i];
        for (int p = 0; p < m; ++p) {
            const Real up = powl(u[i], j0 + p);
            for (int q = 0; q < m; ++q) a[p][q] += w2 * up * powl(u[i], j0 + q);
            a[p][m] += w2 * up * r;
        }
    }
    solve(a, m, out);
}

void fit_interval(int k, float* coefficients) {
    const Real c = expansion_point(k);
    // Slightly below the interval: t + 1 can round t into the next interval by one ulp of s.
    const Real lo = interval_start(k) - c - interval_width(k) * 1e-6L;
    const Real hi = (k == kIntervals - 1 ? 9.1L : interval_start(k) + interval_width(k)) - c;
    Real u[kNodes], y[kNodes], w[kNodes], lawson[kNodes];
    for (int i = 0; i < kNodes; ++i) {
        u[i] = (lo + hi) / 2 + (hi - lo) / 2 * cosl(3.14159265358979323846264338327950288L * (i + 0.5L) / kNodes);
        y[i] = h(c + u[i]);
        w[i] = 1.0L / y[i];
        lawson[i] = 1.0L;
    }
    for (int step = 0; step < 10; ++step) {
        Real p[kDegree + 1];
        least_squares(u, y, w, lawson, 0, nullptr, p);
        Real total = 0;
        for (int i = 0; i < kNodes; ++i) {
            Real v = 0;
            for (int j = kDegree; j >= 0; --j) v = v * u[i] + p[j];
            lawson[i] *= fabsl((v - y[i]) * w[i]);
            total += lawson[i];
        }
        for (int i = 0; i < kNodes; ++i) lawson[i] = lawson[i] / total * kNodes;
    }
    for (int i = 0; i < kNodes; ++i) w[i] *= sqrtl(lawson[i]);
    Real fixed[kDegree + 1] = {};
    for (int j0 = 0; j0 <= kDegree; ++j0) {
        Real rest[kDegree + 1];
        least_squares(u, y, w, nullptr, j0, fixed, rest);
        fixed[j0] = (float)rest[0];
    }
    for (int j = 0; j <= kDegree; ++j) coefficients[j] = (float)fixed[j];
}

// table[j][entry]: coefficient j of every entry, as kLookupTables holds them.
void fit_table(float table[kDegree + 1][16]) {
    float coefficients[kIntervals][kDegree + 1];
    for (int k = 0; k < kIntervals; ++k) fit_interval(k, coefficients[k]);
    for (int entry = 0; entry < 16; ++entry) {
        int k = kIntervals - 1;  // entries 10 and 11 (t past 9.1) repeat the last interval
        for (int i = 0; i < kIntervals; ++i)
            if (table_entry(i) == entry) k = i;
        for (int j = 0; j <= kDegree; ++j) table[j][entry] = coefficients[k][j];
    }
}

// The interpreter's Tanh (the oracle every JIT target is compared with bit for bit) over every
// stride-th float in (0, 9.2]; the largest error in ulp, measured as the tests measure it.
double sweep(uint32_t stride, bool fma) {
    const float lo_value = 1e-30f, hi_value = 9.2f;
    uint32_t lo, hi;
    std::memcpy(&lo, &lo_value, 4);
    std::memcpy(&hi, &hi_value, 4);
    const uint32_t chunk = 1u << 20;
    std::vector<float> in(chunk), out(chunk);
    Arena arena;
    SnippetBody body(&arena);
    ValueId x, y;
    int64_t shape[] = {(int64_t)chunk};
    if (body.parameter(shape, &x) != Status::Ok || body.unary(SnippetOp::Tanh, x, &y) != Status::Ok || body.result(y) != Status::Ok) return 1e30;
    Snippet snippet;
    SnippetOptions options;
    options.isa = Isa::Ref;
    options.reference_fma = fma;
    if (snippet.compile(body, options) != Status::Ok) return 1e30;
    double worst = 0;
    uint64_t bits = lo;
    while (bits <= hi) {
        uint32_t n = 0;
        for (; n < chunk && bits <= hi; ++n, bits += stride) {
            const uint32_t b = (uint32_t)bits;
            std::memcpy(&in[n], &b, 4);
        }
        for (uint32_t i = n; i < chunk; ++i) in[i] = 1.0f;
        const float* ins[] = {in.data()};
        float* outs[] = {out.data()};
        if (snippet.run(ins, outs) != Status::Ok) return 1e30;
        for (uint32_t i = 0; i < n; ++i) worst = std::max(worst, reference_math::ulp_error(out[i], (double)tanhl((Real)in[i])));
    }
    return worst;
}

}  // namespace

int main(int argc, char** argv) {
    const bool check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
    float table[kDegree + 1][16];
    fit_table(table);
    if (check) {
        int mismatches = 0;
        for (int j = 0; j <= kDegree; ++j)
            for (int e = 0; e < 16; ++e)
                if (std::memcmp(&table[j][e], &detail::kLookupTables[detail::kTanhC0 + j][e], 4) != 0) {
                    std::printf("kLookupTables[kTanhC0 + %d][%d] = %a, the fit gives %a\n", j, e,
                                (double)detail::kLookupTables[detail::kTanhC0 + j][e], (double)table[j][e]);
                    ++mismatches;
                }
        const double with_fma = sweep(4099, true), without = sweep(4099, false);
        std::printf("table %s; every 4099th float in (0, 9.2]: %.2f ulp with FMA (bound %u), %.2f without (bound %u)\n",
                    mismatches ? "differs from the fit" : "equals the fit", with_fma, snippet_op_ulp_bound(SnippetOp::Tanh, true),
                    without, snippet_op_ulp_bound(SnippetOp::Tanh, false));
        const bool ok = mismatches == 0 && with_fma <= snippet_op_ulp_bound(SnippetOp::Tanh, true) &&
                        without <= snippet_op_ulp_bound(SnippetOp::Tanh, false);
        return ok ? 0 : 1;
    }
    for (int j = 0; j <= kDegree; ++j) {
        std::printf("    {");
        for (int e = 0; e < 16; ++e) std::printf("%af%s", (double)table[j][e], e < 15 ? ", " : "},\n");
    }
    const uint32_t stride = argc > 1 ? (uint32_t)std::strtoul(argv[1], nullptr, 10) : 1u;
    if (stride == 0) { std::printf("usage: fit_tanh [STRIDE >= 1 | --check]\n"); return 2; }
    std::printf("every %u-th float in (0, 9.2]: %.3f ulp with FMA, %.3f without\n", stride, sweep(stride, true), sweep(stride, false));
    return 0;
}
