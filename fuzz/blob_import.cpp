// libFuzzer harness: compiled-model blob bytes -> Core::import_model -> create_request -> infer.
// A blob carries an FNV-1a checksum, so almost every mutation would stop at it: when the bytes
// start with the blob magic and header byte 12 is zero, the harness rewrites the header's
// payload size and checksum to match the bytes, and the import parses the mutated payload
// itself. Otherwise the bytes go in unchanged (the header checks). Limits are low, so no blob
// can make the harness allocate much. A crash, a sanitizer report or a second inference that
// differs from the first is a finding.
//   clang++ -g -O1 -std=c++17 -I. -fsanitize=fuzzer,address,undefined fuzz/blob_import.cpp -lasmjit
// Seeds: `make fuzz` writes blobs with `tessel compile` (scripts/fuzz-seeds.sh).
#define TESSEL_IMPLEMENTATION
#include "runtime.h"
#include "fuzz/fuzz_stats.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace tessel;

namespace {

// FUZZ_STATS=1 prints at exit how far the inputs got (read, compiled, inferred).
FuzzStats g_stats;

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
    if (size > (1u << 20)) return 0;
    std::vector<uint8_t> blob(data, data + size);
    if (size >= 32 && std::memcmp(data, "TESSELCM", 8) == 0 && data[12] == 0) {
        uint64_t payload = size - 32, hash = tessel::detail::hash_bytes(blob.data() + 32, size - 32);
        for (int i = 0; i < 8; ++i) blob[16 + i] = (uint8_t)(payload >> (8 * i));
        for (int i = 0; i < 8; ++i) blob[24 + i] = (uint8_t)(hash >> (8 * i));
    }
    ++g_stats.inputs;
    Core core;
    core.limits().max_nodes = 2048;
    core.limits().max_tensor_elements = 1u << 16;
    core.limits().max_arena_bytes = 4u << 20;
    core.limits().max_folded_bytes = 1u << 20;
    core.limits().max_file_bytes = 1u << 20;
    CompiledModel compiled;
    // The blob is copied by import_model: give it an exact-size heap buffer so ASan sees reads past it.
    uint8_t* exact = static_cast<uint8_t*>(std::malloc(size ? size : 1));
    if (!exact) std::abort();
    if (size) std::memcpy(exact, blob.data(), size);
    Status s = core.import_model(exact, size, &compiled);
    std::free(exact);
    if (s != Status::Ok) return 0;
    ++g_stats.read;
    ++g_stats.compiled;
    InferRequest request;
    if (compiled.create_request(&request) != Status::Ok) return 0;
    fill_inputs(request, compiled);
    if (request.infer() != Status::Ok) return 0;
    ++g_stats.inferred;
    std::vector<std::vector<uint8_t>> first;
    for (uint32_t o = 0; o < compiled.output_count(); ++o) {
        const Tensor& t = request.output(o);
        const uint8_t* p = static_cast<const uint8_t*>(t.data());
        first.emplace_back(p, p + t.bytes());
    }
    fill_inputs(request, compiled);
    if (request.infer() != Status::Ok) {
        std::fprintf(stderr, "FINDING: second inference failed: %s\n", request.last_error());
        std::abort();
    }
    for (uint32_t o = 0; o < compiled.output_count(); ++o) {
        const Tensor& t = request.output(o);
        if (t.bytes() != first[o].size() || (t.bytes() && std::memcmp(t.data(), first[o].data(), t.bytes()) != 0)) {
            std::fprintf(stderr, "FINDING: second inference differs (output %u)\n", o);
            std::abort();
        }
    }
    return 0;
}
