// If, Loop and Scan: ONNX models with subgraph bodies, built with test/protobuf_writer.h, read,
// compiled on CPU and HETERO:TEMPLATE,CPU, run, exported and imported; and the malformed
// bodies the reader and the compiler refuse, each with its exact Status.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "alloc_counter.h"
#include "protobuf_writer.h"
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;
using test::attr_int;
using test::attr_ints;
using test::graph;
using test::GraphSpec;
using test::model_proto;
using test::named_node;
using test::Pb;
using test::raw_of;
using test::tensor_raw;
using test::value_info;
using namespace test::onnx_type;

namespace {

// AttributeProto of type GRAPH (5): g = 6.
Pb attr_graph(const std::string& name, const Pb& body) {
    Pb a;
    a.bytes(1, name).msg(6, body).u(20, 5);
    return a;
}

Pb float_init(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
    return tensor_raw(name, FLOAT, dims, raw_of(v));
}
Pb int64_init(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int64_t>& v) {
    return tensor_raw(name, INT64, dims, raw_of(v));
}
Pb bool_init(const std::string& name, bool v) {
    std::vector<uint8_t> b{(uint8_t)(v ? 1 : 0)};
    return tensor_raw(name, BOOL, {}, raw_of(b));
}

std::string bytes_of(const Pb& model) { return model.b; }

// read_onnx leaves raw initializer data in the bytes it reads: they must outlive the model,
// so every model's bytes stay until the process ends.
Status read(Model* m, const Pb& model) {
    static std::deque<std::string> kept;
    kept.push_back(bytes_of(model));
    return m->read_onnx(kept.back().data(), kept.back().size());
}

// Runs a compiled model with the inputs given in order (float, int64 or bool by the compiled
// input's type), returns output `o` as doubles; infer() must not allocate.
struct Run {
    Core core;
    CompiledModel compiled;
    InferRequest request;
    std::string error;

    Status compile(const Model& m, const char* device = "CPU", const char* template_ops = nullptr, bool perf = false) {
        std::vector<ConfigEntry> config;
        if (template_ops) config.push_back(ConfigEntry{"TEMPLATE:SUPPORTED_OPS", template_ops});
        if (perf) config.push_back(ConfigEntry{"PERF_COUNT", "YES"});
        Status s = core.compile_model(m, device, Span<const ConfigEntry>(config.data(), config.size()), &compiled);
        error = core.last_error();
        if (s == Status::Ok) REQUIRE(compiled.create_request(&request) == Status::Ok);
        return s;
    }
    Status infer(const std::vector<std::vector<double>>& inputs) {
        for (uint32_t i = 0; i < inputs.size() && i < compiled.input_count(); ++i) {
            Tensor& t = request.input(i);
            REQUIRE(t.elements() == inputs[i].size());
            for (uint64_t k = 0; k < t.elements(); ++k) {
                switch (t.type()) {
                case ElementType::Float32: t.data_as<float>()[k] = (float)inputs[i][k]; break;
                case ElementType::Int64: t.data_as<int64_t>()[k] = (int64_t)inputs[i][k]; break;
                case ElementType::Bool: t.data_as<uint8_t>()[k] = inputs[i][k] != 0; break;
                default: FAIL("input type");
                }
            }
        }
        uint64_t before = tessel_test::allocation_count();
        Status s = request.infer();
        CHECK(tessel_test::allocation_count() == before);
        error = request.last_error();
        return s;
    }
    std::vector<double> output(uint32_t o) {
        const Tensor& t = request.output(o);
        std::vector<double> v;
        for (uint64_t k = 0; k < t.elements(); ++k) v.push_back(element_value(t, k));
        return v;
    }
    std::vector<int64_t> shape(uint32_t o) {
        const Tensor& t = request.output(o);
        return std::vector<int64_t>(t.shape().begin(), t.shape().end());
    }
};

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// If with outer-scope reads: then = x * 2 (initializer of the branch), else = -y. The
// condition is graph input `cond` or, with cond_value 0/1, an initializer.
Pb if_model(int cond_value, const std::string& else_op = "Neg", int then_outputs = 1) {
    GraphSpec then_branch;
    then_branch.initializers = {float_init("two", {}, {2.0f})};
    then_branch.nodes = {named_node("Mul", "then_mul", {"x", "two"}, {"t"})};
    then_branch.outputs = {test::output("t")};
    if (then_outputs == 2) then_branch.outputs.push_back(test::output("two"));
    GraphSpec else_branch;
    else_branch.nodes = {named_node(else_op, "else_neg", {"y"}, {"e"})};
    else_branch.outputs = {test::output("e")};
    GraphSpec g;
    g.inputs = {value_info("x", FLOAT, {3}), value_info("y", FLOAT, {3})};
    if (cond_value < 0) g.inputs.push_back(value_info("cond", BOOL, {}));
    else g.initializers = {bool_init("cond", cond_value != 0)};
    g.nodes = {named_node("If", "the_if", {"cond"}, {"out"},
                          {attr_graph("then_branch", graph(then_branch, "then")), attr_graph("else_branch", graph(else_branch, "else"))})};
    g.outputs = {test::output("out")};
    return model_proto(graph(g), 16);
}

}  // namespace

