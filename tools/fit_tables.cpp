// Fits snippets.h's piecewise tables and checks them. Each table holds f as a polynomial of
// `degree` on each of the 16 intervals picked by the quarter binade of s = t + 1 (t = |x|
// clamped to t_max), in u = t - c with c = 1.125 start - 1 (start: s with all but its top 2
// mantissa bits cleared); see quarter_binade() in snippets.h.
//   tanh: tanh(t)/t, t in [0, 9.1]                     (math_tanh)
//   gelu: R(t) = Phi(-t) exp(t^2/2) for t in [0, 7),    (math_gelu_erf: Phi(-t) = exp(-t^2/2) R(t))
//         t R(t) / 7 for t in [7, 14.5]
//
//   make build/fit_tables && build/fit_tables [STRIDE]   prints the table rows, then the max ulp
//                                                        of the interpreter's op over every
//                                                        STRIDE-th float of its range, with FMA
//                                                        and without
//   build/fit_tables --check                             every fit equals kLookupTables, and a
//                                                        strided sweep stays within
//                                                        snippet_op_ulp_bound (part of `make test`)
//
// The fit: least squares on 400 Chebyshev nodes in long double, relative weights moved toward
// the minimax error by 10 Lawson steps, then each coefficient rounded to float in turn with the
// later ones refitted around it. tanh's last interval, [9, 9.1], lies far from its expansion
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
constexpr int kMaxDegree = 5;
constexpr int kNodes = 400;
constexpr Real kPi = 3.14159265358979323846264338327950288L;

Real tanh_over_t(Real t) { return t == 0 ? 1.0L : tanhl(t) / t; }
// R(t) below t = 7 (also in the sliver below 7 that t + 1's rounding puts into the interval
// of [7, 9): max(x, -7) is still x there), t R(t) / 7 from 7 on; continuous at 7.
Real gelu_r(Real t) { return 0.5L * erfcl(t / sqrtl(2.0L)) * expl(t * t / 2) * (t < 7 ? 1.0L : t / 7); }
Real tanh_reference(Real x) { return tanhl(x); }
Real gelu_reference(Real x) { return 0.5L * x * erfcl(-x / sqrtl(2.0L)); }

struct Table {
    const char* name;
    Real (*f)(Real);
    int intervals;  // the quarter binades of t + 1 up to t_max
    Real t_max;
    int degree;
    uint32_t c0;    // kLookupTables row of coefficient 0
    SnippetOp op;   // the op the sweep checks
    Real (*reference)(Real);
    float sweep_lo, sweep_hi;  // the sweep covers +-[sweep_lo, sweep_hi] (only + when negative is false)
    bool negative;
};
const Table kTables[] = {
    {"tanh", tanh_over_t, 14, 9.1L, 5, detail::kTanhC0, SnippetOp::Tanh, tanh_reference, 1e-30f, 9.2f, false},
    {"gelu", gelu_r, 16, 14.5L, 5, detail::kGeluC0, SnippetOp::GeluErf, gelu_reference, 1e-30f, 16.0f, true},
};

// Interval k in t order: the k % 4-th quarter of the binade [2^(k/4), 2^(k/4 + 1)) of s.
Real interval_start(int k) { return ldexpl(1.0L + (k % 4) / 4.0L, k / 4) - 1.0L; }
Real interval_width(int k) { return ldexpl(0.25L, k / 4); }
Real expansion_point(int k) { return (interval_start(k) + 1.0L) * 1.125L - 1.0L; }
// Its table entry: the exponent's low 2 bits and the top 2 mantissa bits of s.
int table_entry(int k) { return ((127 + k / 4) & 3) << 2 | (k % 4); }

