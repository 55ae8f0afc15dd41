// hetero.h part 1: the arena, the graph, finalize(), the text format and DOT output.
#include <doctest/doctest.h>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "test_helpers.h"

using namespace tessel;

TEST_CASE("arena: fixed buffer is used from its start, aligned, and never overflows") {
    alignas(64) unsigned char buffer[256];
    Arena arena(buffer, sizeof buffer);
    void* a = arena.allocate(10, 1);
    CHECK(a == buffer);
    void* b = arena.allocate(8, 64);
    CHECK(reinterpret_cast<uintptr_t>(b) % 64 == 0);
    CHECK(b == buffer + 64);
    CHECK(arena.used() == 72);
    CHECK(arena.reserved() == sizeof buffer);
    CHECK(arena.allocate(200, 1) == nullptr);  // 72 + 200 > 256: refused, state unchanged
    CHECK(arena.used() == 72);
    CHECK(arena.allocate(184, 1) != nullptr);  // exactly the rest
    CHECK(arena.allocate(1, 1) == nullptr);
    CHECK(arena.allocate(SIZE_MAX, 1) == nullptr);
    CHECK(arena.allocate_array<uint64_t>(SIZE_MAX / 4) == nullptr);  // count * size overflows
    arena.reset();
    CHECK(arena.used() == 0);
    CHECK(arena.allocate(1, 1) == buffer);
}

TEST_CASE("arena: bad alignment is refused") {
    Arena arena;
    CHECK(arena.allocate(8, 3) == nullptr);
    CHECK(arena.allocate(8, 0) == nullptr);
}

TEST_CASE("arena: heap blocks grow, large requests get their own block, reset frees") {
    Arena arena(1024);
    std::vector<char*> pointers;
    for (int i = 0; i < 100; ++i) {
        char* p = static_cast<char*>(arena.allocate(100, 16));
        REQUIRE(p != nullptr);
        CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0);
        std::memset(p, i, 100);
        pointers.push_back(p);
    }
    for (int i = 0; i < 100; ++i) CHECK(pointers[i][99] == (char)i);  // no overlap
    char* big = static_cast<char*>(arena.allocate(1 << 20, 4096));
    REQUIRE(big != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(big) % 4096 == 0);
    big[(1 << 20) - 1] = 1;
    CHECK(arena.reserved() >= (1u << 20));
    arena.reset();
    CHECK(arena.used() == 0);
    CHECK(arena.reserved() == 0);
}

TEST_CASE("arena: HugePages takes 8 MiB blocks once it holds 1 MiB, their 2 MiB pages advised as huge (Linux)") {
    Arena arena{Arena::HugePages{}};
    char* first = static_cast<char*>(arena.allocate(512 << 10, 64));   // a block of its own, as in Arena()
    REQUIRE(first != nullptr);
    CHECK(arena.reserved() < (1u << 20));
    char* second = static_cast<char*>(arena.allocate(600 << 10, 64));
    REQUIRE(second != nullptr);
    const size_t before = arena.reserved();
    CHECK(before >= (1u << 20));
    char* pooled = static_cast<char*>(arena.allocate(4096, 64));   // the first block of the pooled kind
    REQUIRE(pooled != nullptr);
    CHECK(arena.reserved() - before >= (8u << 20));
    char* next = static_cast<char*>(arena.allocate(3 << 20, 64));   // in the same block: no new one
    REQUIRE(next != nullptr);
    CHECK(arena.reserved() - before < (9u << 20));
    std::memset(pooled, 1, 4096);
    std::memset(next, 2, 3 << 20);
    CHECK(next[(3 << 20) - 1] == 2);
    CHECK(pooled[4095] == 1);
    Arena plain;
    char* big = static_cast<char*>(plain.allocate(4 << 20, 64));   // one request of 2 MiB or more: advised too
    REQUIRE(big != nullptr);
    big[0] = 1;
    if (test::huge_advice_visible()) {
        const std::string pooled_flags = test::vm_flags_at(test::first_huge_page(next)), big_flags = test::vm_flags_at(test::first_huge_page(big));
        CHECK_MESSAGE(pooled_flags.find(" hg") != std::string::npos, pooled_flags);
        CHECK_MESSAGE(big_flags.find(" hg") != std::string::npos, big_flags);
    } else {
        MESSAGE("huge page advice not visible here (no transparent huge pages, or qemu): not checked");
    }
}