TEST_CASE("control flow: If reads outer values, runs the branch the condition picks") {
    Model m;
    REQUIRE(read(&m, if_model(-1)) == Status::Ok);
    // The branches' outer reads (x, y) are the node's implicit inputs, after the condition.
    NodeId node = m.graph.find("the_if");
    REQUIRE(node != kNoNode);
    CHECK(m.graph.node(node).num_inputs == 3);
    const Attribute* then_branch = m.graph.find_attribute(node, "then_branch");
    REQUIRE(then_branch);
    CHECK(then_branch->kind == AttributeKind::Graph);
    const Model* body = static_cast<const Model*>(then_branch->body);
    CHECK(body->outer_inputs == 2);
    CHECK(body->input_count() == 2);
    CHECK(body->body_depth() == 1);
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        CAPTURE(device);
        Run run;
        REQUIRE(run.compile(m, device, "If") == Status::Ok);
        REQUIRE(run.infer({{1, 2, 3}, {4, 5, 6}, {1}}) == Status::Ok);
        CHECK(run.output(0) == std::vector<double>{2, 4, 6});
        REQUIRE(run.infer({{1, 2, 3}, {4, 5, 6}, {0}}) == Status::Ok);
        CHECK(run.output(0) == std::vector<double>{-4, -5, -6});
    }
}

TEST_CASE("control flow: an If whose condition is a constant folds to its branch") {
    for (int cond : {0, 1}) {
        Model m;
        // The branch not taken holds an op nothing runs: only the taken one is compiled.
        REQUIRE(read(&m, if_model(cond, cond ? "NoSuchOp" : "Neg")) == Status::Ok);
        Run run;
        REQUIRE(run.compile(m) == Status::Ok);
        REQUIRE(run.infer({{1, 2, 3}, {4, 5, 6}}) == Status::Ok);
        CHECK(run.output(0) == (cond ? std::vector<double>{2, 4, 6} : std::vector<double>{-4, -5, -6}));
    }
    Model m;   // not folded: the unknown op of the else branch is Unsupported, naming the body node
    REQUIRE(read(&m, if_model(-1, "NoSuchOp")) == Status::Ok);
    Run run;
    CHECK(run.compile(m) == Status::Unsupported);
    CHECK(contains(run.error, "If 'the_if': body 'else_branch'"));
    CHECK(contains(run.error, "else_neg"));
}

TEST_CASE("control flow: If branches with different output shapes are a data-dependent shape unless folded") {
    GraphSpec then_branch;
    then_branch.initializers = {float_init("a", {2}, {1, 2})};
    then_branch.nodes = {named_node("Identity", "ta", {"a"}, {"t"})};
    then_branch.outputs = {test::output("t")};
    GraphSpec else_branch;
    else_branch.initializers = {float_init("b", {3}, {1, 2, 3})};
    else_branch.nodes = {named_node("Identity", "eb", {"b"}, {"e"})};
    else_branch.outputs = {test::output("e")};
    GraphSpec g;
    g.inputs = {value_info("cond", BOOL, {})};
    g.nodes = {named_node("If", "the_if", {"cond"}, {"out"},
                          {attr_graph("then_branch", graph(then_branch)), attr_graph("else_branch", graph(else_branch))})};
    g.outputs = {test::output("out")};
    Model m;
    REQUIRE(read(&m, model_proto(graph(g), 13)) == Status::Ok);
    Run run;
    CHECK(run.compile(m) == Status::Unsupported);
    CHECK(contains(run.error, "data-dependent shape"));
}

namespace {
// Loop(M, cond, v) whose body adds the outer x to v, stops when iter >= stop (cond_out =
// iter < stop), and gives v_out as a scan output too.
Pb loop_model(const std::vector<Pb>& initializers, const std::vector<Pb>& inputs, const std::vector<std::string>& node_inputs,
              bool scan_output, int64_t stop = 100) {
    GraphSpec body;
    body.inputs = {value_info("iter", INT64, {}), value_info("cond_in", BOOL, {}), value_info("v_in", FLOAT, {2})};
    body.initializers = {int64_init("stop", {}, {stop})};
    body.nodes = {named_node("Add", "body_add", {"v_in", "x"}, {"v_out"}),
                  named_node("Less", "body_less", {"iter", "stop"}, {"cond_out"})};
    body.outputs = {test::output("cond_out", BOOL), test::output("v_out")};
    std::vector<std::string> outputs = {"v_final"};
    if (scan_output) {
        body.nodes.push_back(named_node("Identity", "body_scan", {"v_out"}, {"scan"}));
        body.outputs.push_back(test::output("scan"));
        outputs.push_back("scans");
    }
    GraphSpec g;
    g.initializers = initializers;
    g.inputs = inputs;
    g.inputs.push_back(value_info("x", FLOAT, {2}));
    g.nodes = {named_node("Loop", "the_loop", node_inputs, outputs, {attr_graph("body", graph(body, "body"))})};
    for (const std::string& o : outputs) g.outputs.push_back(test::output(o));
    return model_proto(graph(g), 16);
}
}  // namespace

