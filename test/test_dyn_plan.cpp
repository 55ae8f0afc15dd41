// runtime.h: the plans a model with free input dims makes per input shape, on long chains and
// on HETERO lanes that run at once: the memory plan's time blocks and long-lived buffers, and
// the concurrent windows of the lanes, give every shape the outputs of a compile at that shape.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

TensorDesc float_desc(std::initializer_list<int64_t> dims) { return test::make_desc(ElementType::Float32, dims); }

// x[N,4,H,W] -> `blocks` x (Conv(3x3, pad 1) beside Relu(Sigmoid(p)), then Add of the two):
// on HETERO with TEMPLATE taking the Convs, each block's Conv and Sigmoid-Relu are on
// different lanes and reach neither way, so they may run at once. x lives the whole run.
void build_lanes(Model* m, uint32_t blocks) {
    NodeId p;
    REQUIRE(m->add_input("x", float_desc({-1, 4, -1, -1}), &p) == Status::Ok);
    std::vector<float> w(4 * 4 * 9);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.03f * (float)((i * 5) % 11) - 0.15f;
    for (uint32_t k = 0; k < blocks; ++k) {
        std::string n = std::to_string(k);
        NodeId wn, conv, sig, relu, add;
        REQUIRE(m->add_constant(StringView(("w" + n).c_str()), float_desc({4, 4, 3, 3}), w.data(), &wn) == Status::Ok);
        InputRef cin[] = {InputRef::by_id(p), InputRef::by_id(wn)};
        REQUIRE(m->add_node("Conv", StringView(("conv" + n).c_str()), cin, 1, &conv) == Status::Ok);
        int64_t pads[] = {1, 1, 1, 1};
        REQUIRE(m->set_ints(conv, "pads", pads) == Status::Ok);
        InputRef sin[] = {InputRef::by_id(p)};
        REQUIRE(m->add_node("Sigmoid", StringView(("sig" + n).c_str()), sin, 1, &sig) == Status::Ok);
        InputRef rin[] = {InputRef::by_id(sig)};
        REQUIRE(m->add_node("Relu", StringView(("relu" + n).c_str()), rin, 1, &relu) == Status::Ok);
        InputRef ain[] = {InputRef::by_id(conv), InputRef::by_id(relu)};
        REQUIRE(m->add_node("Add", StringView(("add" + n).c_str()), ain, 1, &add) == Status::Ok);
        p = add;
    }
    REQUIRE(m->add_output("y", InputRef::by_id(p)) == Status::Ok);
    REQUIRE(m->finalize() == Status::Ok);
}

}  // namespace

TEST_CASE("dyn plan: a long chain and HETERO lanes at a second and third shape give a fixed compile's bits") {
    Model m;
    build_lanes(&m, 40);   // more than 64 subgraphs on HETERO: the lanes' bit rows span words
    struct Run { const char* device; std::vector<ConfigEntry> config; };
    const Run runs[] = {
        {"HETERO:TEMPLATE,CPU", {{"TEMPLATE:SUPPORTED_OPS", "Conv"}}},
        {"HETERO:TEMPLATE,CPU", {{"TEMPLATE:SUPPORTED_OPS", "Conv"}, {"HETERO_CONCURRENT", "NO"}}},
    };
    const int64_t shapes[][4] = {{1, 4, 6, 10}, {2, 4, 9, 7}, {3, 4, 5, 12}};
    std::vector<std::vector<float>> sequential;   // HETERO without lanes at once: no windows
    for (int pass : {1, 0}) {   // the sequential HETERO first, so the concurrent one is held to it
        const Run& run = runs[pass];
        const std::string what = std::string(run.device) + (pass ? " HETERO_CONCURRENT NO" : "");
        INFO(what);
        Core core;
        CompiledModel compiled;
        Status s = core.compile_model(m, run.device, Span<const ConfigEntry>(run.config.data(), run.config.size()), &compiled);
        INFO(std::string(core.last_error()));
        REQUIRE(s == Status::Ok);
        REQUIRE(compiled.has_free_dims());
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        uint32_t seed = 7;
        for (const auto& shape : shapes) {
            Tensor x = test::random_tensor({shape[0], shape[1], shape[2], shape[3]}, seed++);
            REQUIRE(request.set_input(0, x) == Status::Ok);
            Status r = request.infer();
            INFO(std::string(request.last_error()));
            REQUIRE(r == Status::Ok);
            std::vector<float> got = test::values_of(request.output(0));
            CHECK(got == test::fixed_shape_outputs(m, run.device, x, run.config)[0]);
            if (pass == 1) sequential.push_back(got);
            else CHECK(got == sequential[(size_t)(&shape - shapes)]);
        }
    }
    // CPU alone: one subgraph, a chain of more than a time block of steps.
    Core core;
    CompiledModel compiled;
    REQUIRE(core.compile_model(m, "CPU", {}, &compiled) == Status::Ok);
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    uint32_t seed = 11;
    for (const auto& shape : shapes) {
        Tensor x = test::random_tensor({shape[0], shape[1], shape[2], shape[3]}, seed++);
        REQUIRE(request.set_input(0, x) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
        CHECK(test::values_of(request.output(0)) == test::fixed_shape_outputs(m, "CPU", x)[0]);
    }
    CHECK(compiled.cached_shape_plans() == 3);
}