TEST_CASE("graph: build, finalize, successors, predecessors and topological order") {
    Arena arena;
    Graph graph(&arena);
    NodeId a, b, c;
    REQUIRE(graph.add_node(NodeSpec{"a", "Input", "CPU", {}, 1}, &a) == Status::Ok);
    InputRef b_inputs[] = {InputRef::by_id(a), InputRef::by_id(a)};  // reads a twice
    REQUIRE(graph.add_node(NodeSpec{"b", "Add", "GPU", b_inputs, 2}, &b) == Status::Ok);
    InputRef c_inputs[] = {InputRef::by_name("b", 1), InputRef::by_id(a, 0, true)};
    REQUIRE(graph.add_node(NodeSpec{"c", "Reshape", "", c_inputs, 1}, &c) == Status::Ok);
    REQUIRE(graph.finalize() == Status::Ok);
    CHECK(graph.node_count() == 3);
    CHECK(graph.edge_count() == 4);
    CHECK(graph.successors(a).size == 2);  // b listed once though it reads a twice
    CHECK(graph.successors(a)[0] == b);
    CHECK(graph.successors(a)[1] == c);
    CHECK(graph.predecessors(c).size == 2);
    CHECK(graph.predecessors(c)[0] == a);
    CHECK(graph.predecessors(c)[1] == b);
    CHECK(graph.node(c).inputs[0].producer == b);
    CHECK(graph.node(c).inputs[0].port == 1);
    CHECK(graph.node(c).inputs[1].keep_apart == 1);
    CHECK(graph.node(c).affinity == kNoDevice);
    CHECK(test::to_string(graph.device_name(graph.node(b).affinity)) == "GPU");
    CHECK(graph.find("c") == c);
    CHECK(graph.find("zz") == kNoNode);
    Span<const NodeId> order = graph.topological_order();
    CHECK(order[0] == a);
    CHECK(order[1] == b);
    CHECK(order[2] == c);
    CHECK(graph.node(a).op == graph.node(a).op);
    CHECK(test::to_string(graph.node(b).op) == "Add");
}

TEST_CASE("graph: share_attributes reads the payload in place; adding to the node leaves the shared list alone") {
    Arena arena;
    Graph source(&arena), copy(&arena);
    NodeSpec spec;
    spec.name = "conv";
    spec.op = "Conv";
    NodeId a = kNoNode, b = kNoNode;
    REQUIRE(source.add_node(spec, &a) == Status::Ok);
    REQUIRE(copy.add_node(spec, &b) == Status::Ok);
    int64_t pads[] = {1, 1, 1, 1};
    Attribute ints;
    ints.name = "pads";
    ints.kind = AttributeKind::Ints;
    ints.ints = Span<const int64_t>(pads, 4);
    Attribute group;
    group.name = "group";
    group.kind = AttributeKind::Int;
    group.i = 2;
    REQUIRE(source.add_attribute(a, ints) == Status::Ok);
    REQUIRE(source.add_attribute(a, group) == Status::Ok);
    REQUIRE(copy.share_attributes(b, source.node(a).attributes) == Status::Ok);
    const Attribute* shared = copy.find_attribute(b, "pads");
    REQUIRE(shared != nullptr);
    CHECK(shared != source.find_attribute(a, "pads"));                          // its own list entry
    CHECK(shared->ints.data == source.find_attribute(a, "pads")->ints.data);    // the same payload
    CHECK(shared->name.data == source.find_attribute(a, "pads")->name.data);
    REQUIRE(copy.find_attribute(b, "group") != nullptr);
    CHECK(copy.find_attribute(b, "group")->i == 2);
    Attribute alpha;
    alpha.name = "alpha";
    alpha.kind = AttributeKind::Float;
    alpha.f = 0.5f;
    REQUIRE(copy.add_attribute(b, alpha) == Status::Ok);
    CHECK(copy.find_attribute(b, "alpha") != nullptr);
    CHECK(source.find_attribute(a, "alpha") == nullptr);
    CHECK(source.find_attribute(a, "group")->next == nullptr);
    CHECK(copy.share_attributes(b, nullptr) == Status::Ok);   // an empty list adds nothing
    CHECK(copy.share_attributes(7, source.node(a).attributes) == Status::InvalidArgument);
}