TEST_CASE("control flow: Loop with a trip count and a condition from the body") {
    Model m;   // M and cond are inputs: the trip count is known at run time only
    REQUIRE(read(&m, loop_model({float_init("v0", {2}, {10, 20})},
                                {value_info("M", INT64, {}), value_info("cond", BOOL, {})},
                                {"M", "cond", "v0"}, false, 2)) == Status::Ok);
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        CAPTURE(device);
        Run run;
        REQUIRE(run.compile(m, device, "Loop") == Status::Ok);
        // the inputs: M, cond, x
        REQUIRE(run.infer({{10}, {1}, {1, 2}}) == Status::Ok);   // iterations 0, 1, 2 (cond_out false at 2)
        CHECK(run.output(0) == std::vector<double>{13, 26});
        REQUIRE(run.infer({{2}, {1}, {1, 2}}) == Status::Ok);    // the trip count stops it first
        CHECK(run.output(0) == std::vector<double>{12, 24});
        REQUIRE(run.infer({{5}, {0}, {1, 2}}) == Status::Ok);    // cond false: no iteration
        CHECK(run.output(0) == std::vector<double>{10, 20});
        CHECK(run.infer({{-1}, {1}, {1, 2}}) == Status::InvalidArgument);
        CHECK(contains(run.error, "the trip count -1 is negative"));
    }
}

TEST_CASE("control flow: with PERF_COUNT, the profile lists each body node by name, summed over iterations") {
    Model m;
    REQUIRE(read(&m, loop_model({float_init("v0", {2}, {10, 20})},
                                {value_info("M", INT64, {}), value_info("cond", BOOL, {})},
                                {"M", "cond", "v0"}, false, 2)) == Status::Ok);
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        CAPTURE(device);
        Run run;
        REQUIRE(run.compile(m, device, "Loop", true) == Status::Ok);
        for (int repeat = 0; repeat < 2; ++repeat) {   // each inference lists its own entries once
            REQUIRE(run.infer({{10}, {1}, {1, 2}}) == Status::Ok);   // three iterations
            std::map<std::string, int> seen;
            std::string loop_device;
            for (const ProfileEntry& e : run.request.profiling_info()) {
                ++seen[std::string(e.node.data, e.node.size)];
                if (e.node == StringView("the_loop")) loop_device = std::string(e.device.data, e.device.size);
            }
            CHECK(seen["the_loop"] == 1);
            CHECK(seen["body_add"] == 1);
            CHECK(seen["body_less"] == 1);
            for (const ProfileEntry& e : run.request.profiling_info())
                if (e.node == StringView("body_add")) {
                    CHECK(std::string(e.device.data, e.device.size) == loop_device);
                    CHECK(std::string(e.kernel) != "");
                }
        }
    }
    Run quiet;   // without PERF_COUNT: no profile at all
    REQUIRE(quiet.compile(m, "CPU") == Status::Ok);
    REQUIRE(quiet.infer({{10}, {1}, {1, 2}}) == Status::Ok);
    CHECK(quiet.request.profiling_info().size == 0);
}

TEST_CASE("control flow: Loop scan outputs with a trip count known at compile time") {
    Model m;   // M = 3 (an initializer), no condition: a for loop
    REQUIRE(read(&m, loop_model({int64_init("M", {}, {3}), float_init("v0", {2}, {0, 0})}, {}, {"M", "", "v0"}, true)) ==
            Status::Ok);
    Run run;
    REQUIRE(run.compile(m) == Status::Ok);
    REQUIRE(run.infer({{1, 2}}) == Status::Ok);
    CHECK(run.output(0) == std::vector<double>{3, 6});
    CHECK(run.shape(1) == std::vector<int64_t>{3, 2});
    CHECK(run.output(1) == std::vector<double>{1, 2, 2, 4, 3, 6});

    Model runtime_m;   // M an input: the scan outputs' length is data-dependent, a later stage (>>stages)
    REQUIRE(read(&runtime_m, loop_model({float_init("v0", {2}, {0, 0})}, {value_info("M", INT64, {})}, {"M", "", "v0"}, true)) ==
            Status::Ok);
    Run staged;
    REQUIRE(staged.compile(runtime_m) == Status::Ok);
    CHECK(staged.compiled.data_dependent());
    for (int64_t trips : {3, 2, 3}) {
        for (uint32_t i = 0; i < staged.compiled.input_count(); ++i) {
            Tensor& t = staged.request.input(i);
            if (t.type() == ElementType::Int64) t.data_as<int64_t>()[0] = trips;
            if (t.type() == ElementType::Float32) for (uint64_t k = 0; k < t.elements(); ++k) t.data_as<float>()[k] = (float)(k + 1);
        }
        REQUIRE(staged.request.infer() == Status::Ok);
        CHECK(staged.shape(1) == std::vector<int64_t>{trips, 2});
        CHECK(staged.output(0) == std::vector<double>{(double)trips, 2.0 * (double)trips});
    }
}

