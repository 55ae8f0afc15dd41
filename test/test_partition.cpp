// hetero.h part 2: the partitioners (rollback, levels, waves), constraints, the post-pass,
// check_partition and reasons.
#include <doctest/doctest.h>
#include <algorithm>
#include <random>
#include <string>
#include <vector>
#include "test_helpers.h"

using namespace tessel;

namespace {

// "<device>: <names in id order>" per subgraph, in commit order, like `tessel partition`.
std::string describe(const Graph& graph, const Partition& p) {
    std::string out;
    for (const Subgraph& s : p.subgraphs) {
        out += test::to_string(graph.device_name(s.device)) + ":";
        for (NodeId v : s.nodes) out += " " + test::to_string(graph.node(v).name);
        out += "\n";
    }
    return out;
}

struct Run {
    Arena arena;
    Graph graph{&arena};
    Partition result;
    std::string trace;
    Status status = Status::Ok;
    Run(const std::string& text, PartitionAlgorithm algorithm, bool naive = false, bool with_trace = false,
        std::vector<std::string> devices = {}) {
        REQUIRE(test::read(text, &graph) == Status::Ok);
        std::vector<StringView> views;
        for (const std::string& d : devices) views.push_back(StringView(d.data(), d.size()));
        PartitionOptions options;
        options.algorithm = algorithm;
        options.tuning.naive_closure = naive;
        options.devices = Span<const StringView>(views.data(), views.size());
        if (with_trace) { options.trace = test::append_to_string; options.trace_user = &trace; }
        status = partition(graph, options, &arena, &result);
    }
    std::string text() { return describe(graph, result); }
    Status check() { return check_partition(graph, &result); }
};

const char* kSeedGraph = "1 A\n2 A 1\n3 A 2\n4 B 2\n5 A 3 4\n6 A 5\n7 A 6\n";
const char* kDeadlockGraph = "x A\ny B\na A x\nd B y\nb B a y\nc A x d\n";
// The clustering note's graphs: X0 is unsupported (device CPU), B0 needs A0's value, and in
// graph0 also A4's value.
const char* kNoteGraph0 = "A0 ACC\nA1 ACC A0\nA2 ACC A1 A0\nX0 CPU A2\nA3 ACC X0\nA4 ACC X0\nB0 ACC !A0 !A4\n";
const char* kNoteGraph1 = "A0 ACC\nA1 ACC A0\nA2 ACC A1 A0\nX0 CPU A2\nA3 ACC X0\nA4 ACC X0\nB0 ACC !A0 A4\n";

}  // namespace

TEST_CASE("rollback: the hetero seed's example gives exactly its partition") {
    for (bool naive : {false, true}) {
        Run run(kSeedGraph, PartitionAlgorithm::Rollback, naive);
        REQUIRE(run.status == Status::Ok);
        CHECK(run.text() == "A: 3 5 6 7\nA: 1 2\nB: 4\n");
        CHECK(run.check() == Status::Ok);
        CHECK(run.result.cross_edges == 3);
        CHECK(run.result.boundaries.size == 3);
    }
}

TEST_CASE("rollback: the trace tells each step in the seed's words") {
    // Tessel's order differs from the seed's walk-through: a node's other-device neighbours
    // are rejected before its own are merged, so fewer merges are rolled back later. The
    // candidates and the result are the seed's.
    Run run(kSeedGraph, PartitionAlgorithm::Rollback, false, true);
    REQUIRE(run.status == Status::Ok);
    CHECK(run.trace ==
          "A: round 1, possible roots [1,2,3,5,6,7]\n"
          "  select root 1\n"
          "  merge 2\n"
          "  failed to merge 4: other device\n"
          "  merge 3\n"
          "  merge 5\n"
          "  rollback 5: self-reference through 4\n"
          "  end: [1,2,3]\n"
          "  select root 5\n"
          "  failed to merge 4: other device\n"
          "  merge 6\n"
          "  merge 7\n"
          "  merge 3\n"
          "  merge 2\n"
          "  rollback 2: self-reference through 4\n"
          "  end: [3,5,6,7]\n"
          "  commit [3,5,6,7]\n"
          "A: round 2, possible roots [1,2]\n"
          "  select root 1\n"
          "  merge 2\n"
          "  failed to merge 4: other device\n"
          "  end: [1,2]\n"
          "  commit [1,2]\n"
          "B: round 1, possible roots [4]\n"
          "  select root 4\n"
          "  end: [4]\n"
          "  commit [4]\n");
}

