// libFuzzer harness: compiled-model blob bytes -> Core::import_model -> create_request -> infer.
// A blob carries an FNV-1a checksum, so almost every mutation would stop at it: when the bytes
// start with the blob magic and header byte 12 is zero, the harness rewrites the header's
// payload size and checksum to match the bytes, and the import parses the mutated payload
// itself. Otherwise the bytes go in unchanged (the header checks). Limits are low, so no blob
// can make the harness allocate much. A crash, a sanitizer report or a second inference that
// differs from the first is a finding.
//   clang++ -g -O1 -std=c++17 -I. -fsanitize=fuzzer,address,undefined fuzz/blob_import.cpp -lasmjit
// Seeds: `make fuzz` writes blobs with `tessel compile` (scripts/fuzz-seeds.sh).
#include "fuzz/fuzz_common.h"

using namespace tessel;
using fuzz::g_stats;

namespace {

void fill_inputs(InferRequest& request, const CompiledModel& compiled) {
    for (uint32_t i = 0; i < compiled.input_count(); ++i) {
        Tensor& t = request.input(i);
        unsigned char* p = static_cast<unsigned char*>(t.data());
        size_t bytes = t.bytes();
        if (t.type() == ElementType::Float32) {
            for (uint64_t k = 0; k < t.elements(); ++k) t.data_as<float>()[k] = (float)((int)(k % 13) - 6) * 0.375f;
        } else {
            for (size_t k = 0; k < bytes; ++k) p[k] = (unsigned char)(k % 3);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > fuzz::kMaxInputBytes) return 0;
    // An exact-size heap copy (import_model copies it again), so ASan sees reads past it.
    uint8_t* blob = static_cast<uint8_t*>(std::malloc(size ? size : 1));
    if (!blob) std::abort();
    if (size) std::memcpy(blob, data, size);
    if (size >= 32 && std::memcmp(data, "TESSELCM", 8) == 0 && data[12] == 0) {
        uint64_t payload = size - 32, hash = tessel::detail::hash_bytes(blob + 32, size - 32);
        for (int i = 0; i < 8; ++i) blob[16 + i] = (uint8_t)(payload >> (8 * i));
        for (int i = 0; i < 8; ++i) blob[24 + i] = (uint8_t)(hash >> (8 * i));
    }
    ++g_stats.inputs;
    Core core;
    fuzz::set_small_limits(core.limits());
    CompiledModel compiled;
    Status s = core.import_model(blob, size, &compiled);
    std::free(blob);
    if (s != Status::Ok) return 0;
    ++g_stats.read;
    ++g_stats.compiled;
    InferRequest request;
    if (compiled.create_request(&request) != Status::Ok) return 0;
    fuzz::infer_twice(request, compiled, fill_inputs, "an imported blob");
    return 0;
}