TEST_CASE("control flow: a Loop's trip count is refused when negative or past Limits::max_loop_iterations") {
    Model negative;
    REQUIRE(read(&negative, loop_model({int64_init("M", {}, {-3}), float_init("v0", {2}, {0, 0})}, {}, {"M", "", "v0"}, false)) ==
            Status::Ok);
    Run run;
    CHECK(run.compile(negative) == Status::InvalidArgument);
    CHECK(run.error == "Loop 'the_loop': the trip count -3 is negative");

    Model absurd;
    REQUIRE(read(&absurd, loop_model({int64_init("M", {}, {int64_t(1) << 40}), float_init("v0", {2}, {0, 0})}, {}, {"M", "", "v0"}, false)) ==
            Status::Ok);
    Run big;
    CHECK(big.compile(absurd) == Status::LimitExceeded);
    CHECK(contains(big.error, "Loop 'the_loop': the trip count 1099511627776 is above the limit"));

    Model runtime_m;   // at run time, against the compile's limit
    REQUIRE(read(&runtime_m, loop_model({float_init("v0", {2}, {0, 0})}, {value_info("M", INT64, {})}, {"M", "", "v0"}, false)) ==
            Status::Ok);
    Run limited;
    limited.core.limits().max_loop_iterations = 4;
    REQUIRE(limited.compile(runtime_m) == Status::Ok);
    REQUIRE(limited.infer({{4}, {1, 1}}) == Status::Ok);
    CHECK(limited.output(0) == std::vector<double>{4, 4});
    CHECK(limited.infer({{5}, {1, 1}}) == Status::LimitExceeded);
}

TEST_CASE("control flow: a loop-carried value that changes shape is Unsupported") {
    GraphSpec body;
    body.inputs = {value_info("iter", INT64, {}), value_info("cond_in", BOOL, {}), value_info("v_in", FLOAT, {2})};
    body.nodes = {named_node("Concat", "grow", {"v_in", "v_in"}, {"v_out"}, {attr_int("axis", 0)}),
                  named_node("Identity", "keep", {"cond_in"}, {"cond_out"})};
    body.outputs = {test::output("cond_out", BOOL), test::output("v_out")};
    GraphSpec g;
    g.initializers = {int64_init("M", {}, {2}), float_init("v0", {2}, {1, 2})};
    g.nodes = {named_node("Loop", "the_loop", {"M", "", "v0"}, {"v_final"}, {attr_graph("body", graph(body))})};
    g.outputs = {test::output("v_final")};
    Model m;
    REQUIRE(read(&m, model_proto(graph(g), 16)) == Status::Ok);
    Run run;
    CHECK(run.compile(m) == Status::Unsupported);
    CHECK(run.error == "Loop 'the_loop': loop-carried value 0 changes from f32[2] to f32[4] (a shape that changes across iterations)");
}

TEST_CASE("control flow: Scan with input and output axes and directions") {
    // state s [2]; scan input xs [2, 3] scanned along axis 1 in reverse; the body gives
    // s + slice and the slice doubled, written along axis 1 of a [2, 3] output, in order,
    // and along axis 0 of a [3, 2] output in reverse.
    GraphSpec body;
    body.inputs = {value_info("s_in", FLOAT, {2}), value_info("slice", FLOAT, {2})};
    body.nodes = {named_node("Add", "body_add", {"s_in", "slice"}, {"s_out"}),
                  named_node("Add", "body_double", {"slice", "slice"}, {"y"}),
                  named_node("Identity", "body_copy", {"y"}, {"z"})};
    body.outputs = {test::output("s_out"), test::output("y"), test::output("z")};
    GraphSpec g;
    g.inputs = {value_info("s0", FLOAT, {2}), value_info("xs", FLOAT, {2, 3})};
    g.nodes = {named_node("Scan", "the_scan", {"s0", "xs"}, {"s_final", "ys", "zs"},
                          {attr_graph("body", graph(body)), attr_int("num_scan_inputs", 1), attr_ints("scan_input_axes", {1}),
                           attr_ints("scan_input_directions", {1}), attr_ints("scan_output_axes", {1, -2}),
                           attr_ints("scan_output_directions", {0, 1})})};
    g.outputs = {test::output("s_final"), test::output("ys"), test::output("zs")};
    Model m;
    REQUIRE(read(&m, model_proto(graph(g), 11)) == Status::Ok);
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        CAPTURE(device);
        Run run;
        REQUIRE(run.compile(m, device, "Scan,Add") == Status::Ok);
        REQUIRE(run.infer({{100, 200}, {1, 2, 3, 4, 5, 6}}) == Status::Ok);
        CHECK(run.output(0) == std::vector<double>{106, 215});
        // slices in order of iterations: [3,6], [2,5], [1,4]
        CHECK(run.shape(1) == std::vector<int64_t>{2, 3});
        CHECK(run.output(1) == std::vector<double>{6, 4, 2, 12, 10, 8});
        CHECK(run.shape(2) == std::vector<int64_t>{3, 2});
        CHECK(run.output(2) == std::vector<double>{2, 8, 4, 10, 6, 12});
    }
}

