// Double-precision references of the approximated snippet ops and the ULP distance of a
// float result from them. Shared by the accuracy tests and bench/snippets, so the bounds the
// tests assert and the figures the bench publishes are measured the same way.
#pragma once
#include <algorithm>
#include <cmath>
#include "snippets.h"

namespace reference_math {

inline double reference(tessel::SnippetOp op, double x) {
    using tessel::SnippetOp;
    switch (op) {
        case SnippetOp::Exp: return std::exp(x);
        case SnippetOp::Log: return std::log(x);
        case SnippetOp::Tanh: return std::tanh(x);
        case SnippetOp::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
        case SnippetOp::Erf: return std::erf(x);
        case SnippetOp::GeluErf: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
        case SnippetOp::GeluTanh: {
            double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
            return x / (1.0 + std::exp(-2.0 * u));  // = x/2 (1 + tanh u) without cancellation
        }
        case SnippetOp::Swish: return x / (1.0 + std::exp(-x));
        case SnippetOp::Softplus: return std::log1p(std::exp(x));
        case SnippetOp::Mish: return x * std::tanh(std::log1p(std::exp(x)));
        case SnippetOp::Elu: return x > 0 ? x : std::expm1(x);
        case SnippetOp::Selu: return 1.05070102214813232421875 * (x > 0 ? x : 1.67326319217681884765625 * std::expm1(x));
        case SnippetOp::HardSwish: return x * std::fmax(0.0, std::fmin(1.0, x / 6.0 + 0.5));
        case SnippetOp::HardSigmoid: return std::fmax(0.0, std::fmin(1.0, (double)0.2f * x + 0.5));
        case SnippetOp::Softsign: return x / (1.0 + std::fabs(x));
        default: return 0;
    }
}

// Distance in units of the float ulp at `want` (denormal spacing below FLT_MIN).
inline double ulp_error(float got, double want) {
    if (std::isnan(want)) return std::isnan(got) ? 0 : 1e30;
    if (std::fabs(want) > 3.4028234663852886e38) return (std::isinf(got) && (got > 0) == (want > 0)) ? 0 : 1e30;
    if (std::isnan(got) || std::isinf(got)) return 1e30;
    int e;
    std::frexp(want, &e);
    double ulp = std::ldexp(1.0, std::max(e - 24, -149));
    return std::fabs((double)got - want) / ulp;
}

}  // namespace reference_math
