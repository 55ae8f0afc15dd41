// Bounded ops (NonZero, Unique, ...) inside Loop, If and Scan bodies: the body prepares again
// at each run with its inputs' values, when its outputs' shapes are known at compile time.
// Results checked against values worked out by hand; a body output whose shape follows the
// data is refused, at compile time when it is the bounded op's own output, else at run time.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

std::vector<float> floats_of(const Tensor& t) {
    const float* p = t.data_as<float>();
    return std::vector<float>(p, p + t.elements());
}
using test::shape_of;

// sum = ReduceSum(Cast<float>(NonZero(x)), keepdims 0): the sum of x's non-zero indices.
NodeId add_index_sum(Model* body, NodeId x, const char* prefix, NodeId* nonzero = nullptr) {
    std::string p(prefix);
    NodeId nz, cast, sum;
    InputRef in[] = {InputRef::by_id(x)};
    REQUIRE(body->add_node("NonZero", StringView((p + "nz").c_str()), in, 1, &nz) == Status::Ok);
    InputRef cin[] = {InputRef::by_id(nz)};
    REQUIRE(body->add_node("Cast", StringView((p + "cast").c_str()), cin, 1, &cast) == Status::Ok);
    REQUIRE(body->set_int(cast, "to", 1) == Status::Ok);
    InputRef sin[] = {InputRef::by_id(cast)};
    REQUIRE(body->add_node("ReduceSum", StringView((p + "sum").c_str()), sin, 1, &sum) == Status::Ok);
    REQUIRE(body->set_int(sum, "keepdims", 0) == Status::Ok);
    if (nonzero) *nonzero = nz;
    return sum;
}

// Loop(M = 3, cond true, x[n]): the body scans out the sum of x's non-zero indices and carries
// Relu(x - 1). With `scan_indices`, it scans out Relu(Cast(NonZero(x))) instead (its shape
// follows the data); with `scan_nonzero`, NonZero's output itself.
void build_loop(Model* m, int64_t n, bool scan_indices = false, bool scan_nonzero = false) {
    NodeId x, trip, cond, loop;
    REQUIRE(m->add_input("x", test::make_desc(ElementType::Float32, {n}), &x) == Status::Ok);
    int64_t three = 3;
    uint8_t yes = 1;
    float one = 1;
    REQUIRE(m->add_constant("M", test::make_desc(ElementType::Int64, {}), &three, &trip) == Status::Ok);
    REQUIRE(m->add_constant("cond", test::make_desc(ElementType::Bool, {}), &yes, &cond) == Status::Ok);
    Model* body = nullptr;
    REQUIRE(m->add_body(&body) == Status::Ok);
    NodeId i, c, xin, bone, sub, relu, cond_out;
    REQUIRE(body->add_input("i", test::make_desc(ElementType::Int64, {}), &i) == Status::Ok);
    REQUIRE(body->add_input("c", test::make_desc(ElementType::Bool, {}), &c) == Status::Ok);
    REQUIRE(body->add_input("x_in", test::make_desc(ElementType::Float32, {n}), &xin) == Status::Ok);
    REQUIRE(body->add_constant("one", test::make_desc(ElementType::Float32, {}), &one, &bone) == Status::Ok);
    InputRef cin[] = {InputRef::by_id(c)};
    REQUIRE(body->add_node("Identity", "keep_cond", cin, 1, &cond_out) == Status::Ok);
    NodeId nz = kNoNode;
    NodeId scanned = add_index_sum(body, xin, "", &nz);
    if (scan_indices) {
        NodeId cast, indices;
        InputRef nin[] = {InputRef::by_id(nz)};
        REQUIRE(body->add_node("Cast", "indices_cast", nin, 1, &cast) == Status::Ok);
        REQUIRE(body->set_int(cast, "to", 1) == Status::Ok);
        InputRef rin[] = {InputRef::by_id(cast)};
        REQUIRE(body->add_node("Relu", "indices", rin, 1, &indices) == Status::Ok);
        scanned = indices;
    }
    if (scan_nonzero) scanned = nz;
    InputRef sub_in[] = {InputRef::by_id(xin), InputRef::by_id(bone)};
    REQUIRE(body->add_node("Sub", "sub", sub_in, 1, &sub) == Status::Ok);
    InputRef relu_in[] = {InputRef::by_id(sub)};
    REQUIRE(body->add_node("Relu", "relu", relu_in, 1, &relu) == Status::Ok);
    REQUIRE(body->add_output("cond_out", InputRef::by_id(cond_out)) == Status::Ok);
    REQUIRE(body->add_output("x_out", InputRef::by_id(relu)) == Status::Ok);
    REQUIRE(body->add_output("scanned", InputRef::by_id(scanned)) == Status::Ok);
    REQUIRE(body->finalize() == Status::Ok);
    InputRef in[] = {InputRef::by_id(trip), InputRef::by_id(cond), InputRef::by_id(x)};
    REQUIRE(m->add_node("Loop", "loop", in, 2, &loop) == Status::Ok);
    REQUIRE(m->set_graph(loop, "body", body) == Status::Ok);
    REQUIRE(m->add_output("x_final", InputRef::by_id(loop, 0)) == Status::Ok);
    REQUIRE(m->add_output("sums", InputRef::by_id(loop, 1)) == Status::Ok);
    REQUIRE(m->finalize() == Status::Ok);
}