TEST_CASE("control flow: Scan-8 scans each batch entry; sequence_lens shorter than the sequence is Unsupported") {
    GraphSpec body;
    body.inputs = {value_info("s_in", FLOAT, {2}), value_info("slice", FLOAT, {2})};
    body.nodes = {named_node("Add", "body_add", {"s_in", "slice"}, {"s_out"}), named_node("Identity", "body_id", {"s_out"}, {"y"})};
    body.outputs = {test::output("s_out"), test::output("y")};
    for (bool lengths : {false, true}) {
        CAPTURE(lengths);
        GraphSpec g;
        g.inputs = {value_info("s0", FLOAT, {2, 2}), value_info("xs", FLOAT, {2, 3, 2})};
        if (lengths) g.inputs.push_back(value_info("lens", INT64, {2}));
        g.nodes = {named_node("Scan", "old_scan", {lengths ? "lens" : "", "s0", "xs"}, {"s_final", "ys"},
                              {attr_graph("body", graph(body)), attr_int("num_scan_inputs", 1), attr_ints("directions", {1})})};
        g.outputs = {test::output("s_final"), test::output("ys")};
        Model m;
        REQUIRE(read(&m, model_proto(graph(g), 8)) == Status::Ok);
        Run run;
        REQUIRE(run.compile(m) == Status::Ok);
        std::vector<std::vector<double>> in = {{100, 200, 1000, 2000}, {1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60}};
        if (lengths) in.push_back({3, 3});
        REQUIRE(run.infer(in) == Status::Ok);
        CHECK(run.output(0) == std::vector<double>{109, 212, 1090, 2120});
        CHECK(run.shape(1) == std::vector<int64_t>{2, 3, 2});
        CHECK(run.output(1) == std::vector<double>{105, 206, 108, 210, 109, 212, 1050, 2060, 1080, 2100, 1090, 2120});
        if (!lengths) continue;
        in[2] = {3, 2};
        CHECK(run.infer(in) == Status::Unsupported);
        CHECK(contains(run.error, "sequence_lens[1] is 2: only full sequences (3) are supported"));
    }
}

namespace {
// A Loop whose body holds an If whose branches read the top-level `x` and the loop's `v_in`:
// two levels of outer reads.
Pb nested_model() {
    GraphSpec then_branch;
    then_branch.nodes = {named_node("Add", "then_add", {"v_in", "x"}, {"t"})};
    then_branch.outputs = {test::output("t")};
    GraphSpec else_branch;
    else_branch.nodes = {named_node("Sub", "else_sub", {"v_in", "x"}, {"e"})};
    else_branch.outputs = {test::output("e")};
    GraphSpec body;
    body.inputs = {value_info("iter", INT64, {}), value_info("cond_in", BOOL, {}), value_info("v_in", FLOAT, {2})};
    body.initializers = {int64_init("two", {}, {2})};
    body.nodes = {named_node("Less", "early", {"iter", "two"}, {"is_early"}),
                  named_node("If", "inner_if", {"is_early"}, {"v_out"},
                             {attr_graph("then_branch", graph(then_branch)), attr_graph("else_branch", graph(else_branch))}),
                  named_node("Identity", "keep", {"cond_in"}, {"cond_out"})};
    body.outputs = {test::output("cond_out", BOOL), test::output("v_out")};
    GraphSpec g;
    g.inputs = {value_info("x", FLOAT, {2}), value_info("M", INT64, {})};
    g.initializers = {float_init("v0", {2}, {0, 0})};
    g.nodes = {named_node("Loop", "outer_loop", {"M", "", "v0"}, {"v_final"}, {attr_graph("body", graph(body))})};
    g.outputs = {test::output("v_final")};
    return model_proto(graph(g), 16);
}
}  // namespace

