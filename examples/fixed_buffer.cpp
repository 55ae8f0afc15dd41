// Firmware style: the graph and its partition live in one static buffer; nothing is
// allocated from the heap, and a buffer that is too small is an error, not a crash.
#define TESSEL_IMPLEMENTATION
#include "hetero.h"

#include <cstdio>

using namespace tessel;

static unsigned char memory[32 * 1024];

static Status run(size_t bytes) {
    Arena arena(memory, bytes);
    Graph graph(&arena);
    const char text[] = "in A\nconv A in\nnms B conv\npost A conv nms\nout A post\n";
    Status status = read_text(StringView(text, sizeof text - 1), &graph);
    if (status != Status::Ok) {
        std::printf("%6zu bytes: read_text: %s (%s)\n", bytes, status_name(status), graph.last_error());
        return status;
    }
    Partition result;
    status = partition(graph, PartitionOptions(), &arena, &result);
    if (status != Status::Ok) {
        std::printf("%6zu bytes: partition: %s\n", bytes, status_name(status));
        return status;
    }
    std::printf("%6zu bytes: %zu subgraphs, arena used %zu bytes\n", bytes, result.subgraphs.size, arena.used());
    return Status::Ok;
}

int main() {
    // Too small first, then the whole buffer.
    if (run(512) != Status::OutOfMemory) return 1;
    return run(sizeof memory) == Status::Ok ? 0 : 1;
}
