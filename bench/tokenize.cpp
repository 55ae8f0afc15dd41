// Tokenizer time on long elementwise chains (node i adds node i-1 and node i-3, 1x64 floats),
// with the default island cap (TokenizeOptions::max_island_nodes) and, as the baseline in the
// same run, without a cap (the whole chain one island: every merge is checked against it).
// Not a test: it prints.
//   make build/bench/tokenize && build/bench/tokenize
#define TESSEL_IMPLEMENTATION
#include "snippets.h"

#include <chrono>
#include <cstdio>
#include <string>

using namespace tessel;

namespace {

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool build_chain(Graph* g, uint32_t n) {
    int64_t dims[] = {1, 64};
    TensorDesc desc;
    desc.type = ElementType::Float32;
    desc.rank = 2;
    for (int i = 0; i < 2; ++i) desc.dims[i] = dims[i];
    for (uint32_t i = 0; i <= n; ++i) {
        std::string name = "v" + std::to_string(i);
        InputRef inputs[] = {InputRef::by_id(i ? i - 1 : 0), InputRef::by_id(i >= 4 ? i - 3 : 0)};
        NodeId id;
        if (g->add_node(NodeSpec{StringView(name.c_str()), i ? "Add" : "Input", "", Span<const InputRef>(inputs, i ? 2 : 0), 1}, &id) != Status::Ok ||
            g->set_output_desc(id, 0, desc) != Status::Ok)
            return false;
    }
    return g->finalize() == Status::Ok;
}

}  // namespace

int main() {
    std::printf("%8s %-9s %10s %8s\n", "nodes", "cap", "time_ms", "islands");
    for (uint32_t n : {2000u, 20000u, 100000u}) {
        Arena arena;
        Graph graph(&arena);
        if (!build_chain(&graph, n)) { std::printf("build failed: %s\n", graph.last_error()); return 1; }
        for (bool capped : {true, false}) {
            if (!capped && n > 20000) {
                std::printf("%8u %-9s %10s (skipped: quadratic)\n", n, "none", "-");
                continue;
            }
            TokenizeOptions options;
            if (!capped) options.max_island_nodes = 0xffffffffu;
            Arena scratch;
            Tokenization t;
            double start = now_ms();
            if (tokenize(graph, options, &scratch, &t) != Status::Ok) return 1;
            double elapsed = now_ms() - start;
            char cap[16];
            std::snprintf(cap, sizeof cap, "%u", options.max_island_nodes);
            std::printf("%8u %-9s %10.2f %8u\n", n, capped ? cap : "none", elapsed, t.island_count);
        }
    }
    return 0;
}