TEST_CASE("control flow: nested bodies read values two levels out; export and import keep them") {
    Model m;
    REQUIRE(read(&m, nested_model()) == Status::Ok);
    NodeId loop = m.graph.find("outer_loop");
    REQUIRE(loop != kNoNode);
    CHECK(m.graph.node(loop).num_inputs == 4);   // M, "", v0, then x read by the inner If's branches
    const Model* body = static_cast<const Model*>(m.graph.find_attribute(loop, "body")->body);
    CHECK(body->outer_inputs == 1);
    NodeId inner = body->graph.find("inner_if");
    REQUIRE(inner != kNoNode);
    CHECK(body->graph.node(inner).num_inputs == 3);   // is_early, then v_in and x
    CHECK(static_cast<const Model*>(body->graph.find_attribute(inner, "then_branch")->body)->body_depth() == 2);
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        CAPTURE(device);
        Run run;
        REQUIRE(run.compile(m, device, "Loop") == Status::Ok);
        REQUIRE(run.infer({{1, 10}, {4}}) == Status::Ok);   // +x, +x, -x, -x
        CHECK(run.output(0) == std::vector<double>{0, 0});
        REQUIRE(run.infer({{1, 10}, {3}}) == Status::Ok);
        CHECK(run.output(0) == std::vector<double>{1, 10});

        std::string blob;
        REQUIRE(run.compiled.export_model(test::append_to_string, &blob) == Status::Ok);
        Core core;
        CompiledModel imported;
        REQUIRE(core.import_model(blob.data(), blob.size(), &imported) == Status::Ok);
        InferRequest request;
        REQUIRE(imported.create_request(&request) == Status::Ok);
        float x[2] = {1, 10};
        int64_t trip = 3;
        std::memcpy(request.input(0).data(), x, sizeof x);
        std::memcpy(request.input(1).data(), &trip, sizeof trip);
        REQUIRE(request.infer() == Status::Ok);
        CHECK(request.output(0).data_as<float>()[0] == 1);
        CHECK(request.output(0).data_as<float>()[1] == 10);
    }
}

// Writes `m` with write_onnx and reads it back; the bytes stay alive with the model.
Status write_and_read(const Model& m, Model* back) {
    static std::deque<std::string> kept;
    kept.emplace_back();
    Status s = write_onnx(m, test::append_to_string, &kept.back());
    if (s != Status::Ok) return s;
    return back->read_onnx(kept.back().data(), kept.back().size());
}

TEST_CASE("control flow: write_onnx writes If, Loop and Scan bodies; read back, they run the same") {
    struct Case {
        const char* name;
        Pb proto;
        std::vector<std::vector<double>> inputs;
    };
    GraphSpec body;
    body.inputs = {value_info("s_in", FLOAT, {2}), value_info("slice", FLOAT, {2})};
    body.nodes = {named_node("Add", "body_add", {"s_in", "slice"}, {"s_out"}), named_node("Mul", "body_scale", {"slice", "x"}, {"y"})};
    body.outputs = {test::output("s_out"), test::output("y")};
    GraphSpec scan;
    scan.inputs = {value_info("s0", FLOAT, {2}), value_info("xs", FLOAT, {3, 2}), value_info("x", FLOAT, {2})};
    scan.nodes = {named_node("Scan", "the_scan", {"s0", "xs"}, {"s_final", "ys"},
                             {attr_graph("body", graph(body)), attr_int("num_scan_inputs", 1)})};
    scan.outputs = {test::output("s_final"), test::output("ys")};
    std::vector<Case> cases = {
        {"If", if_model(-1), {{1, 2, 3}, {4, 5, 6}, {1}}},
        {"If, else branch", if_model(-1), {{1, 2, 3}, {4, 5, 6}, {0}}},
        {"Loop", loop_model({float_init("v0", {2}, {10, 20})}, {value_info("M", INT64, {}), value_info("cond", BOOL, {})},
                            {"M", "cond", "v0"}, false, 2), {{10}, {1}, {1, 2}}},
        {"nested", nested_model(), {{1, 10}, {3}}},
        {"Scan", model_proto(graph(scan), 11), {{100, 200}, {1, 2, 3, 4, 5, 6}, {2, 3}}},
    };
    for (Case& c : cases) {
        INFO(std::string(c.name));
        Model m, back;
        REQUIRE(read(&m, c.proto) == Status::Ok);
        Status s = write_and_read(m, &back);
        INFO(back.last_error());
        REQUIRE(s == Status::Ok);
        // the same nodes, implicit inputs and bodies
        REQUIRE(back.graph.node_count() == m.graph.node_count());
        for (NodeId v = 0; v < m.graph.node_count(); ++v) {
            const Node& node = m.graph.node(v);
            NodeId w = back.graph.find(node.name);
            REQUIRE(w != kNoNode);
            CHECK(back.graph.node(w).num_inputs == node.num_inputs);
            for (const Attribute* a = node.attributes; a; a = a->next) {
                if (a->kind != AttributeKind::Graph) continue;
                const Attribute* b = back.graph.find_attribute(w, a->name);
                REQUIRE(b);
                REQUIRE(b->kind == AttributeKind::Graph);
                CHECK(static_cast<const Model*>(b->body)->outer_inputs == static_cast<const Model*>(a->body)->outer_inputs);
                CHECK(static_cast<const Model*>(b->body)->graph.node_count() == static_cast<const Model*>(a->body)->graph.node_count());
            }
        }
        Run original, written;
        INFO(original.error);
        REQUIRE(original.compile(m) == Status::Ok);
        INFO(written.error);
        REQUIRE(written.compile(back) == Status::Ok);
        REQUIRE(original.infer(c.inputs) == Status::Ok);
        REQUIRE(written.infer(c.inputs) == Status::Ok);
        REQUIRE(original.compiled.output_count() == written.compiled.output_count());
        for (uint32_t o = 0; o < original.compiled.output_count(); ++o) {
            CHECK(written.shape(o) == original.shape(o));
            CHECK(written.output(o) == original.output(o));
        }
    }
}

