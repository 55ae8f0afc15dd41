// What the bench programs share: timing, the median, and the FMA-throughput loop that GEMM
// and Conv figures are divided by. Include after runtime.h.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace bench {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// 12 independent FMA chains (more than latency x ports on current cores): GFLOP/s of one thread.
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) inline double fma_loop_avx2(long iterations) {
    __m256 acc[12], x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps((float)i);
    auto start = std::chrono::steady_clock::now();
    for (long it = 0; it < iterations; ++it)
        for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    double s = seconds_since(start);
    float lanes[8], sink = 0;
    for (int i = 0; i < 12; ++i) { _mm256_storeu_ps(lanes, acc[i]); sink += lanes[0]; }
    if (sink == 12345.0f) std::printf(" ");
    return (double)iterations * 12 * 8 * 2 / s * 1e-9;
}
__attribute__((target("avx512f"))) inline double fma_loop_avx512(long iterations) {
    __m512 acc[12], x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps((float)i);
    auto start = std::chrono::steady_clock::now();
    for (long it = 0; it < iterations; ++it)
        for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    double s = seconds_since(start);
    float lanes[16], sink = 0;
    for (int i = 0; i < 12; ++i) { _mm512_storeu_ps(lanes, acc[i]); sink += lanes[0]; }
    if (sink == 12345.0f) std::printf(" ");
    return (double)iterations * 12 * 16 * 2 / s * 1e-9;
}
#endif

inline double fma_loop(tessel::Isa isa, long iterations) {
#if defined(__x86_64__)
    if (isa == tessel::Isa::Avx512) return fma_loop_avx512(iterations);
    if (isa == tessel::Isa::Avx2) return fma_loop_avx2(iterations);
#endif
    (void)isa;
    (void)iterations;
    return 0;
}

// The peak of one thread: the best of 100 short runs (other processes share the cores). 0 where
// the ISA has no FMA loop here (ref, sse41, NEON).
inline double fma_peak(tessel::Isa isa) {
    double best = 0;
    for (int run = 0; run < 100; ++run) best = std::max(best, fma_loop(isa, 200000));
    return best;
}

// n floats at a 64-byte boundary inside `storage`, as the runtime's arenas place packed operands
// (a vector's own 16-byte alignment makes every other vector load of a panel split a cache line).
inline float* aligned_floats(std::vector<float>& storage, size_t n) {
    storage.assign(n + 16, 0.0f);
    return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~(uintptr_t)63);
}

// The loop on `threads` threads at once, timed from the start of all to the end of the last
// (best of 20): whether the threads really run side by side at full speed (on a shared
// machine they often do not, and two-thread figures mean little then).
inline double fma_peak_together(tessel::Isa isa, uint32_t threads) {
    double best = 0;
    for (int run = 0; run < 20; ++run) {
        std::vector<std::thread> pool;
        auto start = std::chrono::steady_clock::now();
        for (uint32_t t = 0; t < threads; ++t) pool.emplace_back([isa] { fma_loop(isa, 400000); });
        for (std::thread& th : pool) th.join();
        double flops = (double)threads * 400000 * 12 * tessel::isa_vector_floats(isa) * 2;
        best = std::max(best, flops / seconds_since(start) * 1e-9);
    }
    return fma_loop(isa, 1) > 0 ? best : 0;
}

// What a cache line costs to write when another core has read it, against one the writer
// owns: ns per 64-byte line, the best of 200 rounds over 128 KiB, threads on the first two CPUs
// the process may use. Two threads' figures depend on it: a host that places the two vCPUs
// far apart makes each such write wait for the other core (10x or more), and then a step
// whose threads did not write the lines they later rewrite pays for every line.
struct LineCosts { double own_ns = 0, shared_ns = 0; };
inline LineCosts cross_core_line_costs() {
    LineCosts costs;
#if defined(__linux__)
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return costs;
    int cpus[2], found = 0;
    for (int c = 0; c < CPU_SETSIZE && found < 2; ++c)
        if (CPU_ISSET(c, &allowed)) cpus[found++] = c;
    if (found < 2) return costs;
    auto pin = [](int cpu) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    };
    const size_t lines = 2048;
    std::vector<uint64_t> buffer(lines * 8);
    std::atomic<int> turn{0};   // odd: the reader's turn
    std::atomic<uint64_t> sink{0};
    const int rounds = 200;
    std::thread reader([&] {
        pin(cpus[1]);
        for (int r = 0; r < rounds; ++r) {
            while (turn.load() != 2 * r + 1) {}
            uint64_t sum = 0;
            for (size_t i = 0; i < lines; ++i) sum += buffer[i * 8];
            sink += sum;
            turn.store(2 * r + 2);
        }
    });
    pin(cpus[0]);
    auto write_all = [&](uint64_t value) {
        auto start = std::chrono::steady_clock::now();
        for (size_t i = 0; i < lines; ++i) buffer[i * 8] = value;
        return seconds_since(start) * 1e9 / (double)lines;
    };
    double own = 1e30, shared = 1e30;
    for (int r = 0; r < rounds; ++r) {
        turn.store(2 * r + 1);
        while (turn.load() != 2 * r + 2) {}
        shared = std::min(shared, write_all((uint64_t)r));   // the reader holds every line
        own = std::min(own, write_all((uint64_t)r + 1));     // now only this core does
    }
    reader.join();
    pthread_setaffinity_np(pthread_self(), sizeof allowed, &allowed);
    costs.own_ns = own;
    costs.shared_ns = shared;
#endif
    return costs;
}

}  // namespace bench
