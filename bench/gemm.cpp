// GEMM throughput: one tile's worth of snippets.h's Gemm repeated (the rate its blocking is
// bounded by), then M = N = K = 256, 512, 1024 (both operands packed at
// run time, and B packed once beforehand as for constant weights), then MatMul through the
// CPU device (B a constant), at 1 and 2 threads, in GFLOP/s and as a share of the FMA peak
// measured by an FMA-throughput loop in the same run. Each figure is the best of many runs;
// on a shared machine the last column (one thread: flops per second of the thread's own CPU
// time) leaves out the time other processes held the core.
//   build/bench/gemm [ISA]        (ISA: ref, sse41, avx2, avx512; default as TESSEL_ISA)
#define TESSEL_IMPLEMENTATION
#include "runtime.h"
#include "bench_util.h"

#include <time.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace tessel;
using bench::fma_peak;
using bench::fma_peak_together;
using bench::seconds_since;

namespace {
double thread_cpu_seconds() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Best time of `runs` runs of f(), in seconds; `cpu` (if given) the best of the calling
// thread's CPU time, which leaves out the time other processes held the core.
template <class F>
double best_seconds(int runs, F&& f, double* cpu = nullptr) {
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r < runs; ++r) {
        auto start = std::chrono::steady_clock::now();
        double cpu_start = thread_cpu_seconds();
        f();
        best_cpu = std::min(best_cpu, thread_cpu_seconds() - cpu_start);
        best = std::min(best, seconds_since(start));
    }
    if (cpu) *cpu = best_cpu;
    return best;
}

double gemm_gflops(const Gemm& gemm, int64_t s, uint32_t threads, bool prepack, double* cpu_gflops = nullptr) {
    std::vector<float> a((size_t)(s * s), 0.5f), b((size_t)(s * s), 0.25f), c((size_t)(s * s)), storage;
    GemmOperand oa, ob;
    oa.data = a.data(); oa.row = s; oa.col = 1;
    ob.data = b.data(); ob.row = s; ob.col = 1;
    if (prepack) {
        float* packed = bench::aligned_floats(storage, gemm.packed_b_floats(s, s));
        gemm.pack_b(s, s, b.data(), s, 1, packed);
        ob.data = packed;
        ob.packed = true;
    }
    size_t slice = gemm.scratch_floats(s, s, s, false, prepack);
    std::vector<float> scratch(slice * threads);
    auto once = [&] {
        if (threads == 1) { gemm.run(s, s, s, 1.0f, oa, ob, 0.0f, c.data(), s, scratch.data()); return; }
        std::vector<std::thread> pool;
        for (uint32_t t = 0; t < threads; ++t)
            pool.emplace_back([&, t] { gemm.run(s, s, s, 1.0f, oa, ob, 0.0f, c.data(), s, scratch.data() + t * slice, t, threads); });
        for (std::thread& th : pool) th.join();
    };
    once();
    int runs = s <= 256 ? 200 : s <= 512 ? 60 : 20;
    double cpu = 0, wall = best_seconds(runs, once, &cpu);
    if (cpu_gflops) *cpu_gflops = 2.0 * (double)s * s * s / cpu * 1e-9;
    return 2.0 * (double)s * s * s / wall * 1e-9;
}

// One tile's worth (M = mr, N = nr, K = kc, both operands packed) run over and over: the tile's
// K loop on panels that stay in L1 and L2, what the blocked GEMM's rate is bounded by.
double tile_gflops(const Gemm& gemm) {
    const GemmBlocking& bl = gemm.blocking();
    const int64_t m = bl.mr, n = bl.nr, k = bl.kc;
    std::vector<float> a((size_t)(m * k), 0.5f), b((size_t)(k * n), 0.25f), c((size_t)(m * n));
    std::vector<float> a_storage, b_storage, scratch(gemm.scratch_floats(m, n, k, true, true));
    float* pa = bench::aligned_floats(a_storage, gemm.packed_a_floats(m, k));
    float* pb = bench::aligned_floats(b_storage, gemm.packed_b_floats(k, n));
    gemm.pack_a(m, k, a.data(), k, 1, pa);
    gemm.pack_b(k, n, b.data(), n, 1, pb);
    GemmOperand oa, ob;
    oa.data = pa;
    oa.packed = true;
    ob.data = pb;
    ob.packed = true;
    const int reps = 200;
    const double t = best_seconds(20, [&] {
        for (int r = 0; r < reps; ++r) gemm.run(m, n, k, 1.0f, oa, ob, 0.0f, c.data(), n, scratch.data());
    });
    return 2.0 * (double)(m * n * k) * reps / t * 1e-9;
}

