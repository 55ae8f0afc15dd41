// HETERO lanes: subgraphs of different devices that the partition's DAG leaves unordered run
// at once (runtime.h >>hetero lanes). TEMPLATE and CPU each get an op only they run (an
// extension), so the partition is known; the ops meet at a rendezvous that only passes when
// both run at the same time, and fail on demand, on either device.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "alloc_counter.h"
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

std::atomic<int> g_arrived{0};
std::atomic<bool> g_rendezvous{false};   // the gates wait (up to a few seconds) for each other
std::atomic<bool> g_met{false};          // set when a gate saw the other one arrive
std::atomic<int> g_fail{0};              // 1: GateT fails, 2: GateC fails

Status prepare_gate(PrepareContext& c) {
    if (c.num_inputs != 1 || c.inputs[0].type != ElementType::Float32) return c.fail(Status::InvalidArgument, "one float input");
    c.outputs[0] = c.inputs[0];
    return Status::Ok;
}

Status run_gate(const RunContext& c, int which) {
    if (g_rendezvous) {
        ++g_arrived;
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (g_arrived.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
        if (g_arrived.load() >= 2) g_met = true;
    }
    if (g_fail == which) return c.fail(Status::IoError, "gate %d failed on purpose", which);
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    for (uint64_t i = 0; i < c.inputs[0].elements(); ++i) y[i] = 2 * x[i] + (float)which;
    return Status::Ok;
}
Status run_gate_t(const RunContext& c) { return run_gate(c, 1); }
Status run_gate_c(const RunContext& c) { return run_gate(c, 2); }

void add_gates(Core& core) {
    OpKernel t;
    t.op = "GateT";
    t.prepare = prepare_gate;
    t.run = run_gate_t;
    REQUIRE(core.device("TEMPLATE")->add_extension(t) == Status::Ok);
    OpKernel c;
    c.op = "GateC";
    c.prepare = prepare_gate;
    c.run = run_gate_c;
    REQUIRE(core.device("CPU")->add_extension(c) == Status::Ok);
}

NodeId node(Model& m, const char* op, const char* name, std::vector<NodeId> inputs) {
    std::vector<InputRef> refs;
    for (NodeId i : inputs) refs.push_back(InputRef::by_id(i));
    NodeId id;
    REQUIRE(m.add_node(op, name, Span<const InputRef>(refs.data(), refs.size()), 1, &id) == Status::Ok);
    return id;
}

// x -> GateT -> Relu -> Sigmoid (TEMPLATE) and y -> GateC -> Tanh -> Exp (CPU): two
// components, two subgraphs no edge orders. With `join`, Add(Sigmoid, Exp) -> Neg after them.
void build(Model* m, bool join) {
    NodeId x, y;
    REQUIRE(m->add_input("x", test::make_desc(ElementType::Float32, {3, 50}), &x) == Status::Ok);
    REQUIRE(m->add_input("y", test::make_desc(ElementType::Float32, {3, 50}), &y) == Status::Ok);
    NodeId t = node(*m, "Sigmoid", "sigmoid", {node(*m, "Relu", "relu", {node(*m, "GateT", "gate_t", {x})})});
    NodeId c = node(*m, "Exp", "exp", {node(*m, "Tanh", "tanh", {node(*m, "GateC", "gate_c", {y})})});
    REQUIRE(m->add_output("t", InputRef::by_id(t)) == Status::Ok);
    REQUIRE(m->add_output("c", InputRef::by_id(c)) == Status::Ok);
    if (join) REQUIRE(m->add_output("j", InputRef::by_id(node(*m, "Neg", "neg", {node(*m, "Add", "add", {t, c})}))) == Status::Ok);
    m->opset = 17;
    REQUIRE(m->finalize() == Status::Ok);
}

struct Run {
    Status status = Status::Ok;
    std::string error;
    std::vector<std::vector<float>> outputs;
};

Run run(CompiledModel& compiled, InferRequest& request) {
    Run r;
    for (uint32_t i = 0; i < 2; ++i) {
        float* p = request.input(i).data_as<float>();
        for (uint32_t k = 0; k < 150; ++k) p[k] = std::sin(0.1f * (float)(k + 37 * i)) * 3;
    }
    r.status = request.infer();
    r.error = request.last_error();
    for (uint32_t o = 0; o < compiled.output_count() && r.status == Status::Ok; ++o) {
        const float* p = request.output(o).data_as<float>();
        r.outputs.emplace_back(p, p + 150);
    }
    return r;
}

void compile(Core& core, const Model& m, bool concurrent, CompiledModel* compiled) {
    ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", "Relu,Sigmoid,GateT"}, {"HETERO_CONCURRENT", concurrent ? "YES" : "NO"}};
    Status s = core.compile_model(m, "HETERO:TEMPLATE,CPU", config, compiled);
    INFO(std::string(core.last_error()));
    REQUIRE(s == Status::Ok);
    REQUIRE(compiled->placement().size == 2);
    CHECK(compiled->placement()[0].nodes == 3);   // GateT, Relu, Sigmoid
}

}  // namespace