TEST_CASE("rollback: two subgraphs that feed each other are never returned (issue example)") {
    for (bool naive : {false, true}) {
        Run run(kDeadlockGraph, PartitionAlgorithm::Rollback, naive);
        REQUIRE(run.status == Status::Ok);
        CHECK(run.text() == "A: x a c\nB: y d\nB: b\n");
        CHECK(run.check() == Status::Ok);
        const NodeId b = run.graph.find("b");
        CHECK(run.result.placements[b].reason == PlacementReason::CycleThrough);
        if (!naive)  // the naive checker names some blocked node on the path, not the first
            CHECK(test::to_string(run.graph.node(run.result.placements[b].other).name) == "c");
    }
}

TEST_CASE("rollback: a node of another device blocks the candidate before the growth touches it") {
    // a reaches e (device B) through c, and e reaches j through i. The seed's walk learns
    // of e only at i's neighbours: it merges j, h, g, i and then rolls all four back
    // (A{b,d,f,g,h,i,j} then A{a,c}). Tessel knows e from the start, so merging j fails
    // alone, before the growth ever reaches e (found by a random search against the
    // earlier behaviour, then reduced).
    const char* graph = "a A\nb A a\nc A a\nd A b\ne B c\nf A d\ng A d\nh A g\ni A e\nj A f h i\n";
    for (bool naive : {false, true}) {
        Run run(graph, PartitionAlgorithm::Rollback, naive);
        REQUIRE(run.status == Status::Ok);
        CHECK(run.text() == "A: a b c d f g h\nA: i j\nB: e\n");
        CHECK(run.check() == Status::Ok);
        CHECK(run.result.placements[run.graph.find("j")].reason == PlacementReason::CycleThrough);
    }
    Run run(graph, PartitionAlgorithm::Rollback, false, true);
    REQUIRE(run.status == Status::Ok);
    CHECK(run.trace.rfind("A: round 1, possible roots [a,b,c,d,f,g,h,i,j]\n"
                          "  select root a\n"
                          "  merge b\n"
                          "  merge d\n"
                          "  merge f\n"
                          "  merge j\n"
                          "  rollback j: self-reference through e\n"
                          "  merge g\n"
                          "  merge h\n"
                          "  merge c\n"
                          "  failed to merge e: other device\n"
                          "  end: [a,b,c,d,f,g,h]\n", 0) == 0);
}

TEST_CASE("check_partition: the seed's one-subgraph-at-a-time result is caught as a cycle") {
    Run run(kDeadlockGraph, PartitionAlgorithm::Rollback);
    REQUIRE(run.status == Status::Ok);
    // Build the deadlocking partition A{x,a,c} B{y,d,b} by hand.
    Graph& g = run.graph;
    std::vector<NodeId> a = {g.find("x"), g.find("a"), g.find("c")};
    std::vector<NodeId> b = {g.find("y"), g.find("d"), g.find("b")};
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    Subgraph subgraphs[2];
    subgraphs[0].device = g.find_device("A");
    subgraphs[0].nodes = Span<const NodeId>(a.data(), a.size());
    subgraphs[1].device = g.find_device("B");
    subgraphs[1].nodes = Span<const NodeId>(b.data(), b.size());
    std::vector<uint32_t> of(g.node_count());
    for (NodeId v : a) of[v] = 0;
    for (NodeId v : b) of[v] = 1;
    uint32_t order[] = {0, 1};
    BoundaryTensor boundaries[] = {{g.find("a"), 0, g.find("b"), 0, 1}, {g.find("d"), 0, g.find("c"), 1, 0}};
    Partition bad;
    bad.subgraphs = Span<const Subgraph>(subgraphs, 2);
    bad.subgraph_of = Span<const uint32_t>(of.data(), of.size());
    bad.boundaries = Span<const BoundaryTensor>(boundaries, 2);
    bad.execution_order = Span<const uint32_t>(order, 2);
    bad.cross_edges = 2;
    CHECK(check_partition(g, &bad) == Status::InvalidPartition);
    CHECK(std::string(bad.last_error()) == "the graph of subgraphs has a cycle (through subgraph 0)");
}