// MatMul [s x s] x constant [s x s] on the CPU device.
double matmul_gflops(int64_t s, uint32_t threads, const char* isa) {
    Model model;
    NodeId x, w, y;
    TensorDesc d;
    d.type = ElementType::Float32;
    d.rank = 2;
    d.dims[0] = s;
    d.dims[1] = s;
    std::vector<float> weights((size_t)(s * s), 0.25f);
    if (model.add_input("x", d, &x) != Status::Ok || model.add_constant("w", d, weights.data(), &w) != Status::Ok) return 0;
    InputRef in[] = {InputRef::by_id(x), InputRef::by_id(w)};
    if (model.add_node("MatMul", "mm", in, 1, &y) != Status::Ok || model.add_output("y", InputRef::by_id(y)) != Status::Ok ||
        model.finalize() != Status::Ok)
        return 0;
    Core core;
    CompiledModel compiled;
    std::string t = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(t.c_str())}, {"ISA", StringView(isa)}};
    if (core.compile_model(model, "CPU", config, &compiled) != Status::Ok) { std::fprintf(stderr, "%s\n", core.last_error()); return 0; }
    InferRequest request;
    if (compiled.create_request(&request) != Status::Ok) return 0;
    std::fill(request.input(0).data_as<float>(), request.input(0).data_as<float>() + s * s, 0.5f);
    if (request.infer() != Status::Ok) return 0;
    int runs = s <= 256 ? 200 : s <= 512 ? 60 : 20;
    return 2.0 * (double)s * s * s / best_seconds(runs, [&] { (void)request.infer(); }) * 1e-9;
}
}  // namespace

int main(int argc, char** argv) {
    Isa isa = default_isa();
    if (argc > 1 && (parse_isa(StringView(argv[1]), &isa) != Status::Ok || !isa_available(isa))) {
        std::fprintf(stderr, "usage: gemm [ref|sse41|avx2|avx512]\n");
        return 2;
    }
    Gemm gemm;
    if (gemm.init(isa) != Status::Ok) { std::fprintf(stderr, "gemm: %s unavailable\n", isa_name(isa)); return 1; }
    const GemmBlocking& b = gemm.blocking();
    CacheSizes caches = cpu_cache_sizes();
    double peak = fma_peak(isa);
    std::printf("gemm on %s (%s tiles %u x %u; kc %lld, mc %lld, nc %lld; caches %llu K / %llu K / %llu K)\n", isa_name(isa),
                gemm.jit() ? "JIT" : "portable", b.mr, b.nr, (long long)b.kc, (long long)b.mc, (long long)b.nc,
                (unsigned long long)(caches.l1d >> 10), (unsigned long long)(caches.l2 >> 10), (unsigned long long)(caches.l3 >> 10));
    std::printf("FMA peak, one thread: %.1f GFLOP/s; two threads at once: %.1f GFLOP/s together\n", peak,
                fma_peak_together(isa, 2));
    const double tile = tile_gflops(gemm);
    std::printf("one tile (M %u, N %u, K %lld, both packed) over and over: %.1f GFLOP/s, %.2f of the peak\n", b.mr, b.nr,
                (long long)b.kc, tile, peak > 0 ? tile / peak : 0);
    std::printf("%6s %8s %14s %8s %14s %8s %14s %8s %16s %8s\n", "size", "threads", "Gemm GFLOP/s", "/peak", "B packed", "/peak",
                "MatMul (CPU)", "/peak", "GFLOP/CPU-s", "/peak");
    for (int64_t s : {256, 512, 1024})
        for (uint32_t threads : {1u, 2u}) {
            double cpu = 0, g = gemm_gflops(gemm, s, threads, false, &cpu), gp = gemm_gflops(gemm, s, threads, true);
            double mm = matmul_gflops(s, threads, isa_name(isa));
            double p = peak > 0 ? peak * threads : 0;
            std::printf("%6lld %8u %14.1f %8.2f %14.1f %8.2f %14.1f %8.2f", (long long)s, threads, g, p ? g / p : 0, gp,
                        p ? gp / p : 0, mm, p ? mm / p : 0);
            if (threads == 1) std::printf(" %16.1f %8.2f", cpu, peak ? cpu / peak : 0);
            std::printf("\n");
        }
    return 0;
}
