// ONNX reader and TensorProto files. Every model is built here with test/protobuf_writer.h, so
// each case says what it contains; the conformance data of libonnx-testdata is read as well.
#include <doctest/doctest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime.h"
#include "protobuf_writer.h"
#include "test_helpers.h"

using tessel::AttributeKind;
using tessel::ElementType;
using tessel::Model;
using tessel::NodeId;
using tessel::Status;
using tessel::StringView;

namespace {

// ---- protobuf writer: test/protobuf_writer.h
using test::attr_float;
using test::attr_floats_unpacked;
using test::attr_int;
using test::attr_ints;
using test::attr_string;
using test::attr_tensor;
using test::graph;
using test::GraphSpec;
using test::model_proto;
using test::named_node;
using test::Pb;
using test::raw_of;
using test::tensor_raw;
using test::value_info;
using namespace test::onnx_type;

Status read(Model& model, const std::string& bytes, const std::string& folder = "") {
    return model.read_onnx(bytes.data(), bytes.size(), StringView(folder.data(), folder.size()));
}

std::string error_of(const Model& m) { return m.last_error(); }

// A model with one Relu reading `x` and writing `y`, plus the given initializer.
std::string relu_with(const Pb& initializer, const std::vector<std::string>& inputs = {"x"}) {
    GraphSpec g;
    g.nodes = {named_node("Relu", "r", inputs, {"y"})};
    g.initializers = {initializer};
    g.inputs = {value_info("x", FLOAT, {2})};
    g.outputs = {value_info("y", FLOAT, {2})};
    return model_proto(graph(g)).b;
}

// A model whose graph input is x and output y (both float [2]), with `nodes` between them.
std::string model_from_x_to_y(const std::vector<Pb>& nodes) {
    GraphSpec g;
    g.nodes = nodes;
    g.inputs = {value_info("x", FLOAT, {2})};
    g.outputs = {value_info("y", FLOAT, {2})};
    return model_proto(graph(g)).b;
}

NodeId find_node(const Model& m, const char* name) { return m.graph.find(StringView(name)); }

std::string producer_name(const Model& m, NodeId n, uint32_t input) {
    return test::to_string(m.graph.node(m.graph.node(n).inputs[input].producer).name);
}

// Add "first" (X + W -> t) with an attribute of each kind, then Mul "second" (t * `factor` -> Y).
std::vector<Pb> first_and_second(const std::string& factor) {
    Pb attr_t = tensor_raw("", INT32, {3}, raw_of(std::vector<int32_t>{10, -20, 30}));
    return {named_node("Add", "first", {"X", "W"}, {"t"},
                       {attr_int("axis", -3), attr_float("alpha", 0.25f), attr_string("mode", "linear"),
                        attr_ints("pads", {0, 1, 2, -1}), attr_floats_unpacked("scales", {1.0f, 2.5f}),
                        attr_tensor("value", attr_t)}),
            named_node("Mul", "second", {"t", factor}, {"Y"})};
}

// The small model of the first test: every kind of attribute, raw and typed initializers.
struct SmallModel {
    std::string bytes;
    std::string w_raw;
};

SmallModel small_model() {
    SmallModel s;
    std::vector<float> w = {1.5f, -2.0f, 3.25f, 4.0f};
    s.w_raw = raw_of(w);
    Pb b_typed;   // int64 via unpacked int64_data
    b_typed.packed(1, {2}).u(2, INT64).bytes(8, "B").i(7, -7).i(7, 9);
    Pb s_typed;   // float via packed float_data
    s_typed.packed(1, {1}).u(2, FLOAT).bytes(8, "S").packed_floats(4, {0.5f});
    GraphSpec g;
    g.nodes = first_and_second("S");
    g.initializers = {tensor_raw("W", FLOAT, {4}, s.w_raw), b_typed, s_typed};
    g.inputs = {value_info("X", FLOAT, {1, -1, 4}), value_info("W", FLOAT, {4})};
    g.outputs = {value_info("Y", FLOAT, {1, -1, 4})};
    s.bytes = model_proto(graph(g), 13).b;
    return s;
}

const char* kTestData = "/usr/share/libonnx-testdata/data";

bool is_dir(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void find_files(const std::string& dir, const std::string& suffix, bool prefix_io, std::vector<std::string>* out) {
    DIR* d = opendir(dir.c_str());
    if (!d) return;
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
    for (const std::string& n : names) {
        std::string path = dir + "/" + n;
        if (is_dir(path)) { find_files(path, suffix, prefix_io, out); continue; }
        bool match = n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
        if (prefix_io) match = match && (n.rfind("input_", 0) == 0 || n.rfind("output_", 0) == 0);
        if (match) out->push_back(path);
    }
}

}  // namespace

TEST_SUITE("onnx") {

TEST_CASE("a small model reads back exactly") {
    SmallModel s = small_model();
    Model m;
    REQUIRE_MESSAGE(read(m, s.bytes) == Status::Ok, error_of(m));
    CHECK(m.opset == 13);
    // W is both an initializer and a graph input: it is a constant, not an input.
    REQUIRE(m.input_count() == 1);
    CHECK(test::to_string(m.input(0).name) == "X");
    REQUIRE(m.output_count() == 1);
    CHECK(test::to_string(m.output(0).name) == "Y");
    // X, W, B, S, first, second, Y
    CHECK(m.graph.node_count() == 7);
    NodeId x = find_node(m, "X"), w = find_node(m, "W"), b = find_node(m, "B"), sc = find_node(m, "S");
    NodeId first = find_node(m, "first"), second = find_node(m, "second"), y = find_node(m, "Y");
    REQUIRE(x != tessel::kNoNode);
    REQUIRE(first != tessel::kNoNode);
    REQUIRE(second != tessel::kNoNode);
    REQUIRE(y != tessel::kNoNode);
    CHECK(test::to_string(m.graph.node(x).op) == "Parameter");
    CHECK(test::to_string(m.graph.node(w).op) == "Constant");
    CHECK(test::to_string(m.graph.node(first).op) == "Add");
    CHECK(test::to_string(m.graph.node(second).op) == "Mul");
    CHECK(test::to_string(m.graph.node(y).op) == "Result");
    // Shapes: the symbolic dim is negative.
    const tessel::TensorDesc& xd = m.graph.node(x).outputs[0];
    CHECK(xd.type == ElementType::Float32);
    REQUIRE(xd.rank == 3);
    CHECK(xd.dims[0] == 1);
    CHECK(xd.dims[1] < 0);
    CHECK(xd.dims[2] == 4);
    // Edges.
    REQUIRE(m.graph.node(first).num_inputs == 2);
    CHECK(producer_name(m, first, 0) == "X");
    CHECK(producer_name(m, first, 1) == "W");
    REQUIRE(m.graph.node(second).num_inputs == 2);
    CHECK(producer_name(m, second, 0) == "first");
    CHECK(producer_name(m, second, 1) == "S");
    CHECK(producer_name(m, y, 0) == "second");
    // Constants: raw float (in place when aligned), typed int64, packed typed float.
    const tessel::Attribute* wv = m.graph.find_attribute(w, "value");
    REQUIRE(wv != nullptr);
    REQUIRE(wv->kind == AttributeKind::Tensor);
    CHECK(wv->tensor->desc.type == ElementType::Float32);
    CHECK(wv->tensor->desc.rank == 1);
    CHECK(wv->tensor->desc.dims[0] == 4);
    REQUIRE(wv->tensor->bytes == 16);
    CHECK(std::memcmp(wv->tensor->data, s.w_raw.data(), 16) == 0);
    size_t raw_at = s.bytes.find(s.w_raw);
    REQUIRE(raw_at != std::string::npos);
    const char* in_file = s.bytes.data() + raw_at;
    if ((uintptr_t)in_file % 4 == 0) CHECK(wv->tensor->data == (const void*)in_file);
    else CHECK(wv->tensor->data != (const void*)in_file);
    CHECK((uintptr_t)wv->tensor->data % 4 == 0);
    const tessel::Attribute* bv = m.graph.find_attribute(b, "value");
    REQUIRE(bv != nullptr);
    CHECK(bv->tensor->desc.type == ElementType::Int64);
    REQUIRE(bv->tensor->bytes == 16);
    CHECK(static_cast<const int64_t*>(bv->tensor->data)[0] == -7);
    CHECK(static_cast<const int64_t*>(bv->tensor->data)[1] == 9);
    const tessel::Attribute* sv = m.graph.find_attribute(sc, "value");
    REQUIRE(sv != nullptr);
    REQUIRE(sv->tensor->bytes == 4);
    CHECK(static_cast<const float*>(sv->tensor->data)[0] == 0.5f);
    // Attributes of each kind, in file order.
    const tessel::Attribute* a = m.graph.node(first).attributes;
    REQUIRE(a != nullptr);
    CHECK(test::to_string(a->name) == "axis");
    CHECK(a->kind == AttributeKind::Int);
    CHECK(a->i == -3);
    a = a->next;
    REQUIRE(a != nullptr);
    CHECK(a->kind == AttributeKind::Float);
    CHECK(a->f == 0.25f);
    a = a->next;
    REQUIRE(a != nullptr);
    CHECK(a->kind == AttributeKind::String);
    CHECK(test::to_string(a->s) == "linear");
    a = a->next;
    REQUIRE(a != nullptr);
    CHECK(a->kind == AttributeKind::Ints);
    REQUIRE(a->ints.size == 4);
    CHECK(a->ints[0] == 0);
    CHECK(a->ints[3] == -1);
    a = a->next;
    REQUIRE(a != nullptr);
    CHECK(a->kind == AttributeKind::Floats);
    REQUIRE(a->floats.size == 2);
    CHECK(a->floats[0] == 1.0f);
    CHECK(a->floats[1] == 2.5f);
    a = a->next;
    REQUIRE(a != nullptr);
    CHECK(test::to_string(a->name) == "value");
    CHECK(a->kind == AttributeKind::Tensor);
    CHECK(a->tensor->desc.type == ElementType::Int32);
    REQUIRE(a->tensor->bytes == 12);
    CHECK(static_cast<const int32_t*>(a->tensor->data)[1] == -20);
    CHECK(a->next == nullptr);
    CHECK(m.graph.node(second).attributes == nullptr);
}

TEST_CASE("nodes in any order, by id") {
    GraphSpec g;
    g.nodes = {named_node("Relu", "late", {"t"}, {"y"}), named_node("Neg", "early", {"x"}, {"t"})};
    g.inputs = {value_info("x", FLOAT, {3})};
    g.outputs = {value_info("y", FLOAT, {3})};
    std::string bytes = model_proto(graph(g)).b;
    Model m;
    REQUIRE_MESSAGE(read(m, bytes) == Status::Ok, error_of(m));
    NodeId late = find_node(m, "late"), early = find_node(m, "early");
    CHECK(producer_name(m, late, 0) == "early");
    CHECK(producer_name(m, early, 0) == "x");
    // Topological order puts early first.
    uint32_t position_early = 0, position_late = 0, k = 0;
    for (NodeId n : m.graph.topological_order()) {
        if (n == early) position_early = k;
        if (n == late) position_late = k;
        ++k;
    }
    CHECK(position_early < position_late);
}

TEST_CASE("optional inputs: absent in the middle, trailing ones dropped; multi-output ports") {
    GraphSpec g;
    g.nodes = {named_node("Split", "split", {"x"}, {"a", "", "c"}),
               named_node("Clip", "clip", {"a", "", "c", "", ""}, {"y"})};
    g.inputs = {value_info("x", FLOAT, {6})};
    g.outputs = {value_info("y", FLOAT, {2})};
    std::string bytes = model_proto(graph(g)).b;
    Model m;
    REQUIRE_MESSAGE(read(m, bytes) == Status::Ok, error_of(m));
    NodeId clip = find_node(m, "clip"), split = find_node(m, "split");
    REQUIRE(m.graph.node(clip).num_inputs == 3);
    CHECK(m.graph.node(split).num_outputs == 3);
    CHECK(producer_name(m, clip, 0) == "split");
    CHECK(m.graph.node(clip).inputs[0].port == 0);
    CHECK(test::to_string(m.graph.node(m.graph.node(clip).inputs[1].producer).op) == "Absent");
    CHECK(producer_name(m, clip, 2) == "split");
    CHECK(m.graph.node(clip).inputs[2].port == 2);
}

TEST_CASE("duplicate, empty and taken node names get unique generated names") {
    GraphSpec g;
    g.nodes = {named_node("Relu", "n", {"x"}, {"a"}), named_node("Relu", "n", {"a"}, {"b"}),
               named_node("Relu", "", {"b"}, {"c"}), named_node("Relu", "x", {"c"}, {"d"}),
               named_node("Relu", "Relu_1", {"d"}, {"e"}), named_node("Relu", "y", {"e"}, {"y"})};
    g.inputs = {value_info("x", FLOAT, {2})};
    g.outputs = {value_info("y", FLOAT, {2})};
    std::string bytes = model_proto(graph(g)).b;
    Model m;
    REQUIRE_MESSAGE(read(m, bytes) == Status::Ok, error_of(m));
    // x (input), 6 nodes, y (output)
    REQUIRE(m.graph.node_count() == 8);
    std::vector<std::string> names;
    for (uint32_t i = 0; i < m.graph.node_count(); ++i) names.push_back(test::to_string(m.graph.node(i).name));
    CHECK(names[0] == "x");
    CHECK(names[1] == "n");
    CHECK(names[2] == "Relu_1");
    CHECK(names[3] == "Relu_2");
    CHECK(names[4] == "Relu_3");
    CHECK(names[5] == "Relu_4");   // its own name Relu_1 was taken by then
    CHECK(names[6] == "Relu_5");   // "y" is the output's name
    CHECK(names[7] == "y");
    CHECK(producer_name(m, 7, 0) == "Relu_5");
}

TEST_CASE("a model truncated at every offset fails cleanly or reads") {
    SmallModel s = small_model();
    uint32_t ok = 0, failed = 0;
    for (size_t n = 0; n < s.bytes.size(); ++n) {
        std::string cut = s.bytes.substr(0, n);   // its own buffer: a read past it is caught by ASan
        Model m;
        Status status = read(m, cut);
        if (status == Status::Ok) {
            ++ok;
            CHECK(m.graph.finalized());
        } else {
            ++failed;
            CHECK(std::strlen(m.last_error()) > 0);
        }
    }
    CHECK(failed > 0);
    MESSAGE("model truncations: " << ok << " read, " << failed << " refused");
    // The GraphProto cut at every offset inside a well-formed ModelProto reaches the inner
    // messages (nodes, attributes, tensors, value infos) with their own ends.
    std::vector<float> w = {1.5f, -2.0f, 3.25f, 4.0f};
    GraphSpec g;
    g.nodes = first_and_second("W");
    g.inputs = {value_info("X", FLOAT, {1, -1, 4})};
    g.outputs = {value_info("Y", FLOAT, {1, -1, 4})};
    g.initializers = {tensor_raw("W", FLOAT, {4}, raw_of(w))};
    std::string full = graph(g).b;
    ok = failed = 0;
    std::vector<int> statuses(16, 0);
    for (size_t n = 0; n <= full.size(); ++n) {
        Pb cut;
        cut.b = full.substr(0, n);
        std::string bytes = model_proto(cut).b;
        Model m;
        Status status = read(m, bytes);
        statuses[(int)status & 15]++;
        if (status == Status::Ok) ++ok;
        else ++failed;
    }
    CHECK(ok > 0);
    CHECK(statuses[(int)Status::ParseError] > 0);
    CHECK(statuses[(int)Status::DanglingInput] > 0);
    MESSAGE("graph truncations: " << ok << " read, " << failed << " refused");
}

TEST_CASE("every byte of a model overwritten: a status, never a crash") {
    SmallModel s = small_model();
    uint32_t ok = 0, failed = 0;
    const unsigned char values[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    for (size_t at = 0; at < s.bytes.size(); ++at) {
        for (unsigned char v : values) {
            std::string bytes = s.bytes;
            bytes[at] = (char)v;
            Model m;
            Status status = read(m, bytes);
            if (status == Status::Ok) ++ok;
            else ++failed;
            CHECK((status == Status::Ok) == m.graph.finalized());
        }
    }
    CHECK(ok > 0);
    CHECK(failed > 0);
    MESSAGE("overwritten bytes: " << ok << " read, " << failed << " refused");
}

TEST_CASE("malformed wire format: bad wire type, length past the end") {
    SmallModel s = small_model();
    {
        Pb bad;
        bad.b = s.bytes;
        bad.tag(30, 6);   // wire type 6 does not exist
        Model m;
        CHECK(read(m, bad.b) == Status::ParseError);
        CHECK(error_of(m).find("wire type 6") != std::string::npos);
    }
    {
        Pb bad;
        bad.b = s.bytes;
        bad.tag(30, 3);   // groups are not used by ONNX
        Model m;
        CHECK(read(m, bad.b) == Status::ParseError);
    }
    {
        Pb bad;
        bad.b = s.bytes;
        bad.tag(7, 2).raw_varint(1000).b += "xyz";   // graph field claims 1000 bytes
        Model m;
        CHECK(read(m, bad.b) == Status::ParseError);
        CHECK(error_of(m).find("past the end") != std::string::npos);
    }
    {
        // A node field inside the graph with the wrong wire type.
        Pb g;
        g.u(1, 5);
        Model m;
        CHECK(read(m, model_proto(g).b) == Status::ParseError);
        CHECK(error_of(m).find("node") != std::string::npos);
    }
    {
        Pb bad;
        bad.b = s.bytes;
        bad.b += "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01";   // an 11-byte tag varint
        Model m;
        CHECK(read(m, bad.b) == Status::ParseError);
    }
}

TEST_CASE("bad tensors: negative dim, dims overflow, rank above 8, raw size, data type") {
    {
        Model m;
        CHECK(read(m, relu_with(tensor_raw("w", FLOAT, {-2}, ""))) == Status::ParseError);
        CHECK(error_of(m).find("'w'") != std::string::npos);
        CHECK(error_of(m).find("negative") != std::string::npos);
    }
    {
        Model m;
        CHECK(read(m, relu_with(tensor_raw("w", FLOAT, {1ll << 40, 1ll << 40}, ""))) == Status::LimitExceeded);
        CHECK(error_of(m).find("overflows") != std::string::npos);
        CHECK(error_of(m).find("'w'") != std::string::npos);
    }
    {
        Model m;
        CHECK(read(m, relu_with(tensor_raw("w", FLOAT, {1, 1, 1, 1, 1, 1, 1, 1, 1}, "abcd"))) == Status::LimitExceeded);
        CHECK(error_of(m).find("rank 9") != std::string::npos);
    }
    {
        Model m;
        CHECK(read(m, relu_with(tensor_raw("w", FLOAT, {3}, "12345678"))) == Status::ParseError);
        CHECK(error_of(m).find("'w'") != std::string::npos);
        CHECK(error_of(m).find("raw_data has 8 bytes, expected 12") != std::string::npos);
    }
    {
        Pb t;
        t.packed(1, {3}).u(2, FLOAT).bytes(8, "w").packed_floats(4, {1, 2});   // 2 values for 3 elements
        Model m;
        CHECK(read(m, relu_with(t)) == Status::ParseError);
        CHECK(error_of(m).find("float_data has 2 values, expected 3") != std::string::npos);
    }
    {
        Model m;
        CHECK(read(m, relu_with(tensor_raw("w", COMPLEX64, {1}, "12345678"))) == Status::Unsupported);
        CHECK(error_of(m).find("COMPLEX64") != std::string::npos);
        CHECK(error_of(m).find("'w'") != std::string::npos);
    }
}

TEST_CASE("graph errors: missing producer, cycle, unknown ops kept") {
    {
        Model m;
        CHECK(read(m, relu_with(tensor_raw("w", FLOAT, {1}, "abcd"), {"nowhere"})) == Status::DanglingInput);
        CHECK(error_of(m).find("'nowhere'") != std::string::npos);
        CHECK(error_of(m).find("'r'") != std::string::npos);
    }
    {
        Model m;
        CHECK(read(m, model_from_x_to_y({named_node("Add", "a", {"x", "tb"}, {"ta"}), named_node("Relu", "b", {"ta"}, {"tb"}),
                                         named_node("Relu", "c", {"ta"}, {"y"})})) == Status::Cycle);
    }
    {
        Model m;
        REQUIRE(read(m, model_from_x_to_y({named_node("NoSuchOp", "weird", {"x"}, {"y"})})) == Status::Ok);
        CHECK(test::to_string(m.graph.node(find_node(m, "weird")).op) == "NoSuchOp");
    }
    {
        Model m;   // a graph output nobody produces
        CHECK(read(m, model_from_x_to_y({named_node("Relu", "r", {"x"}, {"t"})})) == Status::DanglingInput);
        CHECK(error_of(m).find("'y'") != std::string::npos);
    }
    {
        Model m;   // a tensor produced twice
        CHECK(read(m, model_from_x_to_y({named_node("Relu", "r", {"x"}, {"y"}), named_node("Neg", "s", {"x"}, {"y"})})) ==
              Status::DuplicateName);
    }
}

TEST_CASE("opsets, domains, subgraphs") {
    GraphSpec g;
    g.nodes = {named_node("Relu", "r", {"x"}, {"y"})};
    g.inputs = {value_info("x", FLOAT, {2})};
    g.outputs = {value_info("y", FLOAT, {2})};
    {
        Model m;
        CHECK(read(m, model_proto(graph(g), 29).b) == Status::Unsupported);
        CHECK(error_of(m).find("29") != std::string::npos);
    }
    {
        Model m;
        CHECK(read(m, model_proto(graph(g), 0).b) == Status::Unsupported);
    }
    for (int64_t opset : {1, 6, 7, 17, 18, 28}) {   // 1-6: legacy attributes are the runtime's to check
        Model m;
        CHECK(read(m, model_proto(graph(g), opset).b) == Status::Ok);
        CHECK(m.opset == (uint32_t)opset);
    }
    {
        Model m;   // imported but unused
        CHECK(read(m, model_proto(graph(g), 13, {{"com.microsoft", 1}}).b) == Status::Ok);
    }
    {
        GraphSpec h = g;
        h.nodes = {named_node("FusedGemm", "r", {"x"}, {"y"}, {}, "com.microsoft")};
        Model m;
        CHECK(read(m, model_proto(graph(h), 13, {{"com.microsoft", 1}}).b) == Status::Unsupported);
        CHECK(error_of(m).find("com.microsoft") != std::string::npos);
    }
    {
        GraphSpec h = g;
        Pb body;
        body.bytes(1, "then_branch").msg(6, graph(g)).u(20, 5);
        h.nodes = {named_node("If", "if", {"x"}, {"y"}, {body})};
        Model m;   // bodies are read into body Models (test_control_flow.cpp runs them)
        CHECK(read(m, model_proto(graph(h)).b) == Status::Ok);
        const tessel::Attribute* a = m.graph.find_attribute(m.graph.find("if"), "then_branch");
        REQUIRE(a);
        CHECK(a->kind == AttributeKind::Graph);
    }
}

TEST_CASE("interface name clashes, old attributes, non-empty and fixed-buffer models") {
    {
        GraphSpec g;   // the output is the input itself: one namespace cannot hold both
        g.nodes = {named_node("Relu", "r", {"x"}, {"t"})};
        g.inputs = {value_info("x", FLOAT, {2})};
        g.outputs = {value_info("x", FLOAT, {2})};
        Model m;
        CHECK(read(m, model_proto(graph(g)).b) == Status::Unsupported);
        CHECK(error_of(m).find("'x'") != std::string::npos);
    }
    {
        GraphSpec g;   // the same input twice
        g.nodes = {named_node("Relu", "r", {"x"}, {"y"})};
        g.inputs = {value_info("x", FLOAT, {2}), value_info("x", FLOAT, {2})};
        g.outputs = {value_info("y", FLOAT, {2})};
        Model m;
        CHECK(read(m, model_proto(graph(g)).b) == Status::DuplicateName);
    }
    {
        // IR version 1 attributes carry no type field: the value field present gives it. A typed
        // tensor attribute is decoded into the arena.
        Pb i, f, t;
        i.bytes(1, "count").i(3, 5);
        f.bytes(1, "ratio").f32(2, 0.5f);
        Pb tensor;
        tensor.packed(1, {2}).u(2, FLOAT).packed_floats(4, {7.0f, 8.0f});
        t.bytes(1, "value").msg(5, tensor);
        const std::string bytes = model_from_x_to_y({named_node("Relu", "r", {"x"}, {"y"}, {i, f, t})});
        Model m;
        REQUIRE_MESSAGE(read(m, bytes) == Status::Ok, error_of(m));
        NodeId r = find_node(m, "r");
        const tessel::Attribute* a = m.graph.find_attribute(r, "count");
        REQUIRE(a != nullptr);
        CHECK(a->kind == AttributeKind::Int);
        CHECK(a->i == 5);
        a = m.graph.find_attribute(r, "ratio");
        REQUIRE(a != nullptr);
        CHECK(a->kind == AttributeKind::Float);
        CHECK(a->f == 0.5f);
        a = m.graph.find_attribute(r, "value");
        REQUIRE(a != nullptr);
        REQUIRE(a->kind == AttributeKind::Tensor);
        REQUIRE(a->tensor->bytes == 8);
        CHECK(static_cast<const float*>(a->tensor->data)[1] == 8.0f);
        CHECK((uintptr_t)a->tensor->data % 64 == 0);
        // Reading again into the same model is refused.
        CHECK(read(m, bytes) == Status::InvalidArgument);
    }
    {
        SmallModel s = small_model();
        alignas(64) static unsigned char buffer[2048];
        Model m(buffer, sizeof buffer);
        CHECK(read(m, s.bytes) == Status::OutOfMemory);
    }
}

TEST_CASE("inputs above 2 GiB are refused before they are read") {
    // The size is checked first, so a small buffer with a larger claimed size is never touched.
    static const char small[16] = {};
    Model m;
    CHECK(m.read_onnx(small, (size_t(1) << 31) + 1) == Status::LimitExceeded);
    CHECK(error_of(m).find("2147483649") != std::string::npos);
    tessel::Tensor t;
    CHECK(tessel::read_tensor_proto(small, (size_t(1) << 31) + 1, &t) == Status::LimitExceeded);
}

TEST_CASE("more than max_nodes nodes is LimitExceeded") {
    Pb g;
    Pb empty_node;
    for (uint32_t i = 0; i < (1u << 20) + 1; ++i) g.msg(1, empty_node);
    Model m;
    CHECK(read(m, model_proto(g).b) == Status::LimitExceeded);
    CHECK(error_of(m).find("1048577") != std::string::npos);
}

TEST_CASE("external data: inside the folder only") {
    std::string dir = test::make_temp_dir("tessel_onnx_");
    std::string outside = test::make_temp_dir("tessel_onnx_");
    std::vector<float> values = {1, 2, 3, 4, 5, 6};
    test::write_file(dir + "/weights.bin", std::string("HEAD") + raw_of(values));
    REQUIRE(mkdir((dir + "/sub").c_str(), 0700) == 0);
    test::write_file(dir + "/sub/w.bin", raw_of(values));
    test::write_file(outside + "/secret.bin", raw_of(values));
    REQUIRE(symlink((outside + "/secret.bin").c_str(), (dir + "/link.bin").c_str()) == 0);
    REQUIRE(symlink("sub/w.bin", (dir + "/inner_link.bin").c_str()) == 0);
    auto external = [](const std::string& location, const std::string& offset, const std::string& length) {
        Pb t;
        t.packed(1, {6}).u(2, FLOAT).bytes(8, "w");
        auto entry = [&](const std::string& k, const std::string& v) {
            Pb e;
            e.bytes(1, k).bytes(2, v);
            t.msg(13, e);
        };
        entry("location", location);
        if (!offset.empty()) entry("offset", offset);
        if (!length.empty()) entry("length", length);
        t.u(14, 1);
        return relu_with(t);
    };
    auto check_values = [&](const Model& m) {
        const tessel::Attribute* a = m.graph.find_attribute(find_node(m, "w"), "value");
        REQUIRE(a != nullptr);
        REQUIRE(a->tensor->bytes == 24);
        CHECK(std::memcmp(a->tensor->data, values.data(), 24) == 0);
    };
    {
        Model m;
        REQUIRE_MESSAGE(read(m, external("weights.bin", "4", "24"), dir) == Status::Ok, error_of(m));
        check_values(m);
    }
    {
        Model m;
        REQUIRE_MESSAGE(read(m, external("sub/w.bin", "", ""), dir) == Status::Ok, error_of(m));
        check_values(m);
    }
    {
        Model m;   // a link that stays inside is fine
        REQUIRE_MESSAGE(read(m, external("inner_link.bin", "", "24"), dir) == Status::Ok, error_of(m));
        check_values(m);
    }
    {
        // read_onnx_file finds the folder itself.
        test::write_file(dir + "/model.onnx", external("weights.bin", "4", ""));
        Model m;
        REQUIRE_MESSAGE(m.read_onnx_file((dir + "/model.onnx").c_str()) == Status::Ok, error_of(m));
        check_values(m);
        CHECK(m.file_data() != nullptr);
    }
    {
        Model m;
        CHECK(read(m, external("sub/../weights.bin", "4", "24"), dir) == Status::InvalidArgument);
        CHECK(error_of(m).find("'w'") != std::string::npos);
        CHECK(error_of(m).find("sub/../weights.bin") != std::string::npos);
        CHECK(error_of(m).find("..") != std::string::npos);
    }
    {
        Model m;
        CHECK(read(m, external("../" + outside.substr(5) + "/secret.bin", "", ""), dir) == Status::InvalidArgument);
    }
    {
        Model m;
        CHECK(read(m, external(outside + "/secret.bin", "", ""), dir) == Status::InvalidArgument);
        CHECK(error_of(m).find("absolute") != std::string::npos);
    }
    {
        Model m;
        CHECK(read(m, external("link.bin", "", ""), dir) == Status::InvalidArgument);
        CHECK(error_of(m).find("link.bin") != std::string::npos);
        CHECK(error_of(m).find("outside") != std::string::npos);
    }
    {
        Model m;
        CHECK(read(m, external("weights.bin", "18446744073709551615", "24"), dir) == Status::ParseError);
        CHECK(error_of(m).find("'w'") != std::string::npos);
    }
    {
        Model m;
        CHECK(read(m, external("weights.bin", "8", "24"), dir) == Status::ParseError);   // past the end
    }
    {
        Model m;
        CHECK(read(m, external("weights.bin", "0", "20"), dir) == Status::ParseError);   // wrong size
    }
    {
        Model m;
        CHECK(read(m, external("missing.bin", "", ""), dir) == Status::IoError);
    }
    {
        Model m;   // no folder: refused
        CHECK(read(m, external("weights.bin", "4", "24")) == Status::InvalidArgument);
    }
    CHECK(test::remove_tree(dir));
    CHECK(test::remove_tree(outside));
}

TEST_CASE("tensor files: typed encodings and write/read round trips") {
    {
        Pb t;   // int8 via int32_data, negative values as 64-bit varints
        t.packed(1, {2, 2}).u(2, INT8).bytes(8, "q").packed(5, {-1, 2, -128, 127});
        tessel::Tensor tensor;
        char name[8];
        REQUIRE(tessel::read_tensor_proto(t.b.data(), t.b.size(), &tensor, name, sizeof name) == Status::Ok);
        CHECK(std::string(name) == "q");
        CHECK(tensor.type() == ElementType::Int8);
        REQUIRE(tensor.elements() == 4);
        CHECK(tensor.data_as<int8_t>()[0] == -1);
        CHECK(tensor.data_as<int8_t>()[2] == -128);
        CHECK(tensor.data_as<int8_t>()[3] == 127);
    }
    {
        Pb t;   // float16 bits and bool via unpacked int32_data
        t.packed(1, {2}).u(2, FLOAT16).i(5, 0x3c00).i(5, 0xc000);
        tessel::Tensor tensor;
        REQUIRE(tessel::read_tensor_proto(t.b.data(), t.b.size(), &tensor) == Status::Ok);
        CHECK(tensor.data_as<uint16_t>()[0] == 0x3c00);
        CHECK(tensor.data_as<uint16_t>()[1] == 0xc000);
        Pb u;
        u.u(2, BOOL).i(5, 5);   // a scalar
        REQUIRE(tessel::read_tensor_proto(u.b.data(), u.b.size(), &tensor) == Status::Ok);
        CHECK(tensor.rank() == 0);
        CHECK(tensor.data_as<uint8_t>()[0] == 1);
    }
    {
        Pb t = tensor_raw("big", FLOAT, {3}, "123");
        tessel::Tensor tensor;
        CHECK(tessel::read_tensor_proto(t.b.data(), t.b.size(), &tensor) == Status::ParseError);
        Pb u = tensor_raw("d", COMPLEX64, {1}, "12345678");
        CHECK(tessel::read_tensor_proto(u.b.data(), u.b.size(), &tensor) == Status::Unsupported);
    }
    // Round trips for every element type.
    const ElementType types[] = {ElementType::Float32, ElementType::Int64, ElementType::Int32, ElementType::Int8,
                                 ElementType::UInt8, ElementType::Bool, ElementType::Float16, ElementType::Float64,
                                 ElementType::Int16, ElementType::UInt16, ElementType::UInt32, ElementType::UInt64,
                                 ElementType::BFloat16};
    for (ElementType type : types) {
        CAPTURE(tessel::element_type_name(type));
        tessel::Tensor tensor;
        int64_t shape[] = {2, 3, 5};
        REQUIRE(tensor.allocate(type, shape) == Status::Ok);
        unsigned char* bytes = tensor.data_as<unsigned char>();
        for (size_t i = 0; i < tensor.bytes(); ++i) bytes[i] = (unsigned char)(i * 37 + 11);
        if (type == ElementType::Bool) for (size_t i = 0; i < tensor.bytes(); ++i) bytes[i] &= 1;
        std::string out;
        REQUIRE(tessel::write_tensor_proto(tensor, StringView("tensor_name"), test::append_to_string, &out) == Status::Ok);
        tessel::Tensor back;
        char name[32];
        REQUIRE(tessel::read_tensor_proto(out.data(), out.size(), &back, name, sizeof name) == Status::Ok);
        CHECK(std::string(name) == "tensor_name");
        CHECK(back.type() == type);
        REQUIRE(back.rank() == 3);
        CHECK(back.dim(0) == 2);
        CHECK(back.dim(2) == 5);
        REQUIRE(back.bytes() == tensor.bytes());
        CHECK(std::memcmp(back.data(), tensor.data(), tensor.bytes()) == 0);
    }
    {
        // A strided view is written densely.
        float data[] = {0, 1, 2, 3, 4, 5};
        int64_t shape[] = {3, 2}, strides[] = {1, 3};   // the transpose of a 2x3
        tessel::Tensor view;
        REQUIRE(view.view(ElementType::Float32, shape, data, strides) == Status::Ok);
        std::string out;
        REQUIRE(tessel::write_tensor_proto(view, StringView(), test::append_to_string, &out) == Status::Ok);
        tessel::Tensor back;
        REQUIRE(tessel::read_tensor_proto(out.data(), out.size(), &back) == Status::Ok);
        REQUIRE(back.elements() == 6);
        const float want[] = {0, 3, 1, 4, 2, 5};
        CHECK(std::memcmp(back.data(), want, sizeof want) == 0);
    }
    {
        // A scalar and a file on disk.
        tessel::Tensor scalar;
        REQUIRE(scalar.allocate(ElementType::Int64, tessel::Span<const int64_t>()) == Status::Ok);
        scalar.data_as<int64_t>()[0] = -42;
        std::string out;
        REQUIRE(tessel::write_tensor_proto(scalar, StringView("s"), test::append_to_string, &out) == Status::Ok);
        std::string dir = test::make_temp_dir("tessel_onnx_");
        test::write_file(dir + "/s.pb", out);
        tessel::Tensor back;
        REQUIRE(tessel::read_tensor_file((dir + "/s.pb").c_str(), &back) == Status::Ok);
        CHECK(back.rank() == 0);
        CHECK(back.data_as<int64_t>()[0] == -42);
        CHECK(tessel::read_tensor_file((dir + "/none.pb").c_str(), &back) == Status::IoError);
        CHECK(test::remove_tree(dir));
    }
}

TEST_CASE("libonnx-testdata: test_add and every model and tensor file") {
    std::string root = kTestData;
    REQUIRE_MESSAGE(is_dir(root), "install libonnx-testdata (scripts/install-deps.sh)");
    {
        Model m;
        REQUIRE_MESSAGE(m.read_onnx_file((root + "/node/test_add/model.onnx").c_str()) == Status::Ok, error_of(m));
        REQUIRE(m.input_count() == 2);
        REQUIRE(m.output_count() == 1);
        CHECK(test::to_string(m.input(0).name) == "x");
        CHECK(test::to_string(m.input(1).name) == "y");
        CHECK(test::to_string(m.output(0).name) == "sum");
        const tessel::TensorDesc& d = m.graph.node(m.input(0).node).outputs[0];
        CHECK(d.type == ElementType::Float32);
        REQUIRE(d.rank == 3);
        CHECK(d.dims[0] == 3);
        CHECK(d.dims[1] == 4);
        CHECK(d.dims[2] == 5);
        NodeId add = m.graph.node(m.output(0).node).inputs[0].producer;
        CHECK(test::to_string(m.graph.node(add).op) == "Add");
        CHECK(producer_name(m, add, 0) == "x");
        CHECK(producer_name(m, add, 1) == "y");
        tessel::Tensor input;
        REQUIRE(tessel::read_tensor_file((root + "/node/test_add/test_data_set_0/input_0.pb").c_str(), &input) == Status::Ok);
        CHECK(input.type() == ElementType::Float32);
        REQUIRE(input.rank() == 3);
        CHECK(input.dim(0) == 3);
        CHECK(input.dim(2) == 5);
    }
    for (const char* folder : {"node", "pytorch-operator", "simple"}) {
        std::vector<std::string> models;
        find_files(root + "/" + folder, "model.onnx", false, &models);
        CHECK(!models.empty());
        uint32_t ok = 0, unsupported = 0;
        for (const std::string& path : models) {
            Model m;
            Status s = m.read_onnx_file(path.c_str());
            CAPTURE(path);
            CAPTURE(error_of(m));
            CHECK((s == Status::Ok || s == Status::Unsupported));
            if (s == Status::Ok) ++ok;
            else if (s == Status::Unsupported) ++unsupported;
            if (s != Status::Ok) continue;
            // Every tensor of a model that reads matches the model's interface, but for the
            // bfloat16 models: their files predate BFLOAT16 tensors (they say UINT16) and give
            // CastLike's 'like' another shape (test/conformance/run.cpp copes with both).
            std::string dir = path.substr(0, path.size() - std::strlen("model.onnx"));
            bool bfloat16 = false;
            for (uint32_t i = 0; i < m.input_count(); ++i)
                bfloat16 = bfloat16 || m.graph.node(m.input(i).node).outputs[0].type == ElementType::BFloat16;
            for (uint32_t i = 0; i < m.input_count() && !bfloat16; ++i) {
                tessel::Tensor t;
                std::string file = dir + "test_data_set_0/input_" + std::to_string(i) + ".pb";
                if (access(file.c_str(), R_OK) != 0) continue;
                REQUIRE(tessel::read_tensor_file(file.c_str(), &t) == Status::Ok);
                const tessel::TensorDesc& d = m.graph.node(m.input(i).node).outputs[0];
                CAPTURE(file);
                CHECK(t.type() == d.type);
                CHECK(t.rank() == d.rank);
            }
        }
        MESSAGE(std::string(folder) << ": " << models.size() << " models, " << ok << " read, " << unsupported << " unsupported");
        std::vector<std::string> tensors;
        find_files(root + "/" + folder, ".pb", true, &tensors);
        uint32_t tensors_ok = 0, tensors_unsupported = 0;
        for (const std::string& path : tensors) {
            tessel::Tensor t;
            Status s = tessel::read_tensor_file(path.c_str(), &t);
            CAPTURE(path);
            CHECK((s == Status::Ok || s == Status::Unsupported));
            if (s == Status::Ok) ++tensors_ok;
            else if (s == Status::Unsupported) ++tensors_unsupported;
        }
        MESSAGE(std::string(folder) << ": " << tensors.size() << " tensor files, " << tensors_ok << " read, " << tensors_unsupported
                       << " unsupported");
    }
}

}  // TEST_SUITE
