// Fused elementwise kernels against baselines measured in the same run, one thread:
// memcpy bandwidth, a triad loop, the unfused path (one JIT kernel per operation, every
// intermediate written to memory), and the same expression as a compiled C++ loop (this file
// is built with -O3 -march=native). Prints ratios, compile times (median and worst of five compiles) and the max ULP error of
// each approximation over a dense sweep. Beyond the caches each pattern's memcpy (last column)
// is timed alternately with it, and so is the pattern's data movement alone ("limit": its
// full-size inputs summed into its output with non-temporal stores); "in place" runs the
// kernel over its first input, as the runtime does when that input dies there. No
// assertions: tests live in test/.
//
//   make build/bench/snippets && build/bench/snippets        (TESSEL_ISA selects the target)
#define TESSEL_IMPLEMENTATION
#include "snippets.h"
#include "test/reference_math.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <sys/resource.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

using namespace tessel;

namespace {

double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best time of repeated runs: at least 3 runs or 0.15 s, at most 50 runs.
template <class F>
double best_time(F&& f) {
    double best = 1e30, start = now();
    for (int rep = 0; rep < 50; ++rep) {
        double t0 = now();
        f();
        double t = now() - t0;
        best = std::min(best, t);
        if (rep >= 2 && now() - start > 0.15) break;
        if (rep >= 1 && t > 0.05) break;  // large sizes: two runs are enough
    }
    return best;
}

// 64-byte aligned storage (as a runtime's memory plan gives), filled by a cheap hash (values
// in [-4, 4)): big sizes stay quick.
struct AlignedFree {
    void operator()(float* p) const { std::free(p); }
};
float* aligned_floats(size_t n) {
    return static_cast<float*>(std::aligned_alloc(64, ((n + 1) * sizeof(float) + 63) / 64 * 64));
}
struct Buffer {
    std::unique_ptr<float[], AlignedFree> data;
    explicit Buffer(size_t n, float seed = 0.37f) : data(aligned_floats(n)) {
        uint32_t h = (uint32_t)(seed * 1e6f);
        for (size_t i = 0; i < n; ++i) {
            h = h * 1664525u + 1013904223u;
            data[i] = (float)(h >> 8) * (8.0f / 16777216.0f) - 4.0f;
        }
    }
    float* get() { return data.get(); }
};

// A pattern: a body over n floats (with its parameter shapes), and the same computation as a
// plain C++ loop.
struct Pattern {
    const char* name;
    void (*build)(SnippetBody& body, int64_t n);
    void (*loop)(float* const* in, float* out, int64_t n);
    int64_t max_n = 0;   // largest size it runs at (0: every size)
};

ValueId param(SnippetBody& b, std::vector<int64_t> shape) {
    ValueId v;
    if (b.parameter(Span<const int64_t>(shape.data(), shape.size()), &v) != Status::Ok) std::abort();
    return v;
}
ValueId scalar(SnippetBody& b, float value) {
    ValueId v;
    if (b.scalar(value, &v) != Status::Ok) std::abort();
    return v;
}
ValueId op(SnippetBody& b, SnippetOp o, ValueId x) {
    ValueId v;
    if (b.unary(o, x, &v) != Status::Ok) std::abort();
    return v;
}
ValueId op(SnippetBody& b, SnippetOp o, ValueId x, ValueId y) {
    ValueId v;
    if (b.binary(o, x, y, &v) != Status::Ok) std::abort();
    return v;
}
void result(SnippetBody& b, ValueId v) {
    if (b.result(v) != Status::Ok) std::abort();
}

constexpr int64_t kChannels = 64;   // x*w+b, Relu: NCHW with per-channel w, b
constexpr int64_t kHidden = 768;    // layer-norm tail: rows of 768

const Pattern patterns[] = {
    {"GELU(erf)",
     [](SnippetBody& b, int64_t n) {
         ValueId x = param(b, {n});
         ValueId t = op(b, SnippetOp::Mul, x, scalar(b, 0.70710678f));
         t = op(b, SnippetOp::Erf, t);
         t = op(b, SnippetOp::Add, t, scalar(b, 1.0f));
         t = op(b, SnippetOp::Mul, t, x);
         result(b, op(b, SnippetOp::Mul, t, scalar(b, 0.5f)));
     },
     [](float* const* in, float* out, int64_t n) {
         const float* x = in[0];
         for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678f));
     }},
    {"GELU(tanh)",
     [](SnippetBody& b, int64_t n) {
         ValueId x = param(b, {n});
         ValueId x3 = op(b, SnippetOp::Mul, op(b, SnippetOp::Mul, x, x), x);
         ValueId t = op(b, SnippetOp::Add, op(b, SnippetOp::Mul, x3, scalar(b, 0.044715f)), x);
         t = op(b, SnippetOp::Tanh, op(b, SnippetOp::Mul, t, scalar(b, 0.7978845608f)));
         t = op(b, SnippetOp::Mul, op(b, SnippetOp::Add, t, scalar(b, 1.0f)), x);
         result(b, op(b, SnippetOp::Mul, t, scalar(b, 0.5f)));
     },
     [](float* const* in, float* out, int64_t n) {
         const float* x = in[0];
         for (int64_t i = 0; i < n; ++i) {
             float v = x[i];
             out[i] = 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
         }
     }},
    {"GELU(erf) op",   // the single GeluErf op (ONNX Gelu), accurate to 4 ulp down to denormals
     [](SnippetBody& b, int64_t n) { result(b, op(b, SnippetOp::GeluErf, param(b, {n}))); },
     [](float* const* in, float* out, int64_t n) {
         const float* x = in[0];
         for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * x[i] * std::erfc(-x[i] * 0.70710678f);
     }},
    {"GELU(tanh) op",  // the single GeluTanh op (ONNX Gelu approximate="tanh")
     [](SnippetBody& b, int64_t n) { result(b, op(b, SnippetOp::GeluTanh, param(b, {n}))); },
     [](float* const* in, float* out, int64_t n) {
         const float* x = in[0];
         for (int64_t i = 0; i < n; ++i) {
             float v = x[i];
             out[i] = v / (1.0f + std::exp(-1.5957691216f * (v + 0.044715f * v * v * v)));
         }
     }},
    {"Swish",
     [](SnippetBody& b, int64_t n) {
         ValueId x = param(b, {n});
         result(b, op(b, SnippetOp::Mul, x, op(b, SnippetOp::Sigmoid, x)));
     },
     [](float* const* in, float* out, int64_t n) {
         const float* x = in[0];
         for (int64_t i = 0; i < n; ++i) out[i] = x[i] / (1.0f + std::exp(-x[i]));
     }},
    {"HardSwish",
     [](SnippetBody& b, int64_t n) {
         ValueId x = param(b, {n});
         ValueId t = op(b, SnippetOp::Add, x, scalar(b, 3.0f));
         ValueId c;
         if (b.unary(SnippetOp::Clip, t, 0.0f, 6.0f, &c) != Status::Ok) std::abort();
         t = op(b, SnippetOp::Mul, c, x);
         result(b, op(b, SnippetOp::Div, t, scalar(b, 6.0f)));
     },
     [](float* const* in, float* out, int64_t n) {
         const float* x = in[0];
         for (int64_t i = 0; i < n; ++i) out[i] = x[i] * std::min(std::max(x[i] + 3.0f, 0.0f), 6.0f) / 6.0f;
     }},
    {"Add+Mul+Clip+Div",
     [](SnippetBody& b, int64_t n) {
         ValueId a = param(b, {n}), x = param(b, {n}), c = param(b, {n}), d = param(b, {n});
         ValueId t = op(b, SnippetOp::Mul, op(b, SnippetOp::Add, a, x), c);
         ValueId k;
         if (b.unary(SnippetOp::Clip, t, -1.0f, 1.0f, &k) != Status::Ok) std::abort();
         result(b, op(b, SnippetOp::Div, k, d));
     },
     [](float* const* in, float* out, int64_t n) {
         const float *a = in[0], *x = in[1], *c = in[2], *d = in[3];
         for (int64_t i = 0; i < n; ++i) out[i] = std::min(std::max((a[i] + x[i]) * c[i], -1.0f), 1.0f) / d[i];
     }},
    {"x*w+b,Relu (per-channel)",
     [](SnippetBody& b, int64_t n) {
         ValueId x = param(b, {1, kChannels, n / kChannels});
         ValueId w = param(b, {1, kChannels, 1}), bias = param(b, {1, kChannels, 1});
         result(b, op(b, SnippetOp::Relu, op(b, SnippetOp::Add, op(b, SnippetOp::Mul, x, w), bias)));
     },
     [](float* const* in, float* out, int64_t n) {
         const float *x = in[0], *w = in[1], *bias = in[2];
         int64_t hw = n / kChannels;
         for (int64_t c = 0; c < kChannels; ++c)
             for (int64_t i = 0; i < hw; ++i) out[c * hw + i] = std::max(x[c * hw + i] * w[c] + bias[c], 0.0f);
     }},
    {"LayerNorm tail",
     [](SnippetBody& b, int64_t n) {
         int64_t rows = n / kHidden;
         ValueId x = param(b, {rows, kHidden}), mean = param(b, {rows, 1}), rstd = param(b, {rows, 1});
         ValueId gamma = param(b, {kHidden}), beta = param(b, {kHidden});
         ValueId t = op(b, SnippetOp::Mul, op(b, SnippetOp::Sub, x, mean), rstd);
         result(b, op(b, SnippetOp::Add, op(b, SnippetOp::Mul, t, gamma), beta));
     },
     [](float* const* in, float* out, int64_t n) {
         const float *x = in[0], *mean = in[1], *rstd = in[2], *gamma = in[3], *beta = in[4];
         int64_t rows = n / kHidden;
         for (int64_t r = 0; r < rows; ++r)
             for (int64_t j = 0; j < kHidden; ++j)
                 out[r * kHidden + j] = (x[r * kHidden + j] - mean[r]) * rstd[r] * gamma[j] + beta[j];
     }},
    // 14 inputs + 1 output: 5 argument pointers stay in the kernel's frame on x86 (cold; 4 on
    // NEON). Up to 4M floats: 14 inputs of 64M floats and the unfused intermediates would
    // take 7 GB.
    {"Add/Mul chain, 14 inputs",
     [](SnippetBody& b, int64_t n) {
         ValueId acc = param(b, {n});
         for (int i = 1; i < 14; ++i) acc = op(b, i % 2 ? SnippetOp::Add : SnippetOp::Mul, acc, param(b, {n}));
         result(b, acc);
     },
     [](float* const* in, float* out, int64_t n) {
         const float *a = in[0], *b = in[1], *c = in[2], *d = in[3], *e = in[4], *f = in[5], *g = in[6], *h = in[7],
                     *i = in[8], *j = in[9], *k = in[10], *l = in[11], *m = in[12], *o = in[13];
         // ivdep: past ~10 pointers GCC gives up the runtime alias checks and would not vectorize.
#pragma GCC ivdep
         for (int64_t t = 0; t < n; ++t)
             out[t] = ((((((a[t] + b[t]) * c[t] + d[t]) * e[t] + f[t]) * g[t] + h[t]) * i[t] + j[t]) * k[t] + l[t]) * m[t] + o[t];
     },
     4194304},
};