// Solves the m x m system in a (augmented with column m) by Gauss-Jordan with partial pivoting.
void solve(Real a[kMaxDegree + 1][kMaxDegree + 2], int m, Real* x) {
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

// Least squares weighted by w^2 times `lawson` (if given) for the coefficients j0..degree of
// p(u) = sum c_j u^j, the ones below j0 fixed.
void least_squares(int degree, const Real* u, const Real* y, const Real* w, const Real* lawson, int j0, const Real* fixed, Real* out) {
    const int m = degree - j0 + 1;
    Real a[kMaxDegree + 1][kMaxDegree + 2] = {};
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

// Also returns the fit's largest relative error on the nodes (before rounding to float it is
// the approximation's, after it the table's).
Real fit_interval(const Table& table, int k, float* coefficients) {
    const int degree = table.degree;
    const Real c = expansion_point(k);
    // Slightly below the interval: t + 1 can round t into the next interval by one ulp of s.
    const Real lo = interval_start(k) - c - interval_width(k) * 1e-6L;
    const Real hi = (k == table.intervals - 1 ? table.t_max : interval_start(k) + interval_width(k)) - c;
    Real u[kNodes], y[kNodes], w[kNodes], lawson[kNodes];
    for (int i = 0; i < kNodes; ++i) {
        u[i] = (lo + hi) / 2 + (hi - lo) / 2 * cosl(kPi * (i + 0.5L) / kNodes);
        y[i] = table.f(c + u[i]);
        w[i] = 1.0L / y[i];
        lawson[i] = 1.0L;
    }
    for (int step = 0; step < 10; ++step) {
        Real p[kMaxDegree + 1];
        least_squares(degree, u, y, w, lawson, 0, nullptr, p);
        Real total = 0;
        for (int i = 0; i < kNodes; ++i) {
            Real v = 0;
            for (int j = degree; j >= 0; --j) v = v * u[i] + p[j];
            lawson[i] *= fabsl((v - y[i]) * w[i]);
            total += lawson[i];
        }
        for (int i = 0; i < kNodes; ++i) lawson[i] = lawson[i] / total * kNodes;
    }
    for (int i = 0; i < kNodes; ++i) w[i] *= sqrtl(lawson[i]);
    Real fixed[kMaxDegree + 1] = {};
    for (int j0 = 0; j0 <= degree; ++j0) {
        Real rest[kMaxDegree + 1];
        least_squares(degree, u, y, w, nullptr, j0, fixed, rest);
        fixed[j0] = (float)rest[0];
    }
    Real worst = 0;
    for (int i = 0; i < kNodes; ++i) {
        Real v = 0;
        for (int j = degree; j >= 0; --j) v = v * u[i] + fixed[j];
        worst = std::max(worst, fabsl(v - y[i]) / y[i]);
    }
    for (int j = 0; j <= degree; ++j) coefficients[j] = (float)fixed[j];
    return worst;
}

// rows[j][entry]: coefficient j of every entry, as kLookupTables holds them. Entries no
// interval uses repeat the last interval.
Real fit_table(const Table& table, float rows[kMaxDegree + 1][16]) {
    float coefficients[16][kMaxDegree + 1];
    Real worst = 0;
    for (int k = 0; k < table.intervals; ++k) worst = std::max(worst, fit_interval(table, k, coefficients[k]));
    for (int entry = 0; entry < 16; ++entry) {
        int k = table.intervals - 1;
        for (int i = 0; i < table.intervals; ++i)
            if (table_entry(i) == entry) k = i;
        for (int j = 0; j <= table.degree; ++j) rows[j][entry] = coefficients[k][j];
    }
    return worst;
}

// The interpreter's op (the oracle every JIT target is compared with bit for bit) over every
// stride-th float of the table's range; the largest error in ulp, measured as the tests
// measure it.
double sweep(const Table& table, uint32_t stride, bool fma) {
    uint32_t lo, hi;
    std::memcpy(&lo, &table.sweep_lo, 4);
    std::memcpy(&hi, &table.sweep_hi, 4);
    const uint32_t chunk = 1u << 20;
    std::vector<float> in(chunk), out(chunk);
    Arena arena;
    SnippetBody body(&arena);
    ValueId x, y;
    int64_t shape[] = {(int64_t)chunk};
    if (body.parameter(shape, &x) != Status::Ok || body.unary(table.op, x, &y) != Status::Ok || body.result(y) != Status::Ok) return 1e30;
    Snippet snippet;
    SnippetOptions options;
    options.isa = Isa::Ref;
    options.tuning.reference_fma = fma;
    if (snippet.compile(body, options) != Status::Ok) return 1e30;
    double worst = 0;
    for (int side = 0; side < (table.negative ? 2 : 1); ++side) {
        const uint32_t sign = side ? 0x80000000u : 0u;
        uint64_t bits = lo;
        while (bits <= hi) {
            uint32_t n = 0;
            for (; n < chunk && bits <= hi; ++n, bits += stride) {
                const uint32_t b = (uint32_t)bits | sign;
                std::memcpy(&in[n], &b, 4);
            }
            for (uint32_t i = n; i < chunk; ++i) in[i] = 1.0f;
            const float* ins[] = {in.data()};
            float* outs[] = {out.data()};
            if (snippet.run(ins, outs) != Status::Ok) return 1e30;
            for (uint32_t i = 0; i < n; ++i)
                worst = std::max(worst, reference_math::ulp_error(out[i], (double)table.reference((Real)in[i])));
        }
    }
    return worst;
}

}  // namespace

int main(int argc, char** argv) {
    const bool check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
    const uint32_t stride = check ? 4099u : argc > 1 ? (uint32_t)std::strtoul(argv[1], nullptr, 10) : 1u;
    if (stride == 0) { std::printf("usage: fit_tables [STRIDE >= 1 | --check]\n"); return 2; }
    bool ok = true;
    for (const Table& table : kTables) {
        float rows[kMaxDegree + 1][16];
        const Real fit_error = fit_table(table, rows);
        int mismatches = 0;
        for (int j = 0; j <= table.degree; ++j)
            for (int e = 0; e < 16; ++e)
                if (std::memcmp(&rows[j][e], &detail::kLookupTables[table.c0 + j][e], 4) != 0) {
                    if (check)
                        std::printf("kLookupTables[%s row %d][%d] = %a, the fit gives %a\n", table.name, j, e,
                                    (double)detail::kLookupTables[table.c0 + j][e], (double)rows[j][e]);
                    ++mismatches;
                }
        if (!check)
            for (int j = 0; j <= table.degree; ++j) {
                std::printf("    {");
                for (int e = 0; e < 16; ++e) std::printf("%af%s", (double)rows[j][e], e < 15 ? ", " : "},\n");
            }
        const double with_fma = sweep(table, stride, true), without = sweep(table, stride, false);
        const uint32_t bound_fma = snippet_op_ulp_bound(table.op, true), bound = snippet_op_ulp_bound(table.op, false);
        std::printf("%s: table %s (fit error %.3g relative); every %u-th float of %s[%g, %g]: %.3f ulp with FMA (bound %u), %.3f without (bound %u)\n",
                    table.name, mismatches ? "differs from the fit" : "equals the fit", (double)fit_error, stride,
                    table.negative ? "+-" : "", (double)table.sweep_lo, (double)table.sweep_hi, with_fma, bound_fma, without, bound);
        ok = ok && mismatches == 0 && with_fma <= bound_fma && without <= bound;
    }
    return check && !ok ? 1 : 0;
}
