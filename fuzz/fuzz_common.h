// What the runtime harnesses (onnx_model.cpp, blob_import.cpp) share: the library's
// implementation, the FUZZ_STATS counters, low Limits, and the checks that turn a wrong
// result into a finding (an abort with a FINDING line). Include it once, first.
#pragma once
#define TESSEL_IMPLEMENTATION
#include "runtime.h"
#include "fuzz/fuzz_stats.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fuzz {

// Inputs above this size are passed over (and no file the harness reads may be larger).
constexpr size_t kMaxInputBytes = 1u << 20;

// FUZZ_STATS=1 prints at exit how far the inputs got (read, compiled, inferred).
inline FuzzStats g_stats;

// Limits low enough that no input can make a harness allocate much.
inline void set_small_limits(tessel::Limits& limits) {
    limits.max_nodes = 2048;
    limits.max_tensor_elements = 1u << 16;
    limits.max_arena_bytes = 4u << 20;
    limits.max_folded_bytes = 1u << 20;
    limits.max_file_bytes = kMaxInputBytes;
}

[[noreturn]] inline void finding(const char* what, const char* detail) {
    std::fprintf(stderr, "FINDING: %s: %s\n", what, detail);
    std::abort();
}

// A malloc'ed byte buffer for export_model to append to.
struct Buffer {
    char* data = nullptr;
    size_t size = 0, capacity = 0;
    Buffer() = default;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { std::free(data); }
    static void append(void* user, const char* bytes, size_t n) {
        Buffer* b = static_cast<Buffer*>(user);
        if (b->size + n > b->capacity) {
            size_t c = b->capacity ? b->capacity : 4096;
            while (c < b->size + n) c *= 2;
            char* d = static_cast<char*>(std::realloc(b->data, c));
            if (!d) std::abort();
            b->data = d;
            b->capacity = c;
        }
        std::memcpy(b->data + b->size, bytes, n);
        b->size += n;
    }
};

// True when the first `count` outputs of the two requests have the same bytes.
inline bool same_outputs(const tessel::InferRequest& a, const tessel::InferRequest& b, uint32_t count) {
    for (uint32_t o = 0; o < count; ++o) {
        const tessel::Tensor& x = a.output(o);
        const tessel::Tensor& y = b.output(o);
        if (x.bytes() != y.bytes()) return false;
        if (x.bytes() && std::memcmp(x.data(), y.data(), x.bytes()) != 0) return false;
    }
    return true;
}

// A copy of a request's outputs, all in one exact-size block.
struct Snapshot {
    char* data = nullptr;
    size_t size = 0;
    Snapshot() = default;
    Snapshot(const Snapshot&) = delete;
    Snapshot& operator=(const Snapshot&) = delete;
    ~Snapshot() { std::free(data); }
    void take(const tessel::InferRequest& r, uint32_t count) {
        size = 0;
        for (uint32_t o = 0; o < count; ++o) size += r.output(o).bytes();
        data = static_cast<char*>(std::malloc(size ? size : 1));
        if (!data) std::abort();
        size_t at = 0;
        for (uint32_t o = 0; o < count; ++o) {
            const tessel::Tensor& t = r.output(o);
            if (t.bytes()) std::memcpy(data + at, t.data(), t.bytes());
            at += t.bytes();
        }
    }
    bool equals(const tessel::InferRequest& r, uint32_t count) const {
        size_t at = 0;
        for (uint32_t o = 0; o < count; ++o) {
            const tessel::Tensor& t = r.output(o);
            if (at + t.bytes() > size) return false;
            if (t.bytes() && std::memcmp(data + at, t.data(), t.bytes()) != 0) return false;
            at += t.bytes();
        }
        return at == size;
    }
};

// Fills the inputs with `fill(request, compiled)` and infers, twice: false when the first
// inference fails (a run-time error such as an index out of range, not a finding); a second
// inference that fails or gives other outputs read stale memory and is a finding.
template <class Fill>
bool infer_twice(tessel::InferRequest& request, const tessel::CompiledModel& compiled, Fill fill, const char* what) {
    fill(request, compiled);
    if (request.infer() != tessel::Status::Ok) return false;
    ++g_stats.inferred;
    Snapshot first;
    first.take(request, compiled.output_count());
    fill(request, compiled);
    if (request.infer() != tessel::Status::Ok) finding("second inference failed", request.last_error());
    if (!first.equals(request, compiled.output_count())) finding("second inference differs", what);
    return true;
}

}  // namespace fuzz