// The unfused path: one single-operation kernel per body instruction, each reading and writing
// memory, with a buffer per intermediate.
struct Unfused {
    std::vector<Arena*> arenas;
    std::vector<SnippetBody*> bodies;
    std::vector<Snippet*> kernels;
    std::vector<std::vector<int>> sources;   // per step: value ids of its tensor inputs
    std::vector<int> value_of_step;
    std::vector<float*> values;                 // per body value: its buffer (from the pool)
    ~Unfused() {
        for (Snippet* s : kernels) delete s;
        for (SnippetBody* b : bodies) delete b;
        for (Arena* a : arenas) delete a;
    }
    // Intermediate buffers come from `pool` (grown on demand, reused by every pattern of a
    // size, so large sizes do not pay page faults again and again).
    void build(const SnippetBody& body, Isa isa, KernelCache* cache, std::vector<std::unique_ptr<float[], AlignedFree>>* pool,
               size_t pool_floats) {
        values.assign(body.size(), nullptr);
        size_t used = 0;
        for (uint32_t i = 0; i < body.size(); ++i) {
            const SnippetInstruction& in = body.instruction(i);
            if (in.op == SnippetOp::Parameter || in.op == SnippetOp::Scalar) continue;
            Arena* arena = new Arena;
            SnippetBody* b = new SnippetBody(arena);
            std::vector<ValueId> args;
            std::vector<int> src;
            for (int a = 0; a < in.arity; ++a) {
                const SnippetInstruction& arg = body.instruction(in.args[a]);
                ValueId v;
                if (arg.op == SnippetOp::Scalar) {
                    (void)b->scalar(arg.alpha, &v);
                } else {
                    (void)b->parameter(Span<const int64_t>(arg.shape.dims, arg.shape.rank), &v);
                    src.push_back((int)in.args[a]);
                }
                args.push_back(v);
            }
            ValueId y;
            if (b->add(in.op, Span<const ValueId>(args.data(), args.size()), in.alpha, in.beta, &y) != Status::Ok ||
                b->result(y) != Status::Ok)
                std::abort();
            Snippet* s = new Snippet;
            SnippetOptions options;
            options.isa = isa;
            options.cache = cache;
            if (s->compile(*b, options) != Status::Ok) { std::printf("unfused compile: %s\n", s->last_error()); std::abort(); }
            if (used == pool->size()) pool->emplace_back(aligned_floats(pool_floats));
            values[i] = (*pool)[used++].get();
            arenas.push_back(arena);
            bodies.push_back(b);
            kernels.push_back(s);
            sources.push_back(src);
            value_of_step.push_back((int)i);
        }
    }
    void run(const std::vector<const float*>& params, const SnippetBody& body, float* out) {
        for (size_t k = 0; k < kernels.size(); ++k) {
            std::vector<const float*> in;
            for (int v : sources[k])
                in.push_back(body.instruction(v).op == SnippetOp::Parameter ? params[body.instruction(v).index] : values[v]);
            float* o = (k + 1 == kernels.size()) ? out : values[value_of_step[k]];
            float* outs[] = {o};
            if (kernels[k]->run(Span<const float* const>(in.data(), in.size()), Span<float* const>(outs, 1)) != Status::Ok) std::abort();
        }
    }
};