TEST_CASE("graph: copy_shared reads the other graph's tables in place; descs, attributes and affinities are its own") {
    Arena arena;
    Graph source(&arena), copy(&arena);
    // 70 nodes: more than one block of 64. x -> n1 -> ... -> n69, n2 also reads x.
    NodeId x = kNoNode;
    NodeSpec input;
    input.name = "x";
    input.op = "Parameter";
    input.affinity = "CPU";
    REQUIRE(source.add_node(input, &x) == Status::Ok);
    std::vector<std::string> names;
    for (int i = 1; i < 70; ++i) names.push_back("n" + std::to_string(i));
    for (int i = 1; i < 70; ++i) {
        InputRef refs[] = {InputRef::by_id((NodeId)(i - 1)), InputRef::by_id(x)};
        NodeSpec spec;
        spec.name = StringView(names[i - 1].c_str());
        spec.op = i % 2 ? "Relu" : "Add";
        spec.affinity = "GPU";
        spec.inputs = Span<const InputRef>(refs, i % 2 ? 1 : 2);
        REQUIRE(source.add_node(spec) == Status::Ok);
    }
    TensorDesc d;
    d.type = ElementType::Float32;
    d.rank = 2;
    d.dims[0] = 3;
    d.dims[1] = 5;
    REQUIRE(source.set_output_desc(x, 0, d) == Status::Ok);
    Attribute alpha;
    alpha.name = "alpha";
    alpha.kind = AttributeKind::Float;
    alpha.f = 0.5f;
    REQUIRE(source.add_attribute(65, alpha) == Status::Ok);
    CHECK(copy.copy_shared(source) == Status::InvalidArgument);   // not finalized yet
    REQUIRE(source.finalize() == Status::Ok);
    REQUIRE(copy.copy_shared(source) == Status::Ok);
    CHECK(copy.finalized());
    REQUIRE(copy.node_count() == 70);
    CHECK(copy.edge_count() == source.edge_count());
    for (NodeId id = 0; id < 70; ++id) {
        CHECK(copy.node(id).name.data == source.node(id).name.data);
        CHECK(copy.node(id).inputs == source.node(id).inputs);
        CHECK(copy.node(id).affinity == kNoDevice);
        CHECK(copy.successors(id).data == source.successors(id).data);
        CHECK(copy.find(copy.node(id).name) == id);
    }
    CHECK(copy.device_count() == 0);
    CHECK(copy.topological_order().data == source.topological_order().data);
    // Its own descs, attribute links and affinities.
    TensorDesc e = d;
    e.dims[0] = 8;
    REQUIRE(copy.set_output_desc(x, 0, e) == Status::Ok);
    CHECK(copy.node(x).outputs[0].dims[0] == 8);
    CHECK(source.node(x).outputs[0].dims[0] == 3);
    const Attribute* shared = copy.find_attribute(65, "alpha");
    REQUIRE(shared != nullptr);
    CHECK(shared != source.find_attribute(65, "alpha"));
    CHECK(shared->name.data == source.find_attribute(65, "alpha")->name.data);
    Attribute beta = alpha;
    beta.name = "beta";
    REQUIRE(copy.add_attribute(65, beta) == Status::Ok);
    CHECK(copy.find_attribute(65, "beta") != nullptr);
    CHECK(source.find_attribute(65, "beta") == nullptr);
    REQUIRE(copy.set_affinity(3, "NPU") == Status::Ok);
    CHECK(copy.device_name(copy.node(3).affinity) == StringView("NPU"));
    CHECK(source.device_name(source.node(3).affinity) == StringView("GPU"));
    CHECK(copy.copy_shared(source) == Status::InvalidArgument);   // not empty any more
    // A node added after the copy lands in the copy's own block and the copy finalizes again.
    InputRef last[] = {InputRef::by_id(69)};
    NodeSpec more;
    more.name = "tail";
    more.op = "Relu";
    more.inputs = Span<const InputRef>(last, 1);
    REQUIRE(copy.add_node(more) == Status::Ok);
    REQUIRE(copy.finalize() == Status::Ok);
    CHECK(copy.node_count() == 71);
    CHECK(source.node_count() == 70);
    CHECK(copy.successors(69).size == 1);
    CHECK(source.successors(69).size == 0);
}

