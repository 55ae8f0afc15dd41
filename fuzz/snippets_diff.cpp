// libFuzzer harness: differential test of the snippets JIT against the reference interpreter.
// The input bytes make a random elementwise body (1-4 broadcasting parameters of rank <= 4, 1-12
// operations or scalars, sometimes 8-22 more parameters folded in so that the kernel keeps some
// pointers in its frame (more than 11 arguments), 1-3 results) and its input data (with zeros,
// infinities, NaNs, denormals, rounding and overflow boundaries). The body is compiled for every
// available x64 ISA, by default and with a variant (few registers to force spills, 1, 3 or 4
// lanes, unfused broadcast loads, a kernel cache shared across inputs, misaligned buffers,
// result 0..2 in place, non-temporal stores and their in-place twin, page lanes, run() in 2 or 3
// parts). One input in eight is laid out for page lanes, which SnippetTuning::page_lanes = Always
// turns on (AVX-512): long rows for page blocks, or (three times as often) many short rows for
// row groups. Each output must equal interpret(body, ..., isa_uses_fma(isa)) bit for bit (any
// NaN equals any NaN).
// A body the builder or the interpreter rejects is skipped; a compile or run failure of a
// body the interpreter accepts, a mismatch, a write to an input, or a sanitizer report is a
// finding. Every buffer is malloc'ed to its exact size so ASan sees the JIT's accesses.
//   clang++ -g -O1 -std=c++17 -I. -fsanitize=fuzzer,address,undefined \
//       -fno-sanitize-recover=undefined fuzz/snippets_diff.cpp -o snippets_diff -lasmjit
// SNIPPETS_DIFF_DUMP=1 prints the body, the options and the data of each input it runs.
#define TESSEL_IMPLEMENTATION
#include "snippets.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define SNIPPETS_DIFF_ASAN 1
#endif
#endif
#if !defined(SNIPPETS_DIFF_ASAN) && defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SNIPPETS_DIFF_ASAN 1
#endif

using namespace tessel;

