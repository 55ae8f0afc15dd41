// Conv on the JIT GEMM, one thread, per shape class of the real models (OCR detector, ResNet-50,
// SqueezeNet): the time of the im2col packing alone, of the GEMM alone (B already packed) and
// of both as the CPU device runs them, in GFLOP/s and as a share of the FMA peak measured in
// the same run (best of many runs: other processes share the cores).
//   build/bench/conv [ISA]        (ISA: avx2, avx512, neon; default as TESSEL_ISA)
#define TESSEL_IMPLEMENTATION
#include "runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace tessel;
using namespace tessel::detail;

namespace {
double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) double fma_peak_avx512(long iterations) {
    __m512 acc[12], x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps((float)i);
    double start = now_seconds();
    for (long it = 0; it < iterations; ++it)
        for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    double s = now_seconds() - start;
    float lanes[16], sink = 0;
    for (int i = 0; i < 12; ++i) { _mm512_storeu_ps(lanes, acc[i]); sink += lanes[0]; }
    if (sink == 12345.0f) std::printf(" ");
    return (double)iterations * 12 * 16 * 2 / s * 1e-9;
}
__attribute__((target("avx2,fma"))) double fma_peak_avx2(long iterations) {
    __m256 acc[12], x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps((float)i);
    double start = now_seconds();
    for (long it = 0; it < iterations; ++it)
        for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    double s = now_seconds() - start;
    float lanes[8], sink = 0;
    for (int i = 0; i < 12; ++i) { _mm256_storeu_ps(lanes, acc[i]); sink += lanes[0]; }
    if (sink == 12345.0f) std::printf(" ");
    return (double)iterations * 12 * 8 * 2 / s * 1e-9;
}
#endif

double fma_peak(Isa isa) {
    double best = 0;
    for (int run = 0; run < 50; ++run) {
#if defined(__x86_64__)
        if (isa == Isa::Avx512) best = std::max(best, fma_peak_avx512(200000));
        else if (isa == Isa::Avx2) best = std::max(best, fma_peak_avx2(200000));
#endif
    }
    return best;
}

struct Shape { const char* name; int64_t cin, cout, h, w, k, stride, pad; };

template <typename F> double best_seconds(F f) {
    double best = 1e30;
    for (int run = 0; run < 30; ++run) {
        double start = now_seconds();
        f();
        best = std::min(best, now_seconds() - start);
    }
    return best;
}
}  // namespace

int main(int argc, char** argv) {
    Isa isa = default_isa();
    if (argc > 1 && (parse_isa(StringView(argv[1]), &isa) != Status::Ok || !isa_available(isa))) {
        std::fprintf(stderr, "bench/conv: unknown or unavailable ISA %s\n", argv[1]);
        return 2;
    }
    Gemm gemm;
    if (gemm.init(isa) != Status::Ok || !gemm.jit()) {
        std::fprintf(stderr, "bench/conv: no JIT GEMM tiles for %s\n", isa_name(isa));
        return 2;
    }
    const double peak = fma_peak(isa);
    std::printf("isa=%s fma_peak=%.1f GFLOP/s (one thread)\n", isa_name(isa), peak);
    std::printf("%-22s %8s %8s %8s %8s %8s %6s\n", "conv", "MFLOP", "im2col", "gemm", "total", "GFLOP/s", "peak");
    const Shape shapes[] = {
        {"det 96->24 3x3 40^2", 96, 24, 40, 40, 3, 1, 1},    {"det 3->16 3x3/2 160^2", 3, 16, 160, 160, 3, 2, 1},
        {"det 16->64 1x1 80^2", 16, 64, 80, 80, 1, 1, 0},    {"squeeze 3->64 3x3/2", 3, 64, 224, 224, 3, 2, 0},
        {"r50 64->64 3x3 56^2", 64, 64, 56, 56, 3, 1, 1},    {"r50 256->64 1x1 56^2", 256, 64, 56, 56, 1, 1, 0},
        {"r50 128->128 3x3 28^2", 128, 128, 28, 28, 3, 1, 1}, {"r50 512->2048 1x1 7^2", 512, 2048, 7, 7, 1, 1, 0},
    };
    for (const Shape& s : shapes) {
        Window w{};
        w.spatial = 2;
        int64_t in[3] = {1, s.h, s.w};
        for (int i = 0; i < 3; ++i) {
            w.in[i] = in[i];
            w.kernel[i] = i ? s.k : 1;
            w.stride[i] = i ? s.stride : 1;
            w.dilation[i] = 1;
            w.pad_begin[i] = w.pad_end[i] = i ? s.pad : 0;
            w.out[i] = (w.in[i] + 2 * w.pad_begin[i] - w.kernel[i]) / w.stride[i] + 1;
        }
        const int64_t depth = s.cin * s.k * s.k, positions = w.out_size();
        std::vector<float> x((size_t)(s.cin * w.in_size()), 0.5f), weights((size_t)(s.cout * depth), 0.25f);
        std::vector<float> y((size_t)(s.cout * positions));
        std::vector<float> packed_a(gemm.packed_a_floats(s.cout, depth) + 16);
        gemm.pack_a(s.cout, depth, weights.data(), depth, 1, packed_a.data());
        std::vector<float> col(gemm.packed_b_floats(depth, positions) + 16);
        std::vector<float> scratch(gemm.scratch_floats(s.cout, positions, depth, true, true) + 16);
        GemmOperand a, b;
        a.data = packed_a.data();
        a.packed = true;
        b.data = col.data();
        b.packed = true;
        auto pack = [&] { im2col_packed(w, s.cin, x.data(), 0, positions, gemm.blocking(), col.data()); };
        auto multiply = [&] { gemm.run(s.cout, positions, depth, 1.0f, a, b, 0.0f, y.data(), positions, scratch.data()); };
        const double t_pack = best_seconds(pack), t_gemm = best_seconds(multiply);
        const double t_total = best_seconds([&] { pack(); multiply(); });
        const double flops = 2.0 * (double)s.cout * (double)depth * (double)positions;
        std::printf("%-22s %8.1f %8.1f %8.1f %8.1f %8.1f %6.2f\n", s.name, flops * 1e-6, t_pack * 1e6, t_gemm * 1e6,
                    t_total * 1e6, flops / t_total * 1e-9, flops / t_total * 1e-9 / peak);
    }
    return 0;
}