TEST_CASE("check_partition: every kind of fault has its message") {
    Run run(kSeedGraph, PartitionAlgorithm::Rollback);
    REQUIRE(run.status == Status::Ok);
    Graph& g = run.graph;
    Partition good = run.result;
    REQUIRE(check_partition(g, &good) == Status::Ok);
    std::vector<uint32_t> of(good.subgraph_of.begin(), good.subgraph_of.end());
    SUBCASE("subgraph_of disagrees with the lists") {
        Partition p = good;
        of[g.find("1")] = 0;
        p.subgraph_of = Span<const uint32_t>(of.data(), of.size());
        CHECK(check_partition(g, &p) == Status::InvalidPartition);
        CHECK(std::string(p.last_error()) == "node '1' is listed in subgraph 1 but subgraph_of says 0");
    }
    SUBCASE("wrong device") {
        Partition p = good;
        std::vector<Subgraph> subgraphs(good.subgraphs.begin(), good.subgraphs.end());
        subgraphs[2].device = g.find_device("A");
        p.subgraphs = Span<const Subgraph>(subgraphs.data(), subgraphs.size());
        CHECK(check_partition(g, &p) == Status::InvalidPartition);
        CHECK(std::string(p.last_error()) == "node '4' (affinity B) is in subgraph 2 of device A");
    }
    SUBCASE("a node in no subgraph") {
        Partition p = good;
        std::vector<Subgraph> subgraphs(good.subgraphs.begin(), good.subgraphs.end());
        subgraphs.pop_back();
        p.subgraphs = Span<const Subgraph>(subgraphs.data(), subgraphs.size());
        CHECK(check_partition(g, &p) == Status::InvalidPartition);
        CHECK(std::string(p.last_error()) == "node '4' is in no subgraph");
    }
    SUBCASE("a missing boundary") {
        Partition p = good;
        p.boundaries = Span<const BoundaryTensor>(good.boundaries.data, 1);
        CHECK(check_partition(g, &p) == Status::InvalidPartition);
        CHECK(std::string(p.last_error()).find("no boundary tensor for") == 0);
    }
    SUBCASE("an execution order against the data") {
        Partition p = good;
        std::vector<uint32_t> order(good.execution_order.begin(), good.execution_order.end());
        std::reverse(order.begin(), order.end());
        p.execution_order = Span<const uint32_t>(order.data(), order.size());
        CHECK(check_partition(g, &p) == Status::InvalidPartition);
        CHECK(std::string(p.last_error()).find("execution_order runs subgraph") == 0);
    }
}

TEST_CASE("partition: the clustering note's graph0 and graph1") {
    SUBCASE("rollback") {
        Run g0(kNoteGraph0, PartitionAlgorithm::Rollback);
        REQUIRE(g0.status == Status::Ok);
        CHECK(g0.text() == "ACC: A0 A1 A2\nACC: A3\nACC: A4\nACC: B0\nCPU: X0\n");
        CHECK(g0.check() == Status::Ok);
        CHECK(g0.result.placements[g0.graph.find("B0")].reason == PlacementReason::KeepApart);
        Run g1(kNoteGraph1, PartitionAlgorithm::Rollback);
        REQUIRE(g1.status == Status::Ok);
        CHECK(g1.text() == "ACC: A0 A1 A2\nACC: A4 B0\nACC: A3\nCPU: X0\n");
        CHECK(g1.check() == Status::Ok);
    }
    SUBCASE("levels") {
        Run g0(kNoteGraph0, PartitionAlgorithm::Levels);
        REQUIRE(g0.status == Status::Ok);
        CHECK(g0.text() == "ACC: A0 A1 A2\nCPU: X0\nACC: A3\nACC: A4\nACC: B0\n");
        CHECK(g0.check() == Status::Ok);
        Run g1(kNoteGraph1, PartitionAlgorithm::Levels);
        REQUIRE(g1.status == Status::Ok);
        CHECK(g1.text() == "ACC: A0 A1 A2\nCPU: X0\nACC: A3\nACC: A4 B0\n");
        CHECK(g1.check() == Status::Ok);
    }
    SUBCASE("waves") {
        Run g0(kNoteGraph0, PartitionAlgorithm::Waves);
        REQUIRE(g0.status == Status::Ok);
        CHECK(g0.text() == "ACC: A0 A1 A2\nCPU: X0\nACC: A3 A4\nACC: B0\n");
        CHECK(g0.check() == Status::Ok);
        Run g1(kNoteGraph1, PartitionAlgorithm::Waves);
        REQUIRE(g1.status == Status::Ok);
        CHECK(g1.text() == "ACC: A0 A1 A2\nCPU: X0\nACC: A3 A4 B0\n");
        CHECK(g1.check() == Status::Ok);
    }
}

TEST_CASE("partition: levels and waves on the seed's example") {
    Run levels(kSeedGraph, PartitionAlgorithm::Levels);
    REQUIRE(levels.status == Status::Ok);
    CHECK(levels.text() == "A: 1 2 3\nB: 4\nA: 5 6 7\n");
    CHECK(levels.check() == Status::Ok);
    Run waves(kSeedGraph, PartitionAlgorithm::Waves);
    REQUIRE(waves.status == Status::Ok);
    CHECK(waves.text() == "A: 1 2 3\nB: 4\nA: 5 6 7\n");
    CHECK(waves.check() == Status::Ok);
}

TEST_CASE("partition: device order decides who goes first") {
    Run run(kSeedGraph, PartitionAlgorithm::Rollback, false, false, {"B", "A"});
    REQUIRE(run.status == Status::Ok);
    CHECK(run.text() == "B: 4\nA: 3 5 6 7\nA: 1 2\n");
    CHECK(run.check() == Status::Ok);
}