namespace {

constexpr int kMaxRank = 4;
constexpr uint64_t kMaxElements = 4096;  // keeps one input well under a millisecond per target
constexpr uint64_t kMaxPagedElements = 32768;  // rows of up to 5047 floats, or up to 127 rows
constexpr int kMaxParams = 4, kMaxSlots = 12, kMaxResults = 3;
constexpr int kMaxWide = 22;                        // extra parameters of a wide body
constexpr int kMaxAllParams = kMaxParams + kMaxWide;
static_assert(kMaxAllParams + kMaxResults <= (int)kSnippetMaxArgs, "a wide body must compile");

uint32_t bits_of(float x) { uint32_t b; std::memcpy(&b, &x, 4); return b; }
float float_of(uint32_t b) { float x; std::memcpy(&x, &b, 4); return x; }
bool same(float a, float b) { return (a != a && b != b) || bits_of(a) == bits_of(b); }

// Fuzz bytes first; when they run out, a xorshift seeded from all of them (so a short input
// still gives full data, and the same input always gives the same data).
struct Bytes {
    const uint8_t* p;
    size_t n;
    uint64_t state;
    Bytes(const uint8_t* data, size_t size) : p(data), n(size), state(0x9e3779b97f4a7c15ull) {
        for (size_t i = 0; i < size; ++i) state = (state ^ data[i]) * 0x100000001b3ull;
        if (!state) state = 1;
    }
    uint64_t next() {
        state ^= state << 13; state ^= state >> 7; state ^= state << 17;
        return state;
    }
    bool fuzzed() const { return n > 0; }
    uint8_t u8() {
        if (n) { --n; return *p++; }
        return (uint8_t)(next() >> 24);
    }
    uint32_t u32() { uint32_t v = u8(); v |= (uint32_t)u8() << 8; v |= (uint32_t)u8() << 16; v |= (uint32_t)u8() << 24; return v; }
};

const uint32_t kSpecialBits[] = {
    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa00000u,
    0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu, 0x00400000u, 0x80400000u, 0x00800000u, 0x80800000u,
    0x7f7fffffu, 0xff7fffffu, 0x3f800000u, 0xbf800000u, 0x3f000000u, 0xbf000000u, 0x3fc00000u, 0x40200000u,
    0xc0200000u, 0x40400000u, 0xc0400000u, 0x40c00000u, 0xc0c00000u, 0x3effffffu, 0xbeffffffu, 0x3f7fffffu,
    0x3f800001u, 0x4b000000u, 0xcb000000u, 0x4affffffu, 0x4b7fffffu, 0x4b800000u, 0x501502f9u, 0xd01502f9u,
    0x2edbe6ffu, 0x0c5c4da4u, 0x42b17218u, 0x42b17217u, 0x42b17219u, 0xc2aeac50u, 0xc2ce8ed0u, 0xc2d00000u,
    0x42b20000u, 0xc2b20000u, 0x41a00000u, 0xc1a00000u, 0x41100000u, 0xc1100000u, 0x3f200000u, 0xbf200000u,
    0x3f6d8000u, 0xbf6d8000u, 0x3f317218u, 0x42fe0000u, 0x43000000u, 0xc2fc0000u, 0xc3150000u, 0xc3160000u,
    0x3dcccccdu, 0x40800000u, 0xc0800000u, 0x7149f2cau, 0xf149f2cau, 0x1e3ce508u, 0x3b800000u, 0x3a83126fu,
    0x40490fdbu, 0xc0490fdbu, 0x3fb504f3u, 0xbfb504f3u, 0x3e2aaaabu, 0x5f800000u, 0x1f800000u, 0x80000008u,
};
constexpr uint32_t kSpecialCount = sizeof kSpecialBits / sizeof kSpecialBits[0];

float special(uint8_t b) { return float_of(kSpecialBits[b % kSpecialCount]); }

// One input element.
float element(Bytes& in) {
    uint8_t b = in.u8();
    switch (b & 7) {
        case 0: case 1: return special((uint8_t)(b >> 3) ^ in.u8());
        case 2: return float_of(in.u32());                                   // any bits at all
        case 3: return (float)((int)(b >> 3) - 16) * 0.5f;                   // small halves
        default: {                                                           // |x| in 2^-12..2^12
            uint32_t r = in.u32();
            uint32_t exponent = 127 - 12 + (r >> 24) % 25;
            return float_of(((uint32_t)(b & 8) << 28) | (exponent << 23) | (r & 0x7fffffu));
        }
    }
}

const float kAttributes[] = {-INFINITY, INFINITY, 0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 1e-3f, 100.0f, -3.5f,
                             0.2f, 1.0f / 6.0f, 1.67326319f, 1.05070102f, 1e30f, -1e30f, 1e-40f, 0.01f, -0.25f,
                             6.0f, -6.0f, 3.0f, 0.75f};
const float kExponents[] = {0.0f, 0.5f, -0.5f, 1.0f, 2.0f, 3.0f, -1.0f, -2.0f, 7.0f, 64.0f, 65.0f, -64.0f, 1.5f,
                            2.5f, 0.33333334f, -3.0f, 10.0f, 31.0f, 33.0f, 0.25f, -0.0f, 4.0f, 1e-3f, -7.0f,
                            INFINITY, -INFINITY, 16.0f, 63.0f};

float pick(const float* table, size_t count, uint8_t b) { return table[b % count]; }

struct Case {
    Arena arena;
    SnippetBody body{&arena};
    int rank = 0;
    int64_t domain[kMaxRank] = {};
    bool paged = false;  // a layout for page lanes: long rows, or enough short rows for row groups
    int params = 0, results = 0;
    SnippetShape param_shapes[kMaxAllParams];
    SnippetShape result_shapes[kMaxResults];
    uint64_t param_elements[kMaxAllParams] = {}, result_elements[kMaxResults] = {};
};

uint64_t elements_of(const SnippetShape& s) {
    uint64_t n = 1;
    for (int i = 0; i < s.rank; ++i) n *= (uint64_t)s.dims[i];
    return n;
}

void print_shape(const SnippetShape& s) {
    std::fprintf(stderr, "[");
    for (int i = 0; i < s.rank; ++i) std::fprintf(stderr, "%s%" PRId64, i ? "," : "", s.dims[i]);
    std::fprintf(stderr, "]");
}

void print_body(const SnippetBody& body) {
    for (uint32_t i = 0; i < body.size(); ++i) {
        const SnippetInstruction& in = body.instruction(i);
        std::fprintf(stderr, "  v%u = %s", i, snippet_op_name(in.op));
        if (in.op == SnippetOp::Parameter) std::fprintf(stderr, " #%u", in.index);
        if (in.op == SnippetOp::Scalar) std::fprintf(stderr, " %a (0x%08x)", (double)in.alpha, bits_of(in.alpha));
        for (int a = 0; a < in.arity; ++a) std::fprintf(stderr, " v%u", in.args[a]);
        if (in.op != SnippetOp::Parameter && in.op != SnippetOp::Scalar)
            std::fprintf(stderr, "  alpha=%a (0x%08x) beta=%a (0x%08x)", (double)in.alpha, bits_of(in.alpha),
                         (double)in.beta, bits_of(in.beta));
        std::fprintf(stderr, "  shape ");
        print_shape(in.shape);
        std::fprintf(stderr, "\n");
    }
    for (uint32_t r = 0; r < body.result_count(); ++r) std::fprintf(stderr, "  result %u = v%u\n", r, body.result_value(r));
}

// Builds the body; false if the builder rejects it (skip the input).
bool build(Bytes& in, Case* c) {
    uint8_t head = in.u8();
    c->rank = 1 + head % kMaxRank;
    c->params = 1 + (head >> 2) % kMaxParams;
    int slots = 1 + (head >> 4) % kMaxSlots;
    uint64_t total = 1;
    for (int i = 0; i < c->rank; ++i) {
        c->domain[i] = 1 + in.u8() % 37;
        total *= (uint64_t)c->domain[i];
    }
    uint8_t layout = in.u8();
    c->paged = (layout & 7) == 0;
    if (c->paged) {  // the last two dims: rows for page blocks (3 lanes from 3072 floats) or row groups (16 a lane)
        if (c->rank < 2) c->rank = 2;
        const int row = c->rank - 1;
        if ((layout & 0x18) == 0) {  // a quarter: page blocks
            const uint32_t high = in.u8(), low = in.u8();   // in this order on every compiler
            c->domain[row] = 2048 + (int64_t)((high << 8 | low) % 3000);
            c->domain[row - 1] = 1 + (layout >> 5) % 4;
        } else {
            c->domain[row] = 16 + (int64_t)(in.u8() % 200);
            c->domain[row - 1] = 32 + (int64_t)((layout >> 5) * 12 + in.u8() % 12);
        }
        for (int i = 0; i < row - 1; ++i) c->domain[i] = 1 + c->domain[i] % 2;
        total = 1;
        for (int i = 0; i < c->rank; ++i) total *= (uint64_t)c->domain[i];
    }
    const uint64_t max_elements = c->paged ? kMaxPagedElements : kMaxElements;
    for (int i = 0; total > max_elements; i = (i + 1) % c->rank) {  // shrink outer dims first
        total /= (uint64_t)c->domain[i];
        c->domain[i] = (c->domain[i] + 1) / 2;
        total *= (uint64_t)c->domain[i];
    }
    Status s = Status::Ok;
    uint32_t values = 0;
    auto add_parameter = [&](ValueId* v) {   // of a broadcasting shape
        uint8_t b = in.u8(), mask = in.u8();
        int prank = (b & 0x80) ? c->rank : b % (c->rank + 1);
        if (c->paged && values == 0) { prank = c->rank; mask = 0; }               // the rows in full,
        if (c->paged && values == 1) { prank = 2; mask = (b & 1) ? 1 : 2; }       // per column or per row: no collapse
        int64_t dims[kMaxRank];
        for (int i = 0; i < prank; ++i) {
            int d = c->rank - prank + i;
            dims[i] = (mask >> i) & 1 ? 1 : c->domain[d];
        }
        if (c->body.parameter(Span<const int64_t>(dims, (size_t)prank), v) != Status::Ok) return false;
        c->param_shapes[c->body.parameter_count() - 1] = c->body.instruction(*v).shape;
        c->param_elements[c->body.parameter_count() - 1] = elements_of(c->body.instruction(*v).shape);
        ++values;
        return true;
    };
    for (int p = 0; p < c->params; ++p) {
        ValueId v;
        if (!add_parameter(&v)) return false;
    }
    auto operand = [&](uint8_t b) -> ValueId {
        if (b & 0x80) return values - 1 - (b & 0x7f) % (values < 3 ? values : 3);  // recent
        return (ValueId)(b % values);
    };
    uint32_t first_computed = values;
    for (int k = 0; k < slots; ++k) {
        uint8_t b = in.u8();
        ValueId out;
        if (b % 9 == 0) {  // a scalar constant
            uint8_t v = in.u8();
            float value = (v & 1) ? special(v >> 1) : pick(kExponents, sizeof kExponents / 4, v >> 1);
            s = c->body.scalar(value, &out);
        } else {
            SnippetOp op = (SnippetOp)((int)SnippetOp::Add + in.u8() % ((int)SnippetOp::Count - (int)SnippetOp::Add));
            uint32_t arity = snippet_op_arity(op);
            ValueId args[3];
            for (uint32_t a = 0; a < arity; ++a) args[a] = operand(in.u8());
            if (op == SnippetOp::Pow && (b & 0x10)) {  // scalar exponent: lowered to PowerStatic
                uint8_t e = in.u8();
                float value = (e & 1) ? float_of(in.u32()) : pick(kExponents, sizeof kExponents / 4, e >> 1);
                if (value != value) value = 2.0f;
                s = c->body.scalar(value, &args[1]);
                if (s != Status::Ok) return false;
                ++values;
            }
            float alpha, beta;
            snippet_op_default_attributes(op, &alpha, &beta);
            uint8_t mode = in.u8();
            if (op == SnippetOp::PowerStatic) {
                if (mode & 1) alpha = pick(kExponents, sizeof kExponents / 4, mode >> 1);
                else if (mode & 2) alpha = (float)((int)(mode >> 2) - 32) * 0.5f;
                else alpha = float_of(in.u32());
                if (alpha != alpha) alpha = 3.0f;
            } else {
                switch (mode & 3) {
                    case 0: case 1: break;  // defaults
                    case 2:
                        alpha = pick(kAttributes, sizeof kAttributes / 4, in.u8());
                        beta = pick(kAttributes, sizeof kAttributes / 4, in.u8());
                        break;
                    case 3:
                        alpha = float_of(in.u32());
                        beta = float_of(in.u32());
                        if (alpha != alpha) alpha = 0.0f;
                        if (beta != beta) beta = 0.5f;
                        break;
                }
            }
            s = c->body.add(op, Span<const ValueId>(args, arity), alpha, beta, &out);
        }
        if (s != Status::Ok) return false;
        ++values;
    }
    // A wide body: more parameters folded into the last value by Add, Mul, Max or Sub.
    uint8_t wide = in.u8();
    if ((wide & 7) == 0) {
        const SnippetOp folds[] = {SnippetOp::Add, SnippetOp::Mul, SnippetOp::Max, SnippetOp::Sub};
        int extra = 8 + (wide >> 3) % (kMaxWide - 7);
        for (int k = 0; k < extra; ++k) {
            ValueId p, out;
            if (!add_parameter(&p)) return false;
            if (c->body.binary(folds[in.u8() % 4], values - 2, p, &out) != Status::Ok) return false;
            ++values;
        }
        c->params += extra;
    }
    uint8_t r = in.u8();
    c->results = 1 + r % kMaxResults;
    for (int k = 0; k < c->results; ++k) {
        uint8_t b = in.u8();
        ValueId v;
        if (k == 0 && !(b & 0xc0)) v = values - 1;                       // usually the last value
        else if ((b & 0xc0) != 0xc0 && values > first_computed) v = first_computed + b % (values - first_computed);
        else v = b % values;                                             // anything, a parameter too
        if (c->body.result(v) != Status::Ok) return false;
        c->result_shapes[k] = c->body.instruction(v).shape;
        c->result_elements[k] = elements_of(c->result_shapes[k]);
    }
    return true;
}

// An exact-size malloc'ed buffer, shifted by `offset` floats whose bytes are poisoned (as far
// as ASan's 8-byte granules allow), so a read or write before or after the tensor is reported.
struct Buffer {
    unsigned char* base = nullptr;
    float* data = nullptr;
    uint64_t count = 0;
    size_t offset = 0;
    void allocate(uint64_t n, size_t shift) {
        release();
        count = n;
        offset = shift;
        base = static_cast<unsigned char*>(std::malloc((size_t)(n + shift) * sizeof(float) + (n + shift == 0)));
        if (!base) std::abort();
        data = reinterpret_cast<float*>(base) + shift;
#ifdef SNIPPETS_DIFF_ASAN
        if (shift) __asan_poison_memory_region(base, shift * sizeof(float));
#endif
    }
    void release() {
        if (!base) return;
#ifdef SNIPPETS_DIFF_ASAN
        if (offset) __asan_unpoison_memory_region(base, offset * sizeof(float));
#endif
        std::free(base);
        base = nullptr;
        data = nullptr;
    }
    ~Buffer() { release(); }
};

// Flat index into `shape` of the element at flat index i of `of` (right-aligned broadcast).
uint64_t broadcast_index(const SnippetShape& of, uint64_t i, const SnippetShape& shape) {
    int64_t coordinate[kSnippetMaxRank] = {};
    for (int d = of.rank - 1; d >= 0; --d) {
        coordinate[d] = of.dims[d] ? (int64_t)(i % (uint64_t)of.dims[d]) : 0;
        i = of.dims[d] ? i / (uint64_t)of.dims[d] : 0;
    }
    uint64_t index = 0;
    for (int d = 0; d < shape.rank; ++d) {
        int od = of.rank - shape.rank + d;
        int64_t x = od >= 0 && shape.dims[d] != 1 ? coordinate[od] : 0;
        index = index * (uint64_t)shape.dims[d] + (uint64_t)x;
    }
    return index;
}

using StreamingStores = SnippetTuning::StreamingStores;
using PageLanes = SnippetTuning::PageLanes;

const char* streaming_stores_name(StreamingStores stores) {
    switch (stores) {
        case StreamingStores::Auto: return "auto";
        case StreamingStores::Never: return "never";
        case StreamingStores::Always: return "always";
        case StreamingStores::AlwaysWithInPlaceTwin: return "always-with-twin";
    }
    return "?";
}
const char* page_lanes_name(PageLanes pages) {
    switch (pages) {
        case PageLanes::Auto: return "auto";
        case PageLanes::Never: return "never";
        case PageLanes::Always: return "always";
    }
    return "?";
}

struct Variant {
    uint32_t max_registers = 0;
    uint8_t lanes = 0;  // SnippetTuning::lanes: 0 (the default choice), 1, 3 or 4
    bool fuse_broadcast_loads = true;
    StreamingStores streaming_stores = StreamingStores::Auto;   // every value (and the in-place twin)
    PageLanes page_lanes = PageLanes::Auto;
    uint32_t parts = 1;            // run() in parts 0..parts-1, one after the other (as the runtime's threads split it)
    bool use_cache = false;
    size_t offset = 0;
    bool in_place[kMaxResults] = {};
    int in_place_param[kMaxResults] = {-1, -1, -1};
};

// How many kernels took each path, printed at exit when FUZZ_STATS is set.
struct PathCounts {
    unsigned long long kernels = 0, streaming = 0, page_lanes = 0, page_prefetch = 0, row_groups = 0, short_rows = 0,
                       in_place_twin = 0;
    ~PathCounts() {
        if (std::getenv("FUZZ_STATS"))
            std::fprintf(stderr, "stats: %llu kernels run, %llu streaming, %llu page lanes (%llu prefetching), %llu row groups, "
                                 "%llu short rows, %llu in-place twins run\n",
                         kernels, streaming, page_lanes, page_prefetch, row_groups, short_rows, in_place_twin);
    }
} g_paths;

KernelCache* shared_cache() {
    static KernelCache cache;  // shared across inputs: hits reuse kernels of other bodies
    return &cache;
}

[[noreturn]] void finding(const Case& c, Isa isa, const Variant& v, const char* what) {
    std::fprintf(stderr, "\n==== snippets_diff FINDING: %s\n  isa=%s fma=%d max_registers=%u lanes=%u fuse_broadcast_loads=%d "
                 "streaming_stores=%s page_lanes=%s parts=%u cache=%d offset=%zu in_place=",
                 what, isa_name(isa), (int)isa_uses_fma(isa), v.max_registers, (unsigned)v.lanes, (int)v.fuse_broadcast_loads,
                 streaming_stores_name(v.streaming_stores), page_lanes_name(v.page_lanes), v.parts, (int)v.use_cache, v.offset);
    for (int r = 0; r < c.results; ++r)
        if (v.in_place[r]) std::fprintf(stderr, "r%d<-p%d ", r, v.in_place_param[r]);
    std::fprintf(stderr, "\n  domain rank %d:", c.rank);
    for (int i = 0; i < c.rank; ++i) std::fprintf(stderr, " %" PRId64, c.domain[i]);
    std::fprintf(stderr, "\n");
    print_body(c.body);
    std::abort();
}

bool dump_enabled() {
    static int enabled = -1;
    if (enabled < 0) enabled = std::getenv("SNIPPETS_DIFF_DUMP") != nullptr;
    return enabled == 1;
}

// Compiles and runs one target/variant and compares with the expected outputs.
void check(const Case& c, Isa isa, const Variant& v, const float* const* inputs, const float* const* expected) {
    Buffer in_buffers[kMaxAllParams], out_buffers[kMaxResults];
    const float* in_ptrs[kMaxAllParams];
    float* out_ptrs[kMaxResults];
    for (int p = 0; p < c.params; ++p) {
        in_buffers[p].allocate(c.param_elements[p], v.offset);
        std::memcpy(in_buffers[p].data, inputs[p], (size_t)c.param_elements[p] * sizeof(float));
        in_ptrs[p] = in_buffers[p].data;
    }
    for (int r = 0; r < c.results; ++r) {
        if (v.in_place[r]) {
            float* shared = in_buffers[v.in_place_param[r]].data;
            out_ptrs[r] = shared;
            continue;
        }
        out_buffers[r].allocate(c.result_elements[r], v.offset);
        for (uint64_t i = 0; i < c.result_elements[r]; ++i) out_buffers[r].data[i] = float_of(0xdeadbeefu);
        out_ptrs[r] = out_buffers[r].data;
    }
    Snippet snippet;
    SnippetOptions options;
    options.isa = isa;
    options.tuning.max_registers = v.max_registers;
    options.tuning.lanes = v.lanes;
    options.tuning.fuse_broadcast_loads = v.fuse_broadcast_loads;
    options.tuning.streaming_stores = v.streaming_stores;
    options.tuning.page_lanes = v.page_lanes;
    options.cache = v.use_cache ? shared_cache() : nullptr;
    Status s = snippet.compile(c.body, options);
    if (s != Status::Ok) {
        char what[256];
        std::snprintf(what, sizeof what, "compile failed on a body the interpreter runs: status %d: %s", (int)s,
                      snippet.last_error());
        finding(c, isa, v, what);
    }
    for (uint32_t part = 0; part < v.parts && s == Status::Ok; ++part)
        s = snippet.run(Span<const float* const>(in_ptrs, (size_t)c.params), Span<float* const>(out_ptrs, (size_t)c.results),
                        nullptr, part, v.parts);
    if (s != Status::Ok) {
        char what[256];
        std::snprintf(what, sizeof what, "run failed: status %d: %s", (int)s, snippet.last_error());
        finding(c, isa, v, what);
    }
    const SnippetStats& stats = snippet.stats();
    bool in_place = false;
    for (int r = 0; r < c.results; ++r) in_place |= v.in_place[r];
    ++g_paths.kernels;
    g_paths.streaming += stats.streaming_stores;
    g_paths.page_lanes += stats.page_lanes;
    g_paths.page_prefetch += stats.page_prefetch;
    g_paths.row_groups += stats.row_groups;
    g_paths.short_rows += stats.short_rows;
    g_paths.in_place_twin += stats.in_place_kernel && in_place;
    if (dump_enabled()) {
        std::fprintf(stderr, "isa=%s ", isa_name(isa));
        std::fprintf(stderr, "lanes=%u streaming=%d page_lanes=%d page_prefetch=%d row_groups=%d short_rows=%d twin=%d ",
                     stats.lanes, (int)stats.streaming_stores, (int)stats.page_lanes, (int)stats.page_prefetch,
                     (int)stats.row_groups, (int)stats.short_rows, (int)stats.in_place_kernel);
        write_statistics(stats, [](void*, const char* d, size_t n) { std::fwrite(d, 1, n, stderr); }, nullptr);
    }
    int bad_total = 0;
    for (int r = 0; r < c.results; ++r) {
        uint64_t bad = 0;
        for (uint64_t i = 0; i < c.result_elements[r]; ++i) {
            float got = out_ptrs[r][i], want = expected[r][i];
            if (same(got, want)) continue;
            if (bad < 6) {
                if (!bad_total) std::fprintf(stderr, "\n==== snippets_diff mismatch (isa %s)\n", isa_name(isa));
                std::fprintf(stderr, "  result %d element %" PRIu64 ": jit %a (0x%08x) interpreter %a (0x%08x); inputs:", r, i,
                             (double)got, bits_of(got), (double)want, bits_of(want));
                for (int p = 0; p < c.params; ++p) {
                    float x = inputs[p][broadcast_index(c.result_shapes[r], i, c.param_shapes[p])];
                    std::fprintf(stderr, " p%d=%a (0x%08x)", p, (double)x, bits_of(x));
                }
                std::fprintf(stderr, "\n");
            }
            ++bad;
        }
        if (bad) std::fprintf(stderr, "  result %d: %" PRIu64 " of %" PRIu64 " elements differ\n", r, bad, c.result_elements[r]);
        bad_total += bad != 0;
    }
    if (bad_total) finding(c, isa, v, "JIT output differs from the interpreter");
    // Inputs that no result aliases must be untouched.
    for (int p = 0; p < c.params; ++p) {
        bool aliased = false;
        for (int r = 0; r < c.results; ++r) aliased |= v.in_place[r] && v.in_place_param[r] == p;
        if (!aliased && std::memcmp(in_ptrs[p], inputs[p], (size_t)c.param_elements[p] * sizeof(float)) != 0)
            finding(c, isa, v, "the kernel wrote to an input");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    Bytes in(data, size);
    Case c;
    if (!build(in, &c)) return 0;

    // Variant options, one set for every target.
    uint8_t flags = in.u8(), registers = in.u8(), stores = in.u8();
    Variant variant;
    bool run_variant = (flags & 3) != 0;
    variant.max_registers = (registers & 1) ? 0 : 1 + (registers >> 1) % 6;
    const uint8_t lane_choices[] = {0, 1, 3, 4};   // 3 and 4: the software-pipelined tiles
    variant.lanes = lane_choices[registers >> 6];
    variant.fuse_broadcast_loads = !(flags & 4);
    variant.use_cache = (flags & 8) != 0;
    const StreamingStores store_choices[] = {StreamingStores::Auto, StreamingStores::Never, StreamingStores::Always,
                                             StreamingStores::AlwaysWithInPlaceTwin};
    const PageLanes page_choices[] = {PageLanes::Auto, PageLanes::Never, PageLanes::Always};
    variant.streaming_stores = store_choices[stores % 4];
    variant.page_lanes = c.paged ? ((stores >> 2) % 4 ? PageLanes::Always : PageLanes::Never) : page_choices[(stores >> 2) % 3];
    variant.parts = 1 + (stores >> 4) % 3;
    variant.offset = (flags >> 4) & 3;
    if (flags & 0x40) {  // outputs over same-shape, non-broadcast inputs (never a broadcast one)
        // The domain of the kernel is the broadcast of the results; a full-size tensor has its
        // element count (and, broadcasting into it, the same layout).
        SnippetShape domain;
        for (int r = 0; r < c.results; ++r) detail::broadcast_shapes(domain, c.result_shapes[r], &domain);
        uint64_t domain_elements = elements_of(domain);
        bool taken[kMaxAllParams] = {};
        for (int r = 0; r < c.results; ++r) {
            if (c.result_elements[r] != domain_elements || !((registers >> (5 + r)) & 1 || r == 0)) continue;
            for (int p = 0; p < c.params; ++p) {
                int q = (p + (flags >> 7) + r) % c.params;
                if (taken[q] || c.param_elements[q] != domain_elements) continue;
                taken[q] = true;
                variant.in_place[r] = true;
                variant.in_place_param[r] = q;
                break;
            }
        }
    }

    // Input data, then the two expected outputs (FMA and not) from the interpreter.
    Buffer inputs[kMaxAllParams], expected_fma[kMaxResults], expected_plain[kMaxResults];
    const float* in_ptrs[kMaxAllParams];
    float* fma_ptrs[kMaxResults];
    float* plain_ptrs[kMaxResults];
    for (int p = 0; p < c.params; ++p) {
        inputs[p].allocate(c.param_elements[p], 0);
        uint8_t mode = in.u8();
        for (uint64_t i = 0; i < c.param_elements[p]; ++i) {
            // Runs of one value now and then, so vector tiles see uniform lanes too.
            if ((mode & 3) == 0 && i && (in.u8() & 3)) inputs[p].data[i] = inputs[p].data[i - 1];
            else inputs[p].data[i] = element(in);
        }
        in_ptrs[p] = inputs[p].data;
    }
    for (int r = 0; r < c.results; ++r) {
        expected_fma[r].allocate(c.result_elements[r], 0);
        expected_plain[r].allocate(c.result_elements[r], 0);
        fma_ptrs[r] = expected_fma[r].data;
        plain_ptrs[r] = expected_plain[r].data;
    }
    if (interpret(c.body, Span<const float* const>(in_ptrs, (size_t)c.params), Span<float* const>(fma_ptrs, (size_t)c.results),
                  true) != Status::Ok)
        return 0;  // not a valid body (e.g. a parameter that does not broadcast to the results' domain)
    if (interpret(c.body, Span<const float* const>(in_ptrs, (size_t)c.params), Span<float* const>(plain_ptrs, (size_t)c.results),
                  false) != Status::Ok) {
        Variant none;
        finding(c, Isa::Ref, none, "interpret(fused=false) failed where interpret(fused=true) ran");
    }

    if (dump_enabled()) {
        std::fprintf(stderr, "---- input of %zu bytes (%s); domain rank %d:", size, in.fuzzed() ? "bytes left" : "xorshift data",
                     c.rank);
        for (int i = 0; i < c.rank; ++i) std::fprintf(stderr, " %" PRId64, c.domain[i]);
        std::fprintf(stderr, "\n");
        print_body(c.body);
        std::fprintf(stderr, "  variant: %s max_registers=%u lanes=%u fuse=%d streaming_stores=%s page_lanes=%s parts=%u cache=%d "
                     "offset=%zu in_place=", run_variant ? "on" : "off", variant.max_registers, (unsigned)variant.lanes,
                     (int)variant.fuse_broadcast_loads, streaming_stores_name(variant.streaming_stores),
                     page_lanes_name(variant.page_lanes), variant.parts,
                     (int)variant.use_cache, variant.offset);
        for (int r = 0; r < c.results; ++r)
            if (variant.in_place[r]) std::fprintf(stderr, "r%d<-p%d ", r, variant.in_place_param[r]);
        std::fprintf(stderr, "\n");
        for (int p = 0; p < c.params; ++p) {
            std::fprintf(stderr, "  p%d:", p);
            for (uint64_t i = 0; i < c.param_elements[p] && i < 64; ++i) std::fprintf(stderr, " %08x", bits_of(in_ptrs[p][i]));
            std::fprintf(stderr, "%s\n", c.param_elements[p] > 64 ? " ..." : "");
        }
    }

    const Isa targets[] = {Isa::Sse41, Isa::Avx2, Isa::Avx512};
    for (Isa isa : targets) {
        if (!isa_available(isa)) continue;
        const float* const* expected = isa_uses_fma(isa) ? fma_ptrs : plain_ptrs;
        Variant plain;
        if (c.paged) plain.page_lanes = PageLanes::Always;
        check(c, isa, plain, in_ptrs, expected);
        if (run_variant) check(c, isa, variant, in_ptrs, expected);
    }
    return 0;
}
