// libFuzzer harness: graph text -> read_text -> every partition algorithm -> check_partition.
// Any input must give a Status or a valid partition; a crash, a sanitizer report, an invalid
// partition, or rollback differing from its naive-closure version is a finding. Rollback
// checks merges with element bitsets from the first growth on inputs of odd size, with floods
// on the others (graphs this small never reach the default threshold).
//   clang++ -g -O1 -fsanitize=fuzzer,address,undefined -std=c++17 -I. fuzz/graph_text.cpp
#define TESSEL_IMPLEMENTATION
#include "hetero.h"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static unsigned char buffer[1 << 22];  // a fixed arena: exhaustion must be OutOfMemory
    tessel::Arena arena(buffer, sizeof buffer);
    tessel::Graph graph(&arena);
    if (tessel::read_text(tessel::StringView(reinterpret_cast<const char*>(data), size), &graph) != tessel::Status::Ok)
        return 0;
    if (graph.node_count() > 2000) return 0;  // keep each run short
    tessel::Span<const uint32_t> rollback;    // the scalable checker's result, in the arena
    for (int a = 0; a < 4; ++a) {
        tessel::PartitionOptions options;
        options.algorithm = a == 3 ? tessel::PartitionAlgorithm::Rollback : (tessel::PartitionAlgorithm)a;
        options.tuning.naive_closure = a == 3;
        options.min_subgraph_size = size % 3;
        if (a == 0 && size % 2) options.tuning.bitset_check = tessel::BitsetCheck::Always;
        tessel::Partition result;
        tessel::Status status = tessel::partition(graph, options, &arena, &result);
        if (status == tessel::Status::OutOfMemory || status == tessel::Status::InvalidArgument) continue;
        if (status != tessel::Status::Ok) { std::fprintf(stderr, "partition: %s\n", result.last_error()); std::abort(); }
        if (tessel::check_partition(graph, &result) != tessel::Status::Ok) {
            std::fprintf(stderr, "invalid partition (%s): %s\n", tessel::algorithm_name(options.algorithm), result.last_error());
            std::abort();
        }
        if (a == 0) rollback = result.subgraph_of;
        if (a == 3 && rollback.size == result.subgraph_of.size)
            for (size_t i = 0; i < rollback.size; ++i)
                if (rollback[i] != result.subgraph_of[i]) {
                    std::fprintf(stderr, "rollback differs from the naive closure at node %zu\n", i);
                    std::abort();
                }
    }
    return 0;
}
