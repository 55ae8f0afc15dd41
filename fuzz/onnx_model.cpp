// libFuzzer harness: ONNX bytes -> Model::read_onnx -> compile (CPU, then HETERO:TEMPLATE,CPU
// with TEMPLATE taking a subset of the ops) -> infer twice on one request -> export -> import
// -> infer. Limits are set low so no input can make the harness allocate much. Any input must
// give a Status or a result; a crash, a sanitizer report, a second inference that differs from
// the first (stale memory read), an import of a blob just exported that fails, or an imported
// model whose outputs differ from the compiled one is a finding.
//   clang++ -g -O1 -std=c++17 -I. -fsanitize=fuzzer,address,undefined fuzz/onnx_model.cpp -lasmjit
// Seeds: `make fuzz` copies supported libonnx-testdata models (scripts/fuzz-seeds.sh).
#include "fuzz/fuzz_common.h"

using namespace tessel;
using fuzz::finding;
using fuzz::g_stats;

namespace {

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
            case ElementType::Float64: t.data_as<double>()[k] = (double)((int)(r % 2001) - 1000) / 256.0; break;
            case ElementType::BFloat16: t.data_as<uint16_t>()[k] = (uint16_t)(0x3f80u + (r % 256)); break;
            case ElementType::Int16: t.data_as<int16_t>()[k] = (int16_t)((int)(r % 9) - 4); break;
            case ElementType::UInt16: t.data_as<uint16_t>()[k] = (uint16_t)r; break;
            case ElementType::UInt32: t.data_as<uint32_t>()[k] = r % 9; break;
            case ElementType::UInt64: t.data_as<uint64_t>()[k] = r % 9; break;
            default: break;
            }
        }
    }
}

void run_device(const Model& model, const char* device, Span<const ConfigEntry> config, uint64_t seed) {
    Core core;
    fuzz::set_small_limits(core.limits());
    CompiledModel compiled;
    if (core.compile_model(model, device, config, &compiled) != Status::Ok) return;
    ++g_stats.compiled;
    InferRequest request;
    if (compiled.create_request(&request) != Status::Ok) return;
    auto fill = [seed](InferRequest& r, const CompiledModel& c) { fill_inputs(r, c, seed); };
    if (!fuzz::infer_twice(request, compiled, fill, device)) return;

    fuzz::Buffer blob;
    const Status exported = compiled.export_model(fuzz::Buffer::append, &blob);
    if (exported == Status::Unsupported) return;   // what a blob cannot hold yet (a later stage's bodies): refused, not a finding
    if (exported != Status::Ok) finding("export failed", compiled.last_error());
    CompiledModel imported;
    Status imported_status = core.import_model(blob.data, blob.size, &imported);
    if (imported_status == Status::LimitExceeded) return;   // the blob holds folded constants too
    if (imported_status != Status::Ok) finding("import of an export failed", core.last_error());
    InferRequest again;
    if (imported.create_request(&again) != Status::Ok) finding("create_request on the import failed", imported.last_error());
    fill_inputs(again, imported, seed);
    if (again.infer() != Status::Ok) finding("inference of the import failed", again.last_error());
    if (!fuzz::same_outputs(request, again, compiled.output_count())) finding("the import computes other outputs", device);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > fuzz::kMaxInputBytes) return 0;
    ++g_stats.inputs;
    Model model;
    if (model.read_onnx(data, size) != Status::Ok) return 0;
    ++g_stats.read;
    if (model.graph.node_count() > 512) return 0;   // keeps each input fast
    uint64_t seed = 1469598103934665603ull;
    for (size_t i = 0; i < size; i += 61) seed = mix(seed, data[i]);
    run_device(model, "CPU", Span<const ConfigEntry>(), seed);
    static const char* const kTemplateOps[] = {"*", "Conv,Relu,Add", "MatMul,Gemm,Reshape,Transpose", "Gather,Concat,Slice,Mul",
                                               "Sigmoid,Tanh,Softmax,MaxPool",
                                               "If,Loop,Scan,Add"};   // a node with a body is one unit of its device
    ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", kTemplateOps[seed % 6]}};
    run_device(model, "HETERO:TEMPLATE,CPU", config, seed);
    return 0;
}