TEST_CASE("graph: the topological order is the id order when ids are sorted, else Kahn's FIFO order") {
    // s0 -> n1 -> n3 <- s2: ids sorted, so the order is 0,1,2,3 (Kahn's FIFO would give 0,2,1,3).
    Arena arena;
    Graph sorted(&arena);
    InputRef n1_in[] = {InputRef::by_name("s0")};
    InputRef n3_in[] = {InputRef::by_name("n1"), InputRef::by_name("s2")};
    REQUIRE(sorted.add_node(NodeSpec{"s0", "Input", "", {}, 1}) == Status::Ok);
    REQUIRE(sorted.add_node(NodeSpec{"n1", "Relu", "", n1_in, 1}) == Status::Ok);
    REQUIRE(sorted.add_node(NodeSpec{"s2", "Input", "", {}, 1}) == Status::Ok);
    REQUIRE(sorted.add_node(NodeSpec{"n3", "Add", "", n3_in, 1}) == Status::Ok);
    REQUIRE(sorted.finalize() == Status::Ok);
    Span<const NodeId> order = sorted.topological_order();
    REQUIRE(order.size == 4);
    for (NodeId i = 0; i < 4; ++i) CHECK(order[i] == i);
    CHECK(!sorted.has_keep_apart());
    // a reads c, added after it: Kahn seeded with the sources b, c in id order, then a.
    Graph unsorted(&arena);
    InputRef a_in[] = {InputRef::by_name("c", 0, true)};
    REQUIRE(unsorted.add_node(NodeSpec{"a", "Relu", "", a_in, 1}) == Status::Ok);
    REQUIRE(unsorted.add_node(NodeSpec{"b", "Input", "", {}, 1}) == Status::Ok);
    REQUIRE(unsorted.add_node(NodeSpec{"c", "Input", "", {}, 1}) == Status::Ok);
    REQUIRE(unsorted.finalize() == Status::Ok);
    order = unsorted.topological_order();
    REQUIRE(order.size == 3);
    CHECK(order[0] == 1);
    CHECK(order[1] == 2);
    CHECK(order[2] == 0);
    CHECK(unsorted.has_keep_apart());
}

TEST_CASE("graph: ops are interned, so nodes share one copy of an op name") {
    Arena arena;
    Graph graph(&arena);
    REQUIRE(graph.add_node(NodeSpec{"x", "Relu", "", {}, 1}) == Status::Ok);
    REQUIRE(graph.add_node(NodeSpec{"y", "Relu", "", {}, 1}) == Status::Ok);
    REQUIRE(graph.finalize() == Status::Ok);
    CHECK(graph.node(0).op.data == graph.node(1).op.data);
}