TEST_CASE("control flow: a body's run-time error names the body node") {
    GraphSpec then_branch;
    then_branch.nodes = {named_node("Gather", "body_gather", {"data", "index"}, {"t"})};
    then_branch.outputs = {test::output("t")};
    GraphSpec else_branch;
    else_branch.nodes = {named_node("Identity", "else_id", {"data"}, {"e"})};
    else_branch.outputs = {test::output("e")};
    GraphSpec g;
    g.inputs = {value_info("cond", BOOL, {}), value_info("data", FLOAT, {3}), value_info("index", INT64, {3})};
    g.nodes = {named_node("If", "the_if", {"cond"}, {"out"},
                          {attr_graph("then_branch", graph(then_branch)), attr_graph("else_branch", graph(else_branch))})};
    g.outputs = {test::output("out")};
    Model m;
    REQUIRE(read(&m, model_proto(graph(g), 13)) == Status::Ok);
    Run run;
    REQUIRE(run.compile(m) == Status::Ok);
    REQUIRE(run.infer({{1}, {1, 2, 3}, {2, 0, 1}}) == Status::Ok);
    CHECK(run.output(0) == std::vector<double>{3, 1, 2});
    CHECK(run.infer({{1}, {1, 2, 3}, {7, 0, 1}}) == Status::InvalidArgument);
    CHECK(contains(run.error, "body_gather"));
}

// ---- malformed bodies

TEST_CASE("control flow: a GRAPH attribute that holds no graph, or bytes that are not one, is ParseError") {
    GraphSpec g;
    g.inputs = {value_info("cond", BOOL, {})};
    g.outputs = {test::output("out")};
    SUBCASE("no g field") {
        Pb a;
        a.bytes(1, "then_branch").u(20, 5);
        g.nodes = {named_node("If", "the_if", {"cond"}, {"out"}, {a})};
        Model m;
        CHECK(read(&m, model_proto(graph(g), 13)) == Status::ParseError);
        CHECK(std::string(m.last_error()) == "node 'the_if' attribute 'then_branch' is a GRAPH without a graph");
    }
    SUBCASE("g is not a GraphProto") {
        Pb a;
        a.bytes(1, "then_branch").bytes(6, std::string("\x0a\x7f", 2)).u(20, 5);   // a node field longer than the bytes
        g.nodes = {named_node("If", "the_if", {"cond"}, {"out"}, {a})};
        Model m;
        CHECK(read(&m, model_proto(graph(g), 13)) == Status::ParseError);
        CHECK(contains(m.last_error(), "node 'the_if' (If) body 'then_branch': "));
    }
}

TEST_CASE("control flow: a non-graph attribute where a graph is required is InvalidArgument") {
    GraphSpec else_branch;
    else_branch.initializers = {float_init("b", {1}, {1})};
    else_branch.nodes = {named_node("Identity", "eb", {"b"}, {"e"})};
    else_branch.outputs = {test::output("e")};
    GraphSpec g;
    g.inputs = {value_info("cond", BOOL, {})};
    g.nodes = {named_node("If", "the_if", {"cond"}, {"out"}, {attr_int("then_branch", 1), attr_graph("else_branch", graph(else_branch))})};
    g.outputs = {test::output("out")};
    Model m;
    REQUIRE(read(&m, model_proto(graph(g), 13)) == Status::Ok);
    Run run;
    CHECK(run.compile(m) == Status::InvalidArgument);
    CHECK(run.error == "If 'the_if': attribute 'then_branch' must be a graph");

    GraphSpec loop;   // and a Loop without its body
    loop.initializers = {int64_init("M", {}, {2}), float_init("v0", {1}, {1})};
    loop.nodes = {named_node("Loop", "the_loop", {"M", "", "v0"}, {"v"})};
    loop.outputs = {test::output("v")};
    Model no_body;
    REQUIRE(read(&no_body, model_proto(graph(loop), 13)) == Status::Ok);
    Run missing;
    CHECK(missing.compile(no_body) == Status::InvalidArgument);
    CHECK(missing.error == "Loop 'the_loop': attribute 'body' (a graph) is missing");
}

TEST_CASE("control flow: an If branch with the wrong number of outputs is InvalidArgument") {
    Model m;
    REQUIRE(read(&m, if_model(-1, "Neg", 2)) == Status::Ok);
    Run run;
    CHECK(run.compile(m) == Status::InvalidArgument);
    CHECK(run.error == "If 'the_if': then_branch has 2 outputs, the node 1");
}

