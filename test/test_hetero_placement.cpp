// HETERO_PLACEMENT=cost (runtime.h >>hetero placement): a node several devices run goes where
// launch + max(FLOPs / peak, bytes / bandwidth) plus the copies of its inputs is lowest. The
// devices' figures are given with HETERO_COST_MODEL, so each expected placement is exact.
#include <doctest/doctest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

// x[1,8,32,32] -> conv (3x3, 8->8, 1.2 MFLOP) -> relu (8192 elements); y[4] -> tiny (a Relu of 4).
void build(Model* m, std::vector<float>* weights) {
    NodeId x, y, w, conv, relu, tiny;
    REQUIRE(m->add_input("x", test::make_desc(ElementType::Float32, {1, 8, 32, 32}), &x) == Status::Ok);
    REQUIRE(m->add_input("y", test::make_desc(ElementType::Float32, {4}), &y) == Status::Ok);
    weights->assign(8 * 8 * 9, 0.01f);
    REQUIRE(m->add_constant("w", test::make_desc(ElementType::Float32, {8, 8, 3, 3}), weights->data(), &w) == Status::Ok);
    InputRef conv_in[] = {InputRef::by_id(x), InputRef::by_id(w)};
    REQUIRE(m->add_node("Conv", "conv", conv_in, 1, &conv) == Status::Ok);
    int64_t pads[] = {1, 1, 1, 1};
    REQUIRE(m->set_ints(conv, "pads", Span<const int64_t>(pads, 4)) == Status::Ok);
    InputRef relu_in[] = {InputRef::by_id(conv)};
    REQUIRE(m->add_node("Relu", "relu", relu_in, 1, &relu) == Status::Ok);
    InputRef tiny_in[] = {InputRef::by_id(y)};
    REQUIRE(m->add_node("Relu", "tiny", tiny_in, 1, &tiny) == Status::Ok);
    REQUIRE(m->add_output("a", InputRef::by_id(relu)) == Status::Ok);
    REQUIRE(m->add_output("b", InputRef::by_id(tiny)) == Status::Ok);
    m->opset = 17;
    REQUIRE(m->finalize() == Status::Ok);
}

// The device of every node, "conv=TEMPLATE relu=CPU tiny=CPU", from the profile of one inference.
std::string placement(const char* placement_key, const char* costs) {
    Model m;
    std::vector<float> weights;
    build(&m, &weights);
    Core core;
    std::vector<ConfigEntry> config = {{"TEMPLATE:SUPPORTED_OPS", "Conv,Relu"}, {"PERF_COUNT", "YES"}, {"CPU:FUSION", "NO"},
                                       {"HETERO_PLACEMENT", placement_key}};
    if (costs) config.push_back({"HETERO_COST_MODEL", costs});
    CompiledModel compiled;
    Status s = core.compile_model(m, "HETERO:TEMPLATE,CPU", Span<const ConfigEntry>(config.data(), config.size()), &compiled);
    INFO(std::string(core.last_error()));
    REQUIRE(s == Status::Ok);
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    REQUIRE(request.infer() == Status::Ok);
    std::map<std::string, std::string> device;
    for (const ProfileEntry& e : request.profiling_info())
        if (std::string(e.kernel) != "transfer") device[test::to_string(e.node)] = test::to_string(e.device);
    return "conv=" + device["conv"] + " relu=" + device["relu"] + " tiny=" + device["tiny"];
}

}  // namespace

TEST_CASE("hetero placement: first puts every node on the first device that runs it") {
    CHECK(placement("first", nullptr) == "conv=TEMPLATE relu=TEMPLATE tiny=TEMPLATE");
    CHECK(placement("first", "TEMPLATE=1/1/1000;CPU=1000/100/0") == "conv=TEMPLATE relu=TEMPLATE tiny=TEMPLATE");
}

TEST_CASE("hetero placement: cost weighs launch, FLOPs, bytes and the copies between devices") {
    // A fast accelerator with a 50 us launch: the Conv (CPU: 118 us of FLOPs) goes there; the
    // Relu after it costs 50.7 us there against 1 + 6.6 + 3.3 (copy) us on the CPU; the tiny
    // Relu 50 us against 1 us.
    CHECK(placement("cost", "TEMPLATE=1000/100/50;CPU=10/10/1") == "conv=TEMPLATE relu=CPU tiny=CPU");
    // Launches free: the accelerator wins everything.
    CHECK(placement("cost", "TEMPLATE=1000/100/0;CPU=10/10/1") == "conv=TEMPLATE relu=TEMPLATE tiny=TEMPLATE");
    // A slow accelerator: everything stays on the CPU.
    CHECK(placement("cost", "TEMPLATE=10/10/1;CPU=1000/100/0") == "conv=CPU relu=CPU tiny=CPU");
    // The copy decides: the Relu costs 0.8 + 0.655 us on TEMPLATE and 0.5 + 0.655 us on the
    // CPU, plus 0.328 us to copy the Conv's 32 KB there; the tiny Relu has nothing to copy.
    CHECK(placement("cost", "TEMPLATE=2000/100/0.8;CPU=1000/100/0.5") == "conv=TEMPLATE relu=TEMPLATE tiny=CPU");
}

TEST_CASE("hetero placement: the CPU measures its COST_MODEL; bad placement keys are refused") {
    Core core;
    StringView v;
    REQUIRE(core.device("CPU")->get_metric("COST_MODEL", &v) == Status::Ok);
    double gflops = 0, gbps = 0, launch = -1;
    REQUIRE(std::sscanf(test::to_string(v).c_str(), "%lf/%lf/%lf", &gflops, &gbps, &launch) == 3);
    CHECK(gflops > 0);
    CHECK(gbps > 0);
    CHECK(launch >= 0);
    CHECK(core.device("TEMPLATE")->get_metric("COST_MODEL", &v) == Status::NotFound);   // the default figures then
    CHECK(placement("cost", nullptr).find("conv=") == 0);   // measured CPU, default TEMPLATE: runs
    Model m;
    std::vector<float> weights;
    build(&m, &weights);
    CompiledModel compiled;
    ConfigEntry bad_key[] = {{"HETERO_PLACEMENT", "best"}};
    CHECK(core.compile_model(m, "HETERO:TEMPLATE,CPU", bad_key, &compiled) == Status::InvalidArgument);
    CHECK(std::string(core.last_error()) == "HETERO_PLACEMENT must be first or cost");
    for (const char* text : {"CPU=fast", "CPU=1/2", "=1/2/3", "CPU=0/1/1", "CPU=1/1/1;TEMPLATE", "CPU=1/1/1x"}) {
        INFO(text);
        ConfigEntry bad_cost[] = {{"HETERO_COST_MODEL", text}};
        CHECK(core.compile_model(m, "HETERO:TEMPLATE,CPU", bad_cost, &compiled) == Status::InvalidArgument);
        CHECK(std::string(core.last_error()) == "HETERO_COST_MODEL must be DEVICE=GFLOPS/GBPS/LAUNCH_US entries separated by ';'");
    }
}