TEST_CASE("graph: attributes and output descriptors") {
    Arena arena;
    Graph graph(&arena);
    NodeId id;
    REQUIRE(graph.add_node(NodeSpec{"conv", "Conv", "", {}, 1}, &id) == Status::Ok);
    int64_t pads[] = {1, 1, 1, 1};
    Attribute attribute;
    attribute.name = "pads";
    attribute.kind = AttributeKind::Ints;
    attribute.ints = Span<const int64_t>(pads, 4);
    REQUIRE(graph.add_attribute(id, attribute) == Status::Ok);
    pads[0] = 99;  // the graph holds its own copy
    Attribute group;
    group.name = "group";
    group.i = 2;
    REQUIRE(graph.add_attribute(id, group) == Status::Ok);
    const Attribute* found = graph.find_attribute(id, "pads");
    REQUIRE(found != nullptr);
    CHECK(found->ints.size == 4);
    CHECK(found->ints[0] == 1);
    CHECK(graph.find_attribute(id, "group")->i == 2);
    CHECK(graph.find_attribute(id, "strides") == nullptr);
    CHECK(graph.node(id).attributes->next->name == StringView("group"));  // insertion order
    TensorDesc desc;
    desc.type = ElementType::Float32;
    desc.rank = 4;
    desc.dims[0] = 1; desc.dims[1] = 8; desc.dims[2] = 16; desc.dims[3] = 16;
    CHECK(graph.node(id).outputs == nullptr);
    REQUIRE(graph.set_output_desc(id, 0, desc) == Status::Ok);
    CHECK(graph.node(id).outputs[0].dims[1] == 8);
    CHECK(graph.set_output_desc(id, 1, desc) == Status::PortOutOfRange);
    desc.rank = 9;
    CHECK(graph.set_output_desc(id, 0, desc) == Status::LimitExceeded);
    CHECK(graph.add_attribute(5, group) == Status::InvalidArgument);
}

TEST_CASE("graph: every bad input of finalize() has its own status and names the nodes") {
    Arena arena;
    SUBCASE("duplicate name") {
        Graph graph(&arena);
        CHECK(test::read("a A\nb A a\na B\n", &graph) == Status::DuplicateName);
        CHECK(std::string(graph.last_error()) == "node name 'a' is used twice (nodes #0 and #2)");
    }
    SUBCASE("dangling input by name") {
        Graph graph(&arena);
        CHECK(test::read("a A\nb A a zz\n", &graph) == Status::DanglingInput);
        CHECK(std::string(graph.last_error()) == "node 'b' input 1 names 'zz', which is not a node");
    }
    SUBCASE("dangling input by id") {
        Graph graph(&arena);
        InputRef inputs[] = {InputRef::by_id(7)};
        REQUIRE(graph.add_node(NodeSpec{"a", "", "", inputs, 1}) == Status::Ok);
        CHECK(graph.finalize() == Status::DanglingInput);
        CHECK(std::string(graph.last_error()) == "node 'a' input 0 refers to node #7, but the graph has 1 nodes");
    }
    SUBCASE("port out of range") {
        Graph graph(&arena);
        CHECK(test::read("a A outputs=2\nb A a:2\n", &graph) == Status::PortOutOfRange);
        CHECK(std::string(graph.last_error()) == "node 'b' input 0 reads port 2 of 'a', which has 2 output(s)");
    }
    SUBCASE("cycle") {
        Graph graph(&arena);
        CHECK(test::read("a A c\nb A a\nc A b\nd A\n", &graph) == Status::Cycle);
        CHECK(std::string(graph.last_error()) == "cycle through nodes 'a' <- 'c' <- 'b'");
    }
    SUBCASE("self loop") {
        Graph graph(&arena);
        CHECK(test::read("a A a\n", &graph) == Status::Cycle);
        CHECK(std::string(graph.last_error()) == "cycle: node 'a' reads its own output");
    }
    SUBCASE("cycle behind an acyclic prefix") {
        Graph graph(&arena);
        CHECK(test::read("s A\nx A s y\ny A x\n", &graph) == Status::Cycle);
        CHECK(std::string(graph.last_error()) == "cycle through nodes 'x' <- 'y'");
    }
    SUBCASE("empty name") {
        Graph graph(&arena);
        CHECK(graph.add_node(NodeSpec{"", "", "", {}, 1}) == Status::InvalidArgument);
    }
    SUBCASE("too many devices") {
        Graph graph(&arena);
        std::string text;
        for (int i = 0; i < 65; ++i) text += "n" + std::to_string(i) + " D" + std::to_string(i) + "\n";
        CHECK(test::read(text, &graph) == Status::LimitExceeded);
        CHECK(std::string(graph.last_error()) == "line 65: more than 64 devices named by affinities");
    }
}