TEST_CASE("partition: every bad input has its status and message") {
    Arena arena;
    Partition result;
    PartitionOptions options;
    SUBCASE("not finalized") {
        Graph graph(&arena);
        REQUIRE(graph.add_node(NodeSpec{"a", "", "A", {}, 1}) == Status::Ok);
        CHECK(partition(graph, options, &arena, &result) == Status::NotFinalized);
        CHECK(std::string(result.last_error()) == "partition: the graph is not finalized");
    }
    SUBCASE("node without affinity") {
        Graph graph(&arena);
        REQUIRE(test::read("a A\nb - a\n", &graph) == Status::Ok);
        CHECK(partition(graph, options, &arena, &result) == Status::InvalidArgument);
        CHECK(std::string(result.last_error()) == "node 'b' has no affinity");
    }
    SUBCASE("affinity not in the device list") {
        Graph graph(&arena);
        REQUIRE(test::read("a A\nb B a\n", &graph) == Status::Ok);
        StringView devices[] = {"A"};
        options.devices = devices;
        CHECK(partition(graph, options, &arena, &result) == Status::InvalidArgument);
        CHECK(std::string(result.last_error()) == "node 'b' has affinity 'B', which is not in the device list");
    }
    SUBCASE("device listed twice") {
        Graph graph(&arena);
        REQUIRE(test::read("a A\n", &graph) == Status::Ok);
        StringView devices[] = {"A", "A"};
        options.devices = devices;
        CHECK(partition(graph, options, &arena, &result) == Status::InvalidArgument);
        CHECK(std::string(result.last_error()) == "device 'A' is listed twice");
    }
    SUBCASE("naive closure above its limit") {
        Graph graph(&arena);
        REQUIRE(test::read("a A\nb A a\n", &graph) == Status::Ok);
        options.tuning.naive_closure = true;
        options.tuning.max_closure_bytes = 8;
        CHECK(partition(graph, options, &arena, &result) == Status::LimitExceeded);
        CHECK(std::string(result.last_error()) == "naive closure needs 16 bytes, above max_closure_bytes=8");
    }
    SUBCASE("out of memory in a fixed buffer") {
        static unsigned char buffer[1 << 16];
        Arena graph_arena;
        Graph graph(&graph_arena);
        REQUIRE(test::read(kSeedGraph, &graph) == Status::Ok);
        Arena small(buffer, sizeof buffer);
        for (PartitionAlgorithm a : {PartitionAlgorithm::Rollback, PartitionAlgorithm::Levels, PartitionAlgorithm::Waves}) {
            small.reset();
            options.algorithm = a;
            Arena tiny(buffer, 64);
            CHECK(partition(graph, options, &tiny, &result) == Status::OutOfMemory);
            CHECK(partition(graph, options, &small, &result) == Status::Ok);
        }
    }
    SUBCASE("algorithm names") {
        PartitionAlgorithm a;
        CHECK(parse_algorithm("levels", &a) == Status::Ok);
        CHECK(a == PartitionAlgorithm::Levels);
        CHECK(parse_algorithm("fastest", &a) == Status::InvalidArgument);
    }
}

TEST_CASE("affinities: first supporting device in priority order, user affinities win") {
    Arena arena;
    Graph graph(&arena);
    REQUIRE(test::read("a -\nb - a\nc CPU b\nd - c\n", &graph) == Status::Ok);
    StringView devices[] = {"NPU", "CPU"};
    // Device ids: CPU was interned by the file (0), NPU next (1).
    std::vector<uint64_t> supported = {0b11, 0b01, 0b11, 0b00};
    CHECK(assign_affinities(&graph, devices, supported.data()) == Status::InvalidArgument);
    CHECK(std::string(graph.last_error()) == "no listed device supports node 'd'");
    supported[3] = 0b10;
    REQUIRE(assign_affinities(&graph, devices, supported.data()) == Status::Ok);
    auto device_of = [&](const char* name) { return test::to_string(graph.device_name(graph.node(graph.find(name)).affinity)); };
    CHECK(device_of("a") == "NPU");
    CHECK(device_of("b") == "CPU");
    CHECK(device_of("c") == "CPU");
    CHECK(device_of("d") == "NPU");
}