Status compile(Core& core, const Model& m, const char* device, const char* template_ops, CompiledModel* compiled) {
    ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", template_ops}};
    Span<const ConfigEntry> entries(config, device[0] == 'H' ? 1 : 0);
    return core.compile_model(m, device, entries, compiled);
}

}  // namespace

TEST_CASE("dynamic bodies: a Loop body with NonZero inside runs with the count each iteration finds") {
    Model m;
    build_loop(&m, 100);
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        CAPTURE(device);
        Core core;
        CompiledModel compiled;
        REQUIRE(compile(core, m, device, "Loop", &compiled) == Status::Ok);
        CHECK(!compiled.data_dependent());   // x has 100 elements: the body, not a later stage, waits for it
        std::string blob;   // export and import keep the body
        REQUIRE(compiled.export_model(test::append_to_string, &blob) == Status::Ok);
        CompiledModel imported;
        REQUIRE(core.import_model(blob.data(), blob.size(), &imported) == Status::Ok);
        InferRequest request;
        REQUIRE(imported.create_request(&request) == Status::Ok);
        for (int round = 0; round < 2; ++round) {
            std::vector<float> x(100, 0.0f);
            // non-zero at 0, 2, 3, 5 (3, 1, 2, 5) in round 0; at 7, 99 (1, 2) in round 1
            if (round == 0) { x[0] = 3; x[2] = 1; x[3] = 2; x[5] = 5; }
            else { x[7] = 1; x[99] = 2; }
            std::memcpy(request.input(0).data(), x.data(), x.size() * sizeof(float));
            REQUIRE(request.infer() == Status::Ok);
            CHECK(shape_of(request.output(1)) == std::vector<int64_t>{3});
            std::vector<float> final_x(100, 0.0f);
            if (round == 0) {
                // iterations: indices {0,2,3,5} -> 10, {0,3,5} -> 8, {0,5} -> 5; x ends at 5 - 3 = 2 at index 5
                CHECK(floats_of(request.output(1)) == std::vector<float>{10, 8, 5});
                final_x[5] = 2;
            } else {
                CHECK(floats_of(request.output(1)) == std::vector<float>{106, 99, 0});
            }
            CHECK(floats_of(request.output(0)) == final_x);
        }
    }
}