TEST_CASE("text format: every malformed line is a ParseError naming the line") {
    Arena arena;
    struct Case { const char* text; const char* message; };
    const Case cases[] = {
        {"a\n", "line 1: expected '<name> <affinity> [inputs...]'"},
        {"a A\n\n  # only a comment\nb\n", "line 4: expected '<name> <affinity> [inputs...]'"},
        {"!a A\n", "line 1: '!a' is not a node name"},
        {"a A\nb A !\n", "line 2: '' is not an input name"},
        {"a A\nb A a:70000\n", "line 2: port in 'a:70000' is out of range (0 to 65535)"},
        {"a A outputs=0\n", "line 1: bad output count 'outputs=0' (1 to 65535)"},
        {"a A outputs=x\n", "line 1: bad output count 'outputs=x' (1 to 65535)"},
        {"a A\nb A =a\n", "line 2: '=a' is not an input name"},
    };
    for (const Case& c : cases) {
        Graph graph(&arena);
        CAPTURE(c.text);
        CHECK(test::read(c.text, &graph) == Status::ParseError);
        CHECK(std::string(graph.last_error()) == c.message);
    }
}

TEST_CASE("text format: the hetero seed's graph reads, and writes back the same text") {
    Arena arena;
    Graph graph(&arena);
    const std::string text = "1 A\n2 A 1\n3 A 2\n4 B 2\n5 A 3 4\n6 A 5\n7 A 6\n";
    REQUIRE(test::read("# the seed's example\n" + text, &graph) == Status::Ok);
    CHECK(graph.node_count() == 7);
    CHECK(graph.device_count() == 2);
    CHECK(test::to_string(graph.device_name(graph.node(graph.find("4")).affinity)) == "B");
    CHECK(test::write(graph) == text);
}

TEST_CASE("text format: round trip of ports, constraints, ops, outputs, no affinity, odd names") {
    Arena arena;
    const std::string text =
        "in - op=Input outputs=3\n"
        "x:y A op=Split in:2 !in\n"
        "r B op=Reshape x:y:0 !in:1\n"
        "tab\tC\tr\t# comment\r\n";
    Graph graph(&arena);
    REQUIRE(test::read(text, &graph) == Status::Ok);
    const Node& r = graph.node(graph.find("r"));
    CHECK(r.inputs[0].producer == graph.find("x:y"));
    CHECK(r.inputs[1].port == 1);
    CHECK(r.inputs[1].keep_apart == 1);
    CHECK(graph.node(graph.find("in")).affinity == kNoDevice);
    CHECK(graph.node(graph.find("in")).num_outputs == 3);
    const std::string written = test::write(graph);
    CHECK(written ==
          "in - op=Input outputs=3\n"
          "x:y A op=Split in:2 !in\n"
          "r B op=Reshape x:y:0 !in:1\n"
          "tab C r\n");
    Graph again(&arena);
    REQUIRE(test::read(written, &again) == Status::Ok);
    CHECK(test::write(again) == written);
}

TEST_CASE("text format: names that cannot be tokens are refused by the writer") {
    Arena arena;
    Graph graph(&arena);
    REQUIRE(graph.add_node(NodeSpec{"has space", "", "", {}, 1}) == Status::Ok);
    REQUIRE(graph.finalize() == Status::Ok);
    std::string out;
    CHECK(write_text(graph, test::append_to_string, &out) == Status::InvalidArgument);
}