TEST_CASE("control flow: bodies nested past kMaxBodyDepth are LimitExceeded") {
    // If nodes, each then branch holding the next If (the else branch a leaf, so the model
    // grows linearly with the depth), kMaxBodyDepth + 1 levels deep.
    auto nested = [](uint32_t levels) {
        GraphSpec leaf;
        leaf.initializers = {float_init("v", {1}, {1})};
        leaf.nodes = {named_node("Identity", "leaf", {"v"}, {"r"})};
        leaf.outputs = {test::output("r")};
        Pb inner = graph(leaf);
        for (uint32_t k = 0; k < levels; ++k) {
            GraphSpec level;
            level.nodes = {named_node("If", "if_" + std::to_string(k), {"cond"}, {"r"},
                                      {attr_graph("then_branch", inner), attr_graph("else_branch", graph(leaf))})};
            level.outputs = {test::output("r")};
            inner = graph(level);
        }
        return inner;
    };
    auto top = [](const Pb& body) {
        GraphSpec g;   // the innermost branch reads `cond` from the top: one outer read per level
        g.inputs = {value_info("cond", BOOL, {})};
        g.nodes = {named_node("If", "top", {"cond"}, {"out"}, {attr_graph("then_branch", body), attr_graph("else_branch", body)})};
        g.outputs = {test::output("out")};
        return model_proto(graph(g), 13);
    };
    Model ok;
    REQUIRE(read(&ok, top(nested(kMaxBodyDepth - 1))) == Status::Ok);
    Model deep;
    CHECK(read(&deep, top(nested(kMaxBodyDepth))) == Status::LimitExceeded);
    CAPTURE(std::string(deep.last_error()).substr(0, 300));
    CHECK(contains(deep.last_error(), "subgraph bodies nest deeper than 16 levels"));
}

TEST_CASE("control flow: a body reading a name that exists nowhere is DanglingInput") {
    GraphSpec then_branch;
    then_branch.nodes = {named_node("Neg", "then_neg", {"nowhere"}, {"t"})};
    then_branch.outputs = {test::output("t")};
    GraphSpec else_branch;
    else_branch.nodes = {named_node("Neg", "else_neg", {"x"}, {"e"})};
    else_branch.outputs = {test::output("e")};
    GraphSpec g;
    g.inputs = {value_info("cond", BOOL, {}), value_info("x", FLOAT, {2})};
    g.nodes = {named_node("If", "the_if", {"cond"}, {"out"},
                          {attr_graph("then_branch", graph(then_branch)), attr_graph("else_branch", graph(else_branch))})};
    g.outputs = {test::output("out")};
    Model m;
    CHECK(read(&m, model_proto(graph(g), 13)) == Status::DanglingInput);
    CHECK(std::string(m.last_error()) == "node 'the_if' (If): a body reads tensor 'nowhere', which no node, input or initializer produces");
}

TEST_CASE("control flow: malformed Loop and Scan nodes never crash") {
    // Random node shapes around a valid body: wrong input counts, absent inputs, bad axes.
    GraphSpec body;
    body.inputs = {value_info("a", FLOAT, {2}), value_info("b", FLOAT, {2})};
    body.nodes = {named_node("Add", "body_add", {"a", "b"}, {"c"})};
    body.outputs = {test::output("c"), test::output("c")};
    const char* ops[] = {"Loop", "Scan", "If"};
    for (const char* op : ops)
        for (int inputs = 0; inputs < 4; ++inputs)
            for (int outputs = 1; outputs < 4; ++outputs)
                for (int64_t axis : {-3, 0, 5}) {
                    CAPTURE(op);
                    CAPTURE(inputs);
                    GraphSpec g;
                    g.inputs = {value_info("x", FLOAT, {2, 2}), value_info("y", FLOAT, {2})};
                    std::vector<std::string> in, out;
                    for (int i = 0; i < inputs; ++i) in.push_back(i % 2 ? "y" : "x");
                    for (int o = 0; o < outputs; ++o) out.push_back("o" + std::to_string(o));
                    g.nodes = {named_node(op, "n", in, out,
                                          {attr_graph("body", graph(body)), attr_graph("then_branch", graph(body)),
                                           attr_graph("else_branch", graph(body)), attr_int("num_scan_inputs", 1),
                                           attr_ints("scan_input_axes", {axis})})};
                    for (const std::string& o : out) g.outputs.push_back(test::output(o));
                    Model m;
                    if (read(&m, model_proto(graph(g), 16)) != Status::Ok) continue;
                    Run run;
                    Status s = run.compile(m);
                    if (s != Status::Ok) {
                        CHECK(!run.error.empty());
                        continue;
                    }
                    (void)run.infer({{1, 2, 3, 4}, {1, 2}});
                }
}