TEST_CASE("hetero lanes: independent subgraphs of two devices run at once, with the sequential run's outputs") {
    for (bool join : {false, true}) {
        INFO("join " << join);
        Model m;
        build(&m, join);
        Core core;
        add_gates(core);
        CompiledModel sequential, concurrent;
        compile(core, m, false, &sequential);
        compile(core, m, true, &concurrent);
        InferRequest a, b;
        REQUIRE(sequential.create_request(&a) == Status::Ok);
        REQUIRE(concurrent.create_request(&b) == Status::Ok);
        g_rendezvous = false;
        g_fail = 0;
        Run one = run(sequential, a);
        REQUIRE(one.status == Status::Ok);
        // Apart, the gates only pass together: met means TEMPLATE's and CPU's subgraphs overlapped.
        for (int repeat = 0; repeat < 3; ++repeat) {
            g_arrived = 0;
            g_met = false;
            g_rendezvous = !join;   // joined, the CPU's subgraph waits for TEMPLATE's (one subgraph per device)
            uint64_t before = tessel_test::allocation_count();
            Run two = run(concurrent, b);
            CHECK(tessel_test::allocation_count() == before);
            g_rendezvous = false;
            INFO(two.error);
            REQUIRE(two.status == Status::Ok);
            if (!join) CHECK(g_met.load());
            REQUIRE(two.outputs.size() == one.outputs.size());
            for (size_t o = 0; o < one.outputs.size(); ++o) CHECK(two.outputs[o] == one.outputs[o]);
        }
        if (join) {   // the join waits for both lanes: -(sigmoid(relu(2x + 1)) + exp(tanh(2y + 2)))
            float x0 = std::sin(0.0f) * 3, y0 = std::sin(3.7f) * 3;
            float want = -(1 / (1 + std::exp(-std::max(0.0f, 2 * x0 + 1))) + std::exp(std::tanh(2 * y0 + 2)));
            CHECK(std::fabs(one.outputs[2][0] - want) < 1e-5f);
        }
    }
}

TEST_CASE("hetero lanes: a failure on either device is the inference's error, and no lane hangs") {
    for (bool join : {false, true})
        for (int which : {1, 2}) {
            INFO("join " << join << ", failing gate " << which);
            Model m;
            build(&m, join);
            Core core;
            add_gates(core);
            CompiledModel compiled;
            compile(core, m, true, &compiled);
            InferRequest request;
            REQUIRE(compiled.create_request(&request) == Status::Ok);
            g_rendezvous = false;
            g_fail = which;
            Run failed = run(compiled, request);
            CHECK(failed.status == Status::IoError);
            CHECK(failed.error.find("gate " + std::to_string(which) + " failed on purpose") != std::string::npos);
            g_fail = 0;   // the request runs again after a failure
            Run fine = run(compiled, request);
            CHECK(fine.status == Status::Ok);
            CHECK(fine.outputs.size() == (join ? 3u : 2u));
        }
}

TEST_CASE("hetero lanes: PERF_COUNT gives every step its start, on both devices' timelines") {
    Model m;
    build(&m, false);
    Core core;
    add_gates(core);
    ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", "Relu,Sigmoid,GateT"}, {"PERF_COUNT", "YES"}};
    CompiledModel compiled;
    REQUIRE(core.compile_model(m, "HETERO:TEMPLATE,CPU", config, &compiled) == Status::Ok);
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    g_arrived = 0;
    g_rendezvous = true;
    g_fail = 0;
    Run r = run(compiled, request);
    g_rendezvous = false;
    REQUIRE(r.status == Status::Ok);
    Span<const ProfileEntry> p = request.profiling_info();
    uint64_t template_start = ~0ull, template_end = 0, cpu_start = ~0ull, cpu_end = 0;
    for (const ProfileEntry& e : p) {
        bool t = e.device == StringView("TEMPLATE");
        uint64_t& start = t ? template_start : cpu_start;
        uint64_t& end = t ? template_end : cpu_end;
        if (e.start_ns < start) start = e.start_ns;
        if (e.start_ns + e.ns > end) end = e.start_ns + e.ns;
    }
    REQUIRE(template_end > 0);
    REQUIRE(cpu_end > 0);
    // The gates met, so each timeline starts before the other ends.
    CHECK(template_start < cpu_end);
    CHECK(cpu_start < template_end);
}

TEST_CASE("hetero lanes: HETERO_CONCURRENT takes YES or NO") {
    Model m;
    build(&m, false);
    Core core;
    add_gates(core);
    CompiledModel compiled;
    ConfigEntry config[] = {{"HETERO_CONCURRENT", "sometimes"}};
    CHECK(core.compile_model(m, "HETERO:TEMPLATE,CPU", config, &compiled) == Status::InvalidArgument);
    CHECK(std::string(core.last_error()) == "HETERO_CONCURRENT must be YES or NO");
}
