// libFuzzer harness: ONNX bytes -> Model::read_onnx -> compile (CPU, then HETERO:TEMPLATE,CPU
// with TEMPLATE taking a subset of the ops) -> infer twice on one request -> export -> import
// -> infer. Limits are set low so no input can make the harness allocate much. Any input must
// give a Status or a result; a crash, a sanitizer report, a second inference that differs from
// the first (stale memory read), an import of a blob just exported that fails, or an imported
// model whose outputs differ from the compiled one is a finding.
//   clang++ -g -O1 -std=c++17 -I. -fsanitize=fuzzer,address,undefined fuzz/onnx_model.cpp -lasmjit
// Seeds: `make fuzz` copies supported libonnx-testdata models (scripts/fuzz-seeds.sh).
#define TESSEL_IMPLEMENTATION
#include "runtime.h"
#include "fuzz/fuzz_stats.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace tessel;

namespace {

// FUZZ_STATS=1 prints at exit how far the inputs got (read, compiled, inferred).
FuzzStats g_stats;

void set_small_limits(Limits& limits) {
    limits.max_nodes = 2048;
    limits.max_tensor_elements = 1u << 16;
    limits.max_arena_bytes = 4u << 20;
    limits.max_folded_bytes = 1u << 20;
    limits.max_file_bytes = 1u << 20;
}

uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

// Deterministic input data from the model bytes: small floats (with a few specials) and small
// integers, some negative or past a typical axis so index checks run too.
void fill_inputs(InferRequest& request, const CompiledModel& compiled, uint64_t seed) {
    for (uint32_t i = 0; i < compiled.input_count(); ++i) {
        Tensor& t = request.input(i);
        uint64_t n = t.elements();
        uint64_t s = mix(seed, i + 1);
        for (uint64_t k = 0; k < n; ++k) {
            s = mix(s, k);
            uint32_t r = (uint32_t)(s >> 29);
            switch (t.type()) {
            case ElementType::Float32: {
                float v = (float)((int)(r % 2001) - 1000) / 256.0f;
                if (r % 97 == 0) v = 0.0f;
                t.data_as<float>()[k] = v;
                break;
            }
            case ElementType::Float16: t.data_as<uint16_t>()[k] = (uint16_t)(0x3c00u + (r % 512)); break;
            case ElementType::Int64: t.data_as<int64_t>()[k] = (int64_t)(r % 9) - 4; break;
            case ElementType::Int32: t.data_as<int32_t>()[k] = (int32_t)(r % 9) - 4; break;
            case ElementType::Int8: t.data_as<int8_t>()[k] = (int8_t)r; break;
            case ElementType::UInt8: t.data_as<uint8_t>()[k] = (uint8_t)r; break;
            case ElementType::Bool: t.data_as<uint8_t>()[k] = (uint8_t)(r & 1); break;
            default: break;
            }
        }
    }
}

struct Buffer {
    char* data = nullptr;
    size_t size = 0, capacity = 0;
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

[[noreturn]] void finding(const char* what, const char* detail) {
    std::fprintf(stderr, "FINDING: %s: %s\n", what, detail);
    std::abort();
}

bool same_outputs(const InferRequest& a, const InferRequest& b, uint32_t count) {
    for (uint32_t o = 0; o < count; ++o) {
        const Tensor& x = a.output(o);
        const Tensor& y = b.output(o);
        if (x.bytes() != y.bytes()) return false;
        if (x.bytes() && std::memcmp(x.data(), y.data(), x.bytes()) != 0) return false;
    }
    return true;
}

// Copies the outputs of a request (the second inference overwrites them).
struct Snapshot {
    char* data = nullptr;
    size_t size = 0;
    ~Snapshot() { std::free(data); }
    void take(const InferRequest& r, uint32_t count) {
        size = 0;
        for (uint32_t o = 0; o < count; ++o) size += r.output(o).bytes();
        data = static_cast<char*>(std::malloc(size ? size : 1));
        if (!data) std::abort();
        size_t at = 0;
        for (uint32_t o = 0; o < count; ++o) {
            const Tensor& t = r.output(o);
            if (t.bytes()) std::memcpy(data + at, t.data(), t.bytes());
            at += t.bytes();
        }
    }
    bool equals(const InferRequest& r, uint32_t count) const {
        size_t at = 0;
        for (uint32_t o = 0; o < count; ++o) {
            const Tensor& t = r.output(o);
            if (at + t.bytes() > size) return false;
            if (t.bytes() && std::memcmp(data + at, t.data(), t.bytes()) != 0) return false;
            at += t.bytes();
        }
        return at == size;
    }
};

void run_device(const Model& model, const char* device, Span<const ConfigEntry> config, uint64_t seed) {
    Core core;
    set_small_limits(core.limits());
    CompiledModel compiled;
    if (core.compile_model(model, device, config, &compiled) != Status::Ok) return;
    ++g_stats.compiled;
    InferRequest request;
    if (compiled.create_request(&request) != Status::Ok) return;
    fill_inputs(request, compiled, seed);
    if (request.infer() != Status::Ok) return;   // a run-time error (an index out of range)
    ++g_stats.inferred;
    Snapshot snapshot;
    snapshot.take(request, compiled.output_count());
    fill_inputs(request, compiled, seed);
    Status second = request.infer();
    if (second != Status::Ok) finding("second inference failed", request.last_error());
    if (!snapshot.equals(request, compiled.output_count())) finding("second inference differs", device);

    Buffer blob;
    if (compiled.export_model(Buffer::append, &blob) != Status::Ok) finding("export failed", compiled.last_error());
    CompiledModel imported;
    Status imported_status = core.import_model(blob.data, blob.size, &imported);
    if (imported_status == Status::LimitExceeded) return;   // the blob holds folded constants too
    if (imported_status != Status::Ok) finding("import of an export failed", core.last_error());
    InferRequest again;
    if (imported.create_request(&again) != Status::Ok) finding("create_request on the import failed", imported.last_error());
    fill_inputs(again, imported, seed);
    if (again.infer() != Status::Ok) finding("inference of the import failed", again.last_error());
    if (!same_outputs(request, again, compiled.output_count())) finding("the import computes other outputs", device);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > (1u << 20)) return 0;
    ++g_stats.inputs;
    Model model;
    if (model.read_onnx(data, size) != Status::Ok) return 0;
    ++g_stats.read;
    if (model.graph.node_count() > 512) return 0;   // keeps each input fast
    uint64_t seed = 1469598103934665603ull;
    for (size_t i = 0; i < size; i += 61) seed = mix(seed, data[i]);
    run_device(model, "CPU", Span<const ConfigEntry>(), seed);
    static const char* const kTemplateOps[] = {"*", "Conv,Relu,Add", "MatMul,Gemm,Reshape,Transpose", "Gather,Concat,Slice,Mul",
                                               "Sigmoid,Tanh,Softmax,MaxPool"};
    ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", kTemplateOps[seed % 5]}};
    run_device(model, "HETERO:TEMPLATE,CPU", config, seed);
    return 0;
}