using reference_math::reference;
using reference_math::ulp_error;

// Compile time of a kernel: compiled five times without a cache (the last compile is the
// one kept), median and worst. One compile on this shared VM can take several times the
// median (page faults, preemption); the median is the kernel's own cost.
struct CompileTime { double median_us, worst_us; };
bool compile_timed(Snippet* kept, const SnippetBody& body, const SnippetOptions& options, CompileTime* time) {
    double us[5];
    for (int i = 0; i < 5; ++i) {
        Snippet scratch;
        Snippet* s = i == 4 ? kept : &scratch;
        if (s->compile(body, options) != Status::Ok) { std::printf("compile failed: %s\n", s->last_error()); return false; }
        us[i] = s->stats().compile_ns / 1000.0;
    }
    std::sort(us, us + 5);
    *time = CompileTime{us[2], us[4]};
    return true;
}

// First touches of fresh memory and code (minor page faults) so far in this process.
long minor_faults() {
    rusage usage;
    return getrusage(RUSAGE_SELF, &usage) == 0 ? usage.ru_minflt : 0;
}

// What one minor page fault costs on this machine: the first write to each of 64 fresh
// pages. A virtual machine may trap each one (11-24 us here, under 1 us on bare metal),
// which is most of a first compile.
double page_fault_us() {
    const size_t pages = 64, page = 4096;
    void* memory = mmap(nullptr, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return 0;
    volatile char* bytes = static_cast<char*>(memory);
    const double start = now();
    for (size_t i = 0; i < pages; ++i) bytes[i * page] = 1;
    const double us = (now() - start) * 1e6 / pages;
    munmap(memory, pages * page);
    return us;
}

// A pattern's data movement alone, done the way one core moves it best here: its full-size
// inputs read in vectors and summed (no load is dead), the sum written with non-temporal
// stores, as the kernels write beyond the caches. No kernel with those inputs and that output
// can be much faster. A body that reads more than it writes is bound by it below memcpy, since
// one core here reads less than it copies: on the Xeon of the README, a loop summing four
// streams into a fifth moved 80% of memcpy, whatever prefetch it was given (a one-off test).
// n: a multiple of 16, the buffers 64-byte aligned.
template <int K>
void stream_sum(const float* const* in, float* out, int64_t n) {
#if defined(__AVX512F__)
    for (int64_t i = 0; i < n; i += 16) {
        __m512 s = _mm512_load_ps(in[0] + i);
        for (int k = 1; k < K; ++k) s = _mm512_add_ps(s, _mm512_load_ps(in[k] + i));
        _mm512_stream_ps(out + i, s);
    }
#elif defined(__AVX__)
    for (int64_t i = 0; i < n; i += 8) {
        __m256 s = _mm256_load_ps(in[0] + i);
        for (int k = 1; k < K; ++k) s = _mm256_add_ps(s, _mm256_load_ps(in[k] + i));
        _mm256_stream_ps(out + i, s);
    }
#elif defined(__SSE2__)
    for (int64_t i = 0; i < n; i += 4) {
        __m128 s = _mm_load_ps(in[0] + i);
        for (int k = 1; k < K; ++k) s = _mm_add_ps(s, _mm_load_ps(in[k] + i));
        _mm_stream_ps(out + i, s);
    }
#else
    for (int64_t i = 0; i < n; ++i) {
        float s = in[0][i];
        for (int k = 1; k < K; ++k) s += in[k][i];
        out[i] = s;
    }
#endif
}
// Its time for `count` inputs (1 to 5; the patterns beyond the caches read at most 4).
double time_stream_sum(const float* const* in, int count, float* out, int64_t n) {
    switch (count) {
        case 1: return best_time([&] { stream_sum<1>(in, out, n); });
        case 2: return best_time([&] { stream_sum<2>(in, out, n); });
        case 3: return best_time([&] { stream_sum<3>(in, out, n); });
        case 4: return best_time([&] { stream_sum<4>(in, out, n); });
        case 5: return best_time([&] { stream_sum<5>(in, out, n); });
        default: return 0;
    }
}

// One row of a short-rows table: the kernel of `body` and its compiled loop, best of three
// alternating rounds each.
template <class Loop>
bool print_row_case(Isa isa, int64_t row, const SnippetBody& body, std::vector<const float*> ins, float* out, Loop&& loop) {
    Snippet kernel;
    SnippetOptions options;
    options.isa = isa;
    if (kernel.compile(body, options) != Status::Ok) { std::printf("compile failed: %s\n", kernel.last_error()); return false; }
    float* outs[] = {out};
    Span<const float* const> inputs(ins.data(), ins.size());
    double t_fused = 1e30, t_loop = 1e30;
    for (int round = 0; round < 3; ++round) {
        t_fused = std::min(t_fused, best_time([&] { (void)kernel.run(inputs, outs); }));
        t_loop = std::min(t_loop, best_time(loop));
    }
    std::printf("%8lld %6u %10.0f %10.0f %7.2fx\n", (long long)row, kernel.stats().lanes, t_fused * 1e9, t_loop * 1e9, t_loop / t_fused);
    return true;
}

}  // namespace