TEST_CASE("text format: a line with many inputs") {
    Arena arena;
    Graph graph(&arena);
    std::string text = "";
    std::string sum = "sum A";
    for (int i = 0; i < 40; ++i) {
        text += "n" + std::to_string(i) + " A\n";
        sum += " n" + std::to_string(i);
    }
    REQUIRE(test::read(text + sum + "\n", &graph) == Status::Ok);
    CHECK(graph.node(graph.find("sum")).num_inputs == 40);
    CHECK(graph.predecessors(graph.find("sum")).size == 40);
}

TEST_CASE("graph: a fixed buffer that runs out gives OutOfMemory, never a crash") {
    std::string text;
    for (int i = 0; i < 200; ++i) text += "n" + std::to_string(i) + " A" + (i ? " n" + std::to_string(i - 1) : "") + "\n";
    static unsigned char buffer[1 << 20];
    size_t enough = 0;
    for (size_t size = 64; size <= sizeof buffer; size *= 2) {
        Arena arena(buffer, size);
        Graph graph(&arena);
        Status status = test::read(text, &graph);
        if (status == Status::Ok) { enough = size; break; }
        CHECK(status == Status::OutOfMemory);
    }
    CHECK(enough > 0);
}

TEST_CASE("graph: a million-node chain builds and finalizes without recursion") {
    Arena arena(1 << 20);
    Graph graph(&arena);
    const uint32_t n = 1000000;
    Status status = Status::Ok;
    char name[16];
    for (uint32_t i = 0; i < n && status == Status::Ok; ++i) {
        InputRef in = InputRef::by_id(i - 1);
        std::snprintf(name, sizeof name, "n%u", i);
        status = graph.add_node(NodeSpec{name, "Op", "A", Span<const InputRef>(&in, i ? 1 : 0), 1});
    }
    REQUIRE(status == Status::Ok);
    REQUIRE(graph.finalize() == Status::Ok);
    CHECK(graph.node_count() == n);
    CHECK(graph.topological_order()[n - 1] == n - 1);
    CHECK(graph.find("n999999") == n - 1);
    CHECK(arena.used() / n < 160);  // bytes per node, docs/performance.md
}

TEST_CASE("dot: nodes coloured by affinity") {
    Arena arena;
    Graph graph(&arena);
    REQUIRE(test::read("1 A\n2 B 1\n3 - 2\n", &graph) == Status::Ok);
    std::string dot;
    write_dot(graph, nullptr, test::append_to_string, &dot);
    CHECK(dot.find("digraph tessel {") == 0);
    CHECK(dot.find("n0 [label=\"1\\nA\", style=filled, fillcolor=\"#8dd3c7\"]") != std::string::npos);
    CHECK(dot.find("n1 [label=\"2\\nB\", style=filled, fillcolor=\"#ffffb3\"]") != std::string::npos);
    CHECK(dot.find("n2 [label=\"3\\n-\", style=filled, fillcolor=\"#ffffff\"]") != std::string::npos);
    CHECK(dot.find("n0 -> n1;") != std::string::npos);
    CHECK(dot.find("n1 -> n2;") != std::string::npos);
}

TEST_CASE("dot: quotes and backslashes in names and devices are escaped, keep-apart edges dashed") {
    Arena arena;
    Graph graph(&arena);
    REQUIRE(test::read("a\"b dev\\1\nc dev\\1 !a\"b\n", &graph) == Status::Ok);
    std::string dot;
    write_dot(graph, nullptr, test::append_to_string, &dot);
    CHECK(dot.find("n0 [label=\"a\\\"b\\ndev\\\\1\"") != std::string::npos);
    CHECK(dot.find("n0 -> n1 [style=dashed];") != std::string::npos);
}