TEST_CASE("post-pass: small subgraphs move into a supporting neighbour when it stays valid") {
    Arena arena;
    Graph graph(&arena);
    // One B node in an A chain: with A able to run it, the chain becomes one subgraph.
    REQUIRE(test::read("1 A\n2 A 1\n3 B 2\n4 A 3\n5 A 4\n", &graph) == Status::Ok);
    std::vector<uint64_t> supported(5, 0b01);  // A (id 0) supports everything
    supported[2] = 0b11;
    PartitionOptions options;
    options.min_subgraph_size = 2;
    options.supported = supported.data();
    Partition result;
    REQUIRE(partition(graph, options, &arena, &result) == Status::Ok);
    CHECK(describe(graph, result) == "A: 1 2 3\nA: 4 5\n");
    CHECK(check_partition(graph, &result, supported.data()) == Status::Ok);
    CHECK(check_partition(graph, &result) == Status::InvalidPartition);  // without the mask, 3 is misplaced
    CHECK(result.placements[2].reason == PlacementReason::Merged);
    // Without support the B node stays where it is.
    Partition kept;
    options.supported = nullptr;
    REQUIRE(partition(graph, options, &arena, &kept) == Status::Ok);
    CHECK(describe(graph, kept) == "A: 1 2\nA: 4 5\nB: 3\n");
}

TEST_CASE("placements: printable reasons") {
    Run run(kDeadlockGraph, PartitionAlgorithm::Rollback);
    REQUIRE(run.status == Status::Ok);
    std::string out;
    write_placements(run.graph, run.result, test::append_to_string, &out);
    CHECK(out ==
          "x A subgraph=0 root\n"
          "y B subgraph=1 root\n"
          "a A subgraph=0 grown x\n"
          "d B subgraph=1 grown y\n"
          "b B subgraph=2 cycle-through c\n"
          "c A subgraph=0 grown x\n");
}

TEST_CASE("dot: clusters by subgraph") {
    Run run(kSeedGraph, PartitionAlgorithm::Rollback);
    REQUIRE(run.status == Status::Ok);
    std::string dot;
    write_dot(run.graph, &run.result, test::append_to_string, &dot);
    CHECK(dot.find("subgraph cluster_0 {\n    label=\"#0 A\";\n    n2 [label=\"3\\nA\"") != std::string::npos);
    CHECK(dot.find("subgraph cluster_2 {\n    label=\"#2 B\";\n    n3 [label=\"4\\nB\"") != std::string::npos);
}

namespace {

// A random DAG in the text format, with node ids shuffled against the topological order,
// a few keep-apart edges and multi-output producers.
std::string random_graph(std::mt19937& rng, int n, int devices, bool keep_apart = true) {
    std::vector<int> perm(n);
    for (int i = 0; i < n; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);  // perm[i] = line of topological node i
    std::vector<std::string> lines(n);
    for (int i = 0; i < n; ++i) {
        std::string line = "n" + std::to_string(i) + " D" + std::to_string(rng() % devices) + " outputs=2";
        int inputs = i == 0 ? 0 : (int)(rng() % 4);
        for (int k = 0; k < inputs; ++k) {
            int p = (int)(rng() % i);
            // Mostly nearby producers, so the graphs are chain-like with side branches.
            if (rng() % 3) p = std::max(0, i - 1 - (int)(rng() % 4));
            line += std::string(" ") + (rng() % 10 == 0 && keep_apart ? "!" : "") + "n" + std::to_string(p) + ":" + std::to_string(rng() % 2);
        }
        lines[perm[i]] = line;
    }
    std::string text;
    for (const std::string& l : lines) text += l + "\n";
    return text;
}

}  // namespace

TEST_CASE("property: every algorithm's result passes check_partition; rollback equals the naive closure") {
    std::mt19937 rng(12345);
    int compared = 0, multi_step_rollbacks = 0;
    for (int iteration = 0; iteration < 3000; ++iteration) {
        int n = 1 + (int)(rng() % (iteration < 2500 ? 30 : 200));
        int devices = 1 + (int)(rng() % 3);
        std::string text = random_graph(rng, n, devices);
        CAPTURE(text);
        Arena arena;
        Graph graph(&arena);
        REQUIRE(test::read(text, &graph) == Status::Ok);
        std::vector<uint32_t> rollback;
        for (int algorithm = 0; algorithm < 4; ++algorithm) {
            PartitionOptions options;
            options.algorithm = algorithm == 3 ? PartitionAlgorithm::Rollback : (PartitionAlgorithm)algorithm;
            options.tuning.naive_closure = algorithm == 3;
            if (iteration % 7 == 0) options.min_subgraph_size = 3;
            Partition result;
            REQUIRE(partition(graph, options, &arena, &result) == Status::Ok);
            Status checked = check_partition(graph, &result);
            CAPTURE(algorithm);
            CAPTURE(result.last_error());
            CHECK(checked == Status::Ok);
            if (algorithm == 0) rollback.assign(result.subgraph_of.begin(), result.subgraph_of.end());
            if (algorithm == 3) {
                CHECK(std::vector<uint32_t>(result.subgraph_of.begin(), result.subgraph_of.end()) == rollback);
                ++compared;
            }
            if (algorithm == 0 && iteration % 10 == 0) {  // does the one-pass rollback undo several merges at times?
                std::string trace;
                options.trace = test::append_to_string;
                options.trace_user = &trace;
                Partition traced;
                REQUIRE(partition(graph, options, &arena, &traced) == Status::Ok);
                if (trace.find("\n  rollback ") != std::string::npos &&
                    trace.find("\n  rollback ", trace.find("\n  rollback ") + 1) == trace.find("\n", trace.find("\n  rollback ") + 1))
                    ++multi_step_rollbacks;
            }
        }
    }
    CHECK(compared == 3000);
    CHECK(multi_step_rollbacks > 10);
}

