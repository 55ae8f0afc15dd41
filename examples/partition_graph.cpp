// Builds a small graph in code, lets an "NPU" take the ops it supports (the rest falls back
// to the CPU), and splits the graph between them with each algorithm.
#define TESSEL_IMPLEMENTATION
#include "hetero.h"

#include <cstdio>
#include <cstring>

using namespace tessel;

static void print(void*, const char* data, size_t size) { std::fwrite(data, 1, size, stdout); }

int main() {
    Arena arena;
    Graph graph(&arena);
    // input -> conv -> relu -> topk (NPU cannot) -> conv2 -> add(relu, conv2)
    struct Op { const char* name; const char* op; const char* inputs[2]; };
    const Op ops[] = {
        {"input", "Input", {nullptr, nullptr}}, {"conv", "Conv", {"input", nullptr}},
        {"relu", "Relu", {"conv", nullptr}},    {"topk", "TopK", {"relu", nullptr}},
        {"conv2", "Conv", {"topk", nullptr}},   {"add", "Add", {"relu", "conv2"}},
    };
    for (const Op& op : ops) {
        InputRef inputs[2];
        size_t count = 0;
        for (const char* in : op.inputs)
            if (in) inputs[count++] = InputRef::by_name(in);
        if (graph.add_node(NodeSpec{op.name, op.op, "", Span<const InputRef>(inputs, count), 1}) != Status::Ok) {
            std::printf("add_node: %s\n", graph.last_error());
            return 1;
        }
    }
    if (graph.finalize() != Status::Ok) { std::printf("finalize: %s\n", graph.last_error()); return 1; }

    // Device ids follow the priority list: bit 0 = NPU, bit 1 = CPU (the CPU runs everything).
    StringView devices[] = {"NPU", "CPU"};
    uint64_t supported[6];
    for (NodeId v = 0; v < graph.node_count(); ++v) {
        const Node& node = graph.node(v);
        bool npu = node.op == StringView("Conv") || node.op == StringView("Relu") || node.op == StringView("Add");
        supported[v] = (npu ? 1u : 0u) | 2u;
    }
    if (assign_affinities(&graph, devices, supported) != Status::Ok) {
        std::printf("assign_affinities: %s\n", graph.last_error());
        return 1;
    }
    const PartitionAlgorithm algorithms[] = {PartitionAlgorithm::Rollback, PartitionAlgorithm::Levels, PartitionAlgorithm::Waves};
    for (PartitionAlgorithm algorithm : algorithms) {
        PartitionOptions options;
        options.algorithm = algorithm;
        options.devices = devices;
        Partition result;
        if (partition(graph, options, &arena, &result) != Status::Ok || check_partition(graph, &result) != Status::Ok) {
            std::printf("partition: %s\n", result.last_error());
            return 1;
        }
        std::printf("== %s: %zu subgraphs, %zu boundary tensors\n", algorithm_name(algorithm), result.subgraphs.size,
                    result.boundaries.size);
        for (uint32_t k : result.execution_order) {
            const Subgraph& s = result.subgraphs[k];
            std::printf("  run #%u on %s:", k, graph.device_name(s.device).data);
            for (NodeId v : s.nodes) std::printf(" %s", graph.node(v).name.data);
            std::printf("\n");
        }
        write_placements(graph, result, print, nullptr);
    }
    return 0;
}