TEST_CASE("dynamic bodies: If branches and a Scan body with bounded ops inside") {
    SUBCASE("If: NonZero in one branch, the other a plain sum") {
        Model m;
        NodeId cond, x, node;
        REQUIRE(m.add_input("cond", test::make_desc(ElementType::Bool, {}), &cond) == Status::Ok);
        REQUIRE(m.add_input("x", test::make_desc(ElementType::Float32, {80}), &x) == Status::Ok);
        Model* then_body = nullptr;
        Model* else_body = nullptr;
        REQUIRE(m.add_body(&then_body) == Status::Ok);
        REQUIRE(m.add_body(&else_body) == Status::Ok);
        NodeId outer, sum;
        REQUIRE(then_body->add_input("x", test::make_desc(ElementType::Float32, {80}), &outer) == Status::Ok);
        then_body->outer_inputs = 1;
        REQUIRE(then_body->add_output("y", InputRef::by_id(add_index_sum(then_body, outer, "then_"))) == Status::Ok);
        REQUIRE(then_body->finalize() == Status::Ok);
        REQUIRE(else_body->add_input("x", test::make_desc(ElementType::Float32, {80}), &outer) == Status::Ok);
        else_body->outer_inputs = 1;
        InputRef sin[] = {InputRef::by_id(outer)};
        REQUIRE(else_body->add_node("ReduceSum", "else_sum", sin, 1, &sum) == Status::Ok);
        REQUIRE(else_body->set_int(sum, "keepdims", 0) == Status::Ok);
        REQUIRE(else_body->add_output("y", InputRef::by_id(sum)) == Status::Ok);
        REQUIRE(else_body->finalize() == Status::Ok);
        InputRef in[] = {InputRef::by_id(cond), InputRef::by_id(x)};
        REQUIRE(m.add_node("If", "if", in, 1, &node) == Status::Ok);
        REQUIRE(m.set_graph(node, "then_branch", then_body) == Status::Ok);
        REQUIRE(m.set_graph(node, "else_branch", else_body) == Status::Ok);
        REQUIRE(m.add_output("y", InputRef::by_id(node)) == Status::Ok);
        REQUIRE(m.finalize() == Status::Ok);
        for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
            CAPTURE(device);
            Core core;
            CompiledModel compiled;
            REQUIRE(compile(core, m, device, "If", &compiled) == Status::Ok);
            InferRequest request;
            REQUIRE(compiled.create_request(&request) == Status::Ok);
            std::vector<float> x(80, 0.0f);
            x[1] = 4;
            x[10] = 0.5f;
            x[79] = -1;
            std::memcpy(request.input(1).data(), x.data(), x.size() * sizeof(float));
            for (uint8_t c : {1, 0, 1}) {
                request.input(0).data_as<uint8_t>()[0] = c;
                REQUIRE(request.infer() == Status::Ok);
                CHECK(shape_of(request.output(0)).empty());
                CHECK(floats_of(request.output(0)) == std::vector<float>{c ? 90.0f : 3.5f});
            }
        }
    }
    SUBCASE("Scan: the sum of each row's distinct values (Unique)") {
        Model m;
        m.opset = 11;
        NodeId x, scan;
        REQUIRE(m.add_input("x", test::make_desc(ElementType::Float32, {3, 70}), &x) == Status::Ok);
        Model* body = nullptr;
        REQUIRE(m.add_body(&body) == Status::Ok);
        NodeId row, unique, sum;
        REQUIRE(body->add_input("row", test::make_desc(ElementType::Float32, {70}), &row) == Status::Ok);
        InputRef uin[] = {InputRef::by_id(row)};
        REQUIRE(body->add_node("Unique", "unique", uin, 1, &unique) == Status::Ok);
        InputRef sin[] = {InputRef::by_id(unique)};
        REQUIRE(body->add_node("ReduceSum", "sum", sin, 1, &sum) == Status::Ok);
        REQUIRE(body->set_int(sum, "keepdims", 0) == Status::Ok);
        REQUIRE(body->add_output("s", InputRef::by_id(sum)) == Status::Ok);
        REQUIRE(body->finalize() == Status::Ok);
        InputRef in[] = {InputRef::by_id(x)};
        REQUIRE(m.add_node("Scan", "scan", in, 1, &scan) == Status::Ok);
        REQUIRE(m.set_int(scan, "num_scan_inputs", 1) == Status::Ok);
        REQUIRE(m.set_graph(scan, "body", body) == Status::Ok);
        REQUIRE(m.add_output("sums", InputRef::by_id(scan)) == Status::Ok);
        REQUIRE(m.finalize() == Status::Ok);
        Core core;
        CompiledModel compiled;
        REQUIRE(compile(core, m, "CPU", "", &compiled) == Status::Ok);
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        float* data = request.input(0).data_as<float>();
        for (int k = 0; k < 3 * 70; ++k) data[k] = 0;
        for (int k = 0; k < 70; ++k) data[k] = (float)(k % 4);        // row 0: 0..3 -> 6
        for (int k = 0; k < 70; ++k) data[70 + k] = 5;                // row 1: 5
        data[140] = 2; data[141] = 2; data[142] = -7;                 // row 2: 0, 2, -7 -> -5
        REQUIRE(request.infer() == Status::Ok);
        CHECK(floats_of(request.output(0)) == std::vector<float>{6, 5, -5});
    }
}