namespace {

// Layers of random width; each node reads 1-3 nodes of the two layers before it, ~10% of
// nodes on other devices, a few keep-apart edges: the bench's layered graphs in small, where
// a commit moves ranks under many cached candidates at once.
std::string layered_graph(std::mt19937& rng, int n, int devices, int width = 0, bool keep_apart = true) {
    if (width == 0) width = 4 + (int)(rng() % 24);
    std::string text;
    for (int i = 0; i < n; ++i) {
        std::string line = "n" + std::to_string(i) + " D" + std::to_string(rng() % 100 < 10 ? 1 + rng() % devices : 0);
        if (i >= width) {
            int layer_start = (i / width) * width;
            int span = layer_start >= 2 * width ? 2 * width : layer_start;
            int inputs = 1 + (int)(rng() % 3);
            for (int k = 0; k < inputs; ++k)
                line += std::string(" ") + (rng() % 30 == 0 && keep_apart ? "!" : "") + "n" + std::to_string(layer_start - 1 - (int)(rng() % span));
        }
        text += line + "\n";
    }
    return text;
}

// Rollback with the scalable checker and with the naive closure on one graph: both valid,
// the same subgraph for every node.
void check_rollback_equals_naive(const std::string& text) {
    CAPTURE(text);
    Arena arena;
    Graph graph(&arena);
    REQUIRE(test::read(text, &graph) == Status::Ok);
    std::vector<uint32_t> subgraph_of[2];
    for (int naive = 0; naive < 2; ++naive) {
        PartitionOptions options;
        options.tuning.naive_closure = naive == 1;
        Partition result;
        REQUIRE(partition(graph, options, &arena, &result) == Status::Ok);
        CHECK(check_partition(graph, &result) == Status::Ok);
        subgraph_of[naive].assign(result.subgraph_of.begin(), result.subgraph_of.end());
    }
    CHECK(subgraph_of[0].size() == graph.node_count());
    CHECK(subgraph_of[0] == subgraph_of[1]);
}

}  // namespace

TEST_CASE("property: rollback equals the naive closure on layered graphs (candidate cache, larger windows)") {
    std::mt19937 rng(2024);
    for (int iteration = 0; iteration < 300; ++iteration) {
        int n = 50 + (int)(rng() % 400);
        int devices = 1 + (int)(rng() % 2);
        check_rollback_equals_naive(layered_graph(rng, n, devices));
    }
}

TEST_CASE("rollback with a helper thread: the same partition, and the helper grew candidates") {
    // Speculation starts only on graphs of 32768 nodes or more and after growths of 256
    // nodes or more: two layered graphs of that size, each partitioned alone and with the
    // helper.
    std::mt19937 rng(77);
    for (int graph_index = 0; graph_index < 2; ++graph_index) {
        Arena arena;
        Graph graph(&arena);
        REQUIRE(test::read(layered_graph(rng, 33000, 1, 64), &graph) == Status::Ok);  // the bench's shape
        std::vector<uint32_t> subgraph_of[2];
        for (int run = 0; run < 2; ++run) {
            PartitionOptions options;
            options.threads = run == 0 ? 1 : 2;
            // On a loaded machine the helper may not be scheduled before the call ends: try
            // again (the partition must be the same whatever the helper did).
            for (int attempt = 0; attempt < 8; ++attempt) {
                Partition result;
                REQUIRE(partition(graph, options, &arena, &result) == Status::Ok);
                CHECK(check_partition(graph, &result) == Status::Ok);
                subgraph_of[run].assign(result.subgraph_of.begin(), result.subgraph_of.end());
                if (run == 0 || result.helper_growths > 0) {
                    CHECK((result.helper_growths > 0) == (run == 1));
                    break;
                }
                if (run == 1) CHECK(subgraph_of[0] == subgraph_of[1]);
                REQUIRE(attempt < 7);
            }
        }
        CHECK(subgraph_of[0] == subgraph_of[1]);
    }
}