int main() {
    Isa isa = default_isa();
    std::printf("snippets bench: target %s (%u floats per vector), one thread\n", isa_name(isa), isa_vector_floats(isa));
    {   // The first kernel of a process also pays for the JIT runtime's setup: shown apart.
        Arena arena;
        SnippetBody body(&arena);
        ValueId x, y;
        int64_t shape[] = {16};
        if (body.parameter(shape, &x) != Status::Ok || body.unary(SnippetOp::Relu, x, &y) != Status::Ok || body.result(y) != Status::Ok) return 1;
        Snippet first;
        SnippetOptions options;
        options.isa = isa;
        const long faults_before = minor_faults();
        if (first.compile(body, options) != Status::Ok) return 1;
        const long faults = minor_faults() - faults_before;
        std::printf("first compile in this process (cold JIT runtime): %.1f us, %ld page faults (one costs %.1f us here)\n",
                    first.stats().compile_ns / 1000.0, faults, page_fault_us());
        // The fixed cost of one run() (the call, the kernel's entry and exit): what small
        // tensors pay on top of their bytes. Best of three batches of a million calls.
        alignas(64) float in[16] = {}, out[16];
        const float* ins[] = {in};
        float* outs[] = {out};
        double best = 1e30;
        for (int batch = 0; batch < 3; ++batch) {
            double t0 = now();
            for (int i = 0; i < 1000000; ++i) (void)first.run(ins, outs);
            best = std::min(best, now() - t0);
        }
        std::printf("run() on 16 floats: %.1f ns a call\n", best * 1e3);
    }
    const int64_t sizes[] = {4096, 262144, 4194304, 67108864};
    KernelCache cache;
    for (int64_t n : sizes) {
        Buffer src(n), dst(n), b2(n, 0.91f), b3(n, 1.3f), work(n);
        std::vector<std::unique_ptr<Buffer>> inputs;            // parameters, shared by patterns
        std::unique_ptr<Buffer> outputs(new Buffer(n));
        std::vector<std::unique_ptr<float[], AlignedFree>> pool;  // unfused intermediates
        for (int i = 0; i < 5; ++i) inputs.emplace_back(new Buffer(n, 0.3f + 0.2f * (float)i));
        std::memset(dst.get(), 0, n * sizeof(float));  // no page faults inside the timings
        std::memset(work.get(), 0, n * sizeof(float));
        auto time_memcpy = [&] { return best_time([&] { std::memcpy(dst.get(), src.get(), n * sizeof(float)); }); };
        double t_memcpy = 1e30;
        for (int i = 0; i < 3; ++i) t_memcpy = std::min(t_memcpy, time_memcpy());  // the baseline deserves a few more tries
        double memcpy_gbs = 2.0 * n * 4 / t_memcpy / 1e9;
        float* a = dst.get();
        const float *bp = b2.get(), *cp = b3.get();
        double t_triad = best_time([&] { for (int64_t i = 0; i < n; ++i) a[i] = bp[i] + 1.5f * cp[i]; });
        std::printf("\n== %lld floats: memcpy %.1f GB/s (read+write), triad %.1f GB/s\n", (long long)n, memcpy_gbs,
                    3.0 * n * 4 / t_triad / 1e9);
        std::printf("%-26s %9s %8s %9s %10s %10s %9s %9s %8s %7s %5s %9s %8s %7s %7s %7s\n", "pattern", "fused GB/s", "%memcpy", "vs loop",
                    "vs unfused", "shrinkage", "compile", "(worst)", "regs", "code", "lanes", "in place", "%memcpy", "memcpy",
                    "limit", "%limit");
        for (const Pattern& p : patterns) {
            if (p.max_n && n > p.max_n) continue;
            Arena arena;
            SnippetBody body(&arena);
            p.build(body, n);
            std::vector<const float*> param_ptrs;
            std::vector<float*> loop_ptrs;
            for (uint32_t i = 0; i < body.size(); ++i) {
                const SnippetInstruction& in = body.instruction(i);
                if (in.op != SnippetOp::Parameter) continue;
                while (inputs.size() <= in.index) inputs.emplace_back(new Buffer(n, 0.3f + 0.2f * (float)inputs.size()));
                param_ptrs.push_back(inputs[in.index]->get());
                loop_ptrs.push_back(inputs[in.index]->get());
            }
            Buffer& out = src;  // the memcpy buffers serve as outputs
            Buffer& out_loop = dst;
            Buffer& out_unfused = *outputs;
            Snippet fused;
            SnippetOptions options;
            options.isa = isa;
            CompileTime compile_time;
            if (!compile_timed(&fused, body, options, &compile_time)) return 1;
            float* outs[] = {out.get()};
            Span<const float* const> ins(param_ptrs.data(), param_ptrs.size());
            // Beyond the caches memcpy is timed again around this pattern's runs, alternating
            // with them: the memory side of this shared machine drifts within seconds, and
            // the ratio should compare the two under the same conditions.
            const bool beyond_caches = n > 4194304;
            // The compiled loop takes its turn in the same rounds: its own time moves 10-30%
            // between runs here, and one best-of measured apart made "vs loop" swing with it.
            // So does the pattern's data movement alone (stream_sum: its full-size inputs into
            // the output), the limit of its shape.
            const uint64_t out_elements = detail::shape_elements(body.instruction(body.result_value(0)).shape);
            std::vector<const float*> streams;
            for (uint32_t i = 0, k = 0; i < body.size(); ++i)
                if (body.instruction(i).op == SnippetOp::Parameter) {
                    if (detail::shape_elements(body.instruction(i).shape) == out_elements) streams.push_back(param_ptrs[k]);
                    ++k;
                }
            const int64_t stream_n = (int64_t)out_elements / 16 * 16;
            const bool limit_timed = beyond_caches && streams.size() >= 1 && streams.size() <= 5;
            double t_fused = 1e30, t_copy = beyond_caches ? 1e30 : t_memcpy, t_loop = 1e30, t_limit = 1e30;
            for (int round = 0; round < (beyond_caches ? 3 : 1); ++round) {
                if (beyond_caches) t_copy = std::min(t_copy, time_memcpy());
                t_fused = std::min(t_fused, best_time([&] { (void)fused.run(ins, outs); }));
                t_loop = std::min(t_loop, best_time([&] { p.loop(loop_ptrs.data(), out_loop.get(), n); }));
                if (limit_timed)
                    t_limit = std::min(t_limit, time_stream_sum(streams.data(), (int)streams.size(), out_unfused.get(), stream_n));
            }
            const double copy_gbs = 2.0 * n * 4 / t_copy / 1e9;
            // In place over the first input when it has the output's elements, as the runtime
            // runs an island whose input dies there: each output line is then already cached
            // by its load, where a separate output is read before it is written (RFO). The
            // input is a copy; repeating the kernel on its own output changes the values, not
            // the time (the kernels do not branch on data).
            double inplace_gbs = 0;
            const SnippetShape& first = body.instruction(0).shape;
            if (body.instruction(0).op == SnippetOp::Parameter && body.instruction(0).index == 0 && body.result_count() == 1 &&
                detail::shape_elements(first) == detail::shape_elements(body.instruction(body.result_value(0)).shape)) {
                std::memcpy(work.get(), param_ptrs[0], detail::shape_elements(first) * sizeof(float));
                std::vector<const float*> in_place_ptrs = param_ptrs;
                in_place_ptrs[0] = work.get();
                float* in_place_outs[] = {work.get()};
                Span<const float* const> in_place_ins(in_place_ptrs.data(), in_place_ptrs.size());
                double t = best_time([&] { (void)fused.run(in_place_ins, in_place_outs); });
                inplace_gbs = (double)fused.stats().bytes_fused / t / 1e9;
            }
            Unfused unfused;
            unfused.build(body, isa, &cache, &pool, (size_t)n);
            double t_unfused = best_time([&] { unfused.run(param_ptrs, body, out_unfused.get()); });
            const SnippetStats& st = fused.stats();
            double gbs = (double)st.bytes_fused / t_fused / 1e9;
            std::printf("%-26s %9.1f %7.0f%% %8.2fx %9.2fx %10.2f %7.1fus %7.1fus %8u %7u %5u", p.name, gbs, 100.0 * gbs / copy_gbs,
                        t_loop / t_fused, t_unfused / t_fused, st.shrinkage, compile_time.median_us, compile_time.worst_us,
                        st.registers_used, st.code_size, st.lanes);
            if (inplace_gbs > 0) std::printf(" %9.1f %7.0f%%", inplace_gbs, 100.0 * inplace_gbs / copy_gbs);
            else std::printf(" %9s %8s", "-", "-");
            std::printf(" %7.1f", copy_gbs);
            if (limit_timed) {
                const double limit_gbs = (double)(streams.size() + 1) * stream_n * 4 / t_limit / 1e9;
                std::printf(" %7.1f %6.0f%%\n", limit_gbs, 100.0 * gbs / limit_gbs);
            } else {
                std::printf(" %7s %7s\n", "-", "-");
            }
        }
    }

    // Short rows: the layer-norm tail over rows of `hidden` floats (a value per row, a value
    // per column), 262144 floats in all (in L2), against its compiled loop: the cost a kernel
    // pays per row, and the lanes chosen for the row's length.
    std::printf("\n== short rows: LayerNorm tail, 262144 floats in rows of H (per-row and per-column values)\n");
    std::printf("%8s %6s %10s %10s %8s\n", "H", "lanes", "fused ns", "loop ns", "vs loop");
    for (int64_t hidden : {16, 48, 64, 96, 768}) {
        const int64_t rows = 262144 / hidden, n = rows * hidden;
        Buffer x(n, 0.5f), mean(rows, 0.7f), rstd(rows, 0.9f), gamma(hidden, 1.1f), beta(hidden, 1.3f), out(n);
        Arena arena;
        SnippetBody body(&arena);
        ValueId px = param(body, {rows, hidden}), pm = param(body, {rows, 1}), pr = param(body, {rows, 1});
        ValueId pg = param(body, {hidden}), pb = param(body, {hidden});
        result(body, op(body, SnippetOp::Add, op(body, SnippetOp::Mul, op(body, SnippetOp::Mul, op(body, SnippetOp::Sub, px, pm), pr), pg), pb));
        const float *xp = x.get(), *mp = mean.get(), *rp = rstd.get(), *gp = gamma.get(), *bp = beta.get();
        float* outp = out.get();
        if (!print_row_case(isa, hidden, body, {xp, mp, rp, gp, bp}, outp, [&] {
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t j = 0; j < hidden; ++j) outp[r * hidden + j] = (xp[r * hidden + j] - mp[r]) * rp[r] * gp[j] + bp[j];
            }))
            return 1;
    }
    // The same for a per-channel scale and bias over small feature maps (a CNN's last
    // stages: 3x3, 5x5, 7x7, 14x14): rows of HW floats, most of them starting off a vector
    // boundary.
    std::printf("\n== short rows: x*w+b, Relu per channel, 262144 floats in maps of HW floats\n");
    std::printf("%8s %6s %10s %10s %8s\n", "HW", "lanes", "fused ns", "loop ns", "vs loop");
    for (int64_t hw : {9, 25, 49, 196}) {
        const int64_t channels = 262144 / hw, n = channels * hw;
        Buffer x(n, 0.5f), w(channels, 0.7f), bias(channels, 0.9f), out(n);
        Arena arena;
        SnippetBody body(&arena);
        ValueId px = param(body, {channels, hw}), pw = param(body, {channels, 1}), pb = param(body, {channels, 1});
        result(body, op(body, SnippetOp::Relu, op(body, SnippetOp::Add, op(body, SnippetOp::Mul, px, pw), pb)));
        const float *xp = x.get(), *wp = w.get(), *bp = bias.get();
        float* outp = out.get();
        if (!print_row_case(isa, hw, body, {xp, wp, bp}, outp, [&] {
                for (int64_t c = 0; c < channels; ++c)
                    for (int64_t i = 0; i < hw; ++i) outp[c * hw + i] = std::max(xp[c * hw + i] * wp[c] + bp[c], 0.0f);
            }))
            return 1;
    }

    // Compile time of single-op kernels (no cache), and accuracy over dense sweeps.
    std::printf("\n== per-op kernels on %s: compile time and max ULP error vs double (dense sweep, 4M points)\n", isa_name(isa));
    struct Sweep { SnippetOp op; float lo, hi; };
    const Sweep sweeps[] = {
        {SnippetOp::Exp, -104.0f, 89.0f}, {SnippetOp::Log, 1e-30f, 1e30f}, {SnippetOp::Tanh, -10.0f, 10.0f},
        {SnippetOp::Sigmoid, -100.0f, 100.0f}, {SnippetOp::Erf, -6.0f, 6.0f}, {SnippetOp::GeluErf, -20.0f, 10.0f},
        {SnippetOp::GeluErf, -14.5f, -12.0f}, {SnippetOp::GeluTanh, -20.0f, 10.0f}, {SnippetOp::GeluTanh, -14.0f, -10.0f},
        {SnippetOp::Swish, -80.0f, 80.0f}, {SnippetOp::Softplus, -20.0f, 20.0f}, {SnippetOp::Mish, -20.0f, 20.0f},
        {SnippetOp::Elu, -10.0f, 10.0f}, {SnippetOp::Selu, -10.0f, 10.0f},
    };
    const int64_t points = 4 << 20;
    std::vector<float> in(points), out(points);
    std::printf("%-10s %-22s %10s %10s %12s %10s\n", "op", "range", "max ulp", "bound", "compile", "(worst)");
    for (const Sweep& s : sweeps) {
        for (int64_t i = 0; i < points; ++i) {
            double t = (double)i / (points - 1);
            in[i] = s.op == SnippetOp::Log ? (float)std::exp(std::log(s.lo) + t * (std::log(s.hi) - std::log(s.lo)))
                                           : (float)(s.lo + t * (s.hi - s.lo));
        }
        Arena arena;
        SnippetBody body(&arena);
        ValueId x, y;
        int64_t shape[] = {points};
        if (body.parameter(shape, &x) != Status::Ok || body.unary(s.op, x, &y) != Status::Ok || body.result(y) != Status::Ok) return 1;
        Snippet k;
        SnippetOptions options;
        options.isa = isa;
        CompileTime compile_time;
        if (!compile_timed(&k, body, options, &compile_time)) return 1;
        const float* ins[] = {in.data()};
        float* outs[] = {out.data()};
        if (k.run(ins, outs) != Status::Ok) return 1;
        double worst = 0;
        for (int64_t i = 0; i < points; ++i) worst = std::max(worst, ulp_error(out[i], reference(s.op, in[i])));
        char range[64];
        std::snprintf(range, sizeof range, "[%g, %g]", s.lo, s.hi);
        std::printf("%-10s %-22s %10.2f %10u %10.1fus %8.1fus\n", snippet_op_name(s.op), range, worst,
                    snippet_op_ulp_bound(s.op, isa_uses_fma(isa)), compile_time.median_us, compile_time.worst_us);
    }
    return 0;
}