TEST_CASE("dynamic bodies: a body output whose shape follows the data is Unsupported") {
    SUBCASE("the bounded op's own output: at compile time") {
        Model m;
        build_loop(&m, 100, false, true);
        Core core;
        CompiledModel compiled;
        CHECK(core.compile_model(m, "CPU", Span<const ConfigEntry>(), &compiled) == Status::Unsupported);
        CHECK(std::string(core.last_error()).find("output 'scanned' is 'nz', whose shape depends on its data") != std::string::npos);
    }
    SUBCASE("the shape of a value after the bounded op: at compile time") {
        Model m;
        NodeId x, node;
        REQUIRE(m.add_input("x", test::make_desc(ElementType::Float32, {100}), &x) == Status::Ok);
        Model* body = nullptr;
        REQUIRE(m.add_body(&body) == Status::Ok);
        NodeId outer, nz, shape;
        REQUIRE(body->add_input("x", test::make_desc(ElementType::Float32, {100}), &outer) == Status::Ok);
        body->outer_inputs = 1;
        InputRef in[] = {InputRef::by_id(outer)};
        REQUIRE(body->add_node("NonZero", "nz", in, 1, &nz) == Status::Ok);
        InputRef shin[] = {InputRef::by_id(nz)};
        REQUIRE(body->add_node("Shape", "count", shin, 1, &shape) == Status::Ok);
        REQUIRE(body->add_output("y", InputRef::by_id(shape)) == Status::Ok);
        REQUIRE(body->finalize() == Status::Ok);
        NodeId cond;
        uint8_t yes = 1;
        REQUIRE(m.add_input("c", test::make_desc(ElementType::Bool, {}), &cond) == Status::Ok);
        (void)yes;
        InputRef iin[] = {InputRef::by_id(cond), InputRef::by_id(x)};
        REQUIRE(m.add_node("If", "if", iin, 1, &node) == Status::Ok);
        REQUIRE(m.set_graph(node, "then_branch", body) == Status::Ok);
        REQUIRE(m.set_graph(node, "else_branch", body) == Status::Ok);
        REQUIRE(m.add_output("y", InputRef::by_id(node)) == Status::Ok);
        REQUIRE(m.finalize() == Status::Ok);
        Core core;
        CompiledModel compiled;
        // the If waits for c (a later stage); there its branch reads NonZero's shape
        Status s = core.compile_model(m, "CPU", Span<const ConfigEntry>(), &compiled);
        if (s == Status::Ok) {
            InferRequest request;
            REQUIRE(compiled.create_request(&request) == Status::Ok);
            request.input(1).data_as<uint8_t>()[0] = 1;
            s = request.infer();
            CHECK(std::string(request.last_error()).find("it reads the shape of 'nz', which depends on its data") != std::string::npos);
        } else {
            CHECK(std::string(core.last_error()).find("it reads the shape of 'nz', which depends on its data") != std::string::npos);
        }
        CHECK(s == Status::Unsupported);
    }
    SUBCASE("a value computed from the bounded op's output: at run time, unless the count is the bound") {
        Model m;
        build_loop(&m, 100, true);
        Core core;
        CompiledModel compiled;
        REQUIRE(core.compile_model(m, "CPU", Span<const ConfigEntry>(), &compiled) == Status::Ok);
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        float* x = request.input(0).data_as<float>();
        for (int k = 0; k < 100; ++k) x[k] = 4;   // every element non-zero for 3 iterations: the bound
        REQUIRE(request.infer() == Status::Ok);
        CHECK(shape_of(request.output(1)) == std::vector<int64_t>{3, 1, 100});
        x[3] = 0;
        CHECK(request.infer() == Status::Unsupported);
        CHECK(std::string(request.last_error()).find("output 2 is f32[1,99] at run time, f32[1,100] as compiled") !=
              std::string::npos);
    }
}