namespace {

// Transformer-like chains as in bench/partition: blocks of a 12-op main path, a residual from
// the block input to its last op, a 3-node side branch; ~8% of nodes on other devices. Many
// commits along one chain, each staling only the candidates around it: the listing of roots
// is repaired, not rescanned, after each commit.
std::string chain_graph(std::mt19937& rng, int n, int devices) {
    std::vector<std::vector<int>> inputs(n);
    int block_input = 0, i = 1;
    while (i < n) {
        int start = i;
        for (int k = 0; k < 12 && i < n; ++k, ++i) inputs[i].push_back(i - 1);
        if (i < n) inputs[i - 1].push_back(block_input);
        int branch_from = start + (int)(rng() % 4);
        for (int k = 0; k < 3 && i < n; ++k, ++i) inputs[i].push_back(k == 0 ? branch_from : i - 1);
        if (i < n) { inputs[i].push_back(i - 1); inputs[i].push_back(start + 8 < n ? start + 8 : i - 1); ++i; }
        block_input = i - 1;
    }
    std::string text;
    for (int v = 0; v < n; ++v) {
        text += "n" + std::to_string(v) + " D" + std::to_string(rng() % 100 < 8 ? 1 + rng() % devices : 0);
        for (int p : inputs[v]) text += " n" + std::to_string(p);
        text += "\n";
    }
    return text;
}

}  // namespace

TEST_CASE("property: rollback equals the naive closure on transformer-like chains (listing repaired per commit)") {
    std::mt19937 rng(77);
    for (int iteration = 0; iteration < 150; ++iteration) {
        int n = 40 + (int)(rng() % 400);
        int devices = 1 + (int)(rng() % 2);
        check_rollback_equals_naive(chain_graph(rng, n, devices));
    }
}

namespace {

struct BitsetCounters { uint32_t bitset_growths = 0, bitset_fallbacks = 0, helper_growths = 0; };

// Partitions `text` with rollback: the naive closure, the floods only, and the element
// bitsets from the first growth (1 or 2 threads); all the same partition, all valid. Returns
// the bitset result's counters.
BitsetCounters rollback_with_bitsets(const std::string& text, bool naive, uint32_t threads = 1) {
    CAPTURE(text);
    Arena arena;
    Graph graph(&arena);
    REQUIRE(test::read(text, &graph) == Status::Ok);
    std::vector<uint32_t> subgraph_of[3];
    BitsetCounters counters;
    for (int run = naive ? 0 : 1; run < 3; ++run) {
        PartitionOptions options;
        options.tuning.naive_closure = run == 0;
        options.tuning.bitset_check = run == 2 ? BitsetCheck::Always : BitsetCheck::Never;
        options.threads = run == 2 ? threads : 1;
        Partition result;
        REQUIRE(partition(graph, options, &arena, &result) == Status::Ok);
        CHECK(check_partition(graph, &result) == Status::Ok);
        CHECK((result.bitset_growths > 0) == (run == 2));
        subgraph_of[run].assign(result.subgraph_of.begin(), result.subgraph_of.end());
        if (run == 2) counters = BitsetCounters{result.bitset_growths, result.bitset_fallbacks, result.helper_growths};
    }
    if (naive) CHECK(subgraph_of[0] == subgraph_of[2]);
    CHECK(subgraph_of[1] == subgraph_of[2]);
    return counters;
}

}  // namespace

TEST_CASE("property: rollback with element bitsets equals the naive closure (random, layered, chains)") {
    std::mt19937 rng(31337);
    for (int iteration = 0; iteration < 900; ++iteration) {
        const int n = 2 + (int)(rng() % (iteration < 600 ? 30 : 300));
        const int devices = 1 + (int)(rng() % 3);
        const int kind = iteration % 3;
        rollback_with_bitsets(kind == 0   ? random_graph(rng, n, devices, false)
                              : kind == 1 ? layered_graph(rng, n, devices, 0, false)
                                          : chain_graph(rng, n, devices),
                              true);
    }
}

TEST_CASE("rollback with element bitsets: a growth that leaves the windows goes on with floods") {
    // A chain of device A whose every node also feeds a node of device B: the first growth
    // merges the whole chain, its range holds 1500 elements, more than a window's 512.
    std::string text = "a0 A\nb0 B a0\n";
    for (int i = 1; i < 1500; ++i)
        text += "a" + std::to_string(i) + " A a" + std::to_string(i - 1) + "\nb" + std::to_string(i) + " B a" + std::to_string(i) + "\n";
    text += "c A a1499 b7\n";  // and one node that must stay out: a7 -> b7 -> c
    const BitsetCounters counters = rollback_with_bitsets(text, true);
    CHECK(counters.bitset_fallbacks > 0);
}

TEST_CASE("rollback with element bitsets: the helper thread reads them too; keep-apart edges or a trace turn them off") {
    std::mt19937 rng(99);
    const std::string text = layered_graph(rng, 33000, 1, 64, false);  // the bench's shape
    const BitsetCounters one = rollback_with_bitsets(text, false, 1);
    BitsetCounters two = rollback_with_bitsets(text, false, 2);
    for (int attempt = 1; attempt < 8 && two.helper_growths == 0; ++attempt)   // the helper was not scheduled
        two = rollback_with_bitsets(text, false, 2);
    CHECK(one.bitset_growths > 1000);
    CHECK(two.helper_growths > 0);
    CHECK(two.bitset_growths > 1000);
    for (bool keep_apart : {true, false}) {
        Arena arena;
        Graph graph(&arena);
        REQUIRE(test::read(keep_apart ? "a A\nb B a\nc A !a b\n" : "a A\nb B a\nc A a b\n", &graph) == Status::Ok);
        std::string trace;
        PartitionOptions options;
        options.tuning.bitset_check = BitsetCheck::Always;
        if (!keep_apart) {
            options.trace = test::append_to_string;
            options.trace_user = &trace;
        }
        Partition result;
        REQUIRE(partition(graph, options, &arena, &result) == Status::Ok);
        CHECK(describe(graph, result) == "A: a\nA: c\nB: b\n");
        CHECK(result.bitset_growths == 0);
        options.trace = nullptr;
        Partition untraced;
        REQUIRE(partition(graph, options, &arena, &untraced) == Status::Ok);
        CHECK((untraced.bitset_growths > 0) == !keep_apart);
    }
}

TEST_CASE("partition: a fixed arena of any size gives OutOfMemory or the full result, never a crash") {
    std::mt19937 rng(5);
    std::string text = layered_graph(rng, 160, 2);
    Arena graph_arena;
    Graph graph(&graph_arena);
    REQUIRE(test::read(text, &graph) == Status::Ok);
    static unsigned char buffer[1 << 20];
    for (PartitionAlgorithm a : {PartitionAlgorithm::Rollback, PartitionAlgorithm::Levels, PartitionAlgorithm::Waves}) {
        PartitionOptions options;
        options.algorithm = a;
        Arena roomy(buffer, sizeof buffer);
        Partition full;
        REQUIRE(partition(graph, options, &roomy, &full) == Status::Ok);
        const std::vector<uint32_t> expected(full.subgraph_of.begin(), full.subgraph_of.end());
        const size_t needed = roomy.used();
        CAPTURE(algorithm_name(a));
        int out_of_memory = 0;
        for (size_t size = 0; size <= needed + 64; size += 1 + needed / 300) {
            CAPTURE(size);
            Arena fixed(buffer, size);
            Partition result;
            Status status = partition(graph, options, &fixed, &result);
            if (status == Status::OutOfMemory) { ++out_of_memory; continue; }
            REQUIRE(status == Status::Ok);
            CHECK(std::vector<uint32_t>(result.subgraph_of.begin(), result.subgraph_of.end()) == expected);
        }
        CHECK(out_of_memory > 250);  // every size below what the run needs
    }
}

TEST_CASE("partition with a helper thread: a fixed arena too small gives OutOfMemory, never a crash or a hang") {
    // The helper stores candidates and grows the pools too; a failed allocation on either
    // thread must end the call with OutOfMemory. How much the run needs varies with what the
    // helper grew, so every size may end either way; a smaller one must still fail.
    std::mt19937 rng(78);
    Arena graph_arena;
    Graph graph(&graph_arena);
    REQUIRE(test::read(layered_graph(rng, 33000, 1, 64), &graph) == Status::Ok);
    std::vector<unsigned char> buffer((size_t)256 << 20);
    PartitionOptions options;
    options.threads = 2;
    std::vector<uint32_t> expected;
    size_t needed = 0;
    for (int attempt = 0; attempt < 8 && needed == 0; ++attempt) {   // until the helper was scheduled
        Arena roomy(buffer.data(), buffer.size());
        Partition full;
        REQUIRE(partition(graph, options, &roomy, &full) == Status::Ok);
        if (full.helper_growths == 0) continue;
        expected.assign(full.subgraph_of.begin(), full.subgraph_of.end());
        needed = roomy.used();
    }
    REQUIRE(needed > 0);
    for (size_t size = needed * 80 / 100; size < needed; size += needed / 50) {
        CAPTURE(size);
        Arena fixed(buffer.data(), size);
        Partition result;
        Status status = partition(graph, options, &fixed, &result);
        if (status == Status::OutOfMemory) continue;
        REQUIRE(status == Status::Ok);
        CHECK(std::vector<uint32_t>(result.subgraph_of.begin(), result.subgraph_of.end()) == expected);
    }
    // The sizes above may all succeed when the helper grew less than in the measured run; a
    // tenth of what that run took must fail.
    Arena tiny(buffer.data(), needed / 10);
    Partition result;
    CHECK(partition(graph, options, &tiny, &result) == Status::OutOfMemory);
}
