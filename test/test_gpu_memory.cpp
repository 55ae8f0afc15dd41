// The GPU device's memory: device buffers mirror the request's memory plan (one buffer over
// the arena, a sub-buffer per value at its plan offset, made at the first infer and kept),
// weights are buffers made at compile time, and values go between host and device by map and
// unmap where the device shares memory with the CPU, by read and write where it does not
// (the shim answers CL_DEVICE_HOST_UNIFIED_MEMORY either way). Outputs equal the CPU's.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "alloc_counter.h"
#include "gpu_shim.h"
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

// x[16x15] -> Gemm(W[15x7], b[7]) -> Relu -> (Cast to float: on the CPU) -> Neg -> Softmax -> y.
// 15 columns: 960-byte values, whose 64-byte offsets a device with a 128-byte base alignment
// could not view; Softmax runs in place of its input.
struct Net {
    Model model;
    std::vector<float> w, b;
    explicit Net(bool cpu_node) : w(15 * 7), b(7) {
        for (size_t i = 0; i < w.size(); ++i) w[i] = (float)((int)(i * 7 % 11) - 5) * 0.125f;
        for (size_t i = 0; i < b.size(); ++i) b[i] = (float)i * 0.25f - 0.5f;
        NodeId x, wn, bn, gemm, relu, flip, neg, soft;
        REQUIRE(model.add_input("x", test::make_desc(ElementType::Float32, {16, 15}), &x) == Status::Ok);
        REQUIRE(model.add_constant("w", test::make_desc(ElementType::Float32, {15, 7}), w.data(), &wn) == Status::Ok);
        REQUIRE(model.add_constant("b", test::make_desc(ElementType::Float32, {7}), b.data(), &bn) == Status::Ok);
        InputRef gemm_in[] = {InputRef::by_id(x), InputRef::by_id(wn), InputRef::by_id(bn)};
        REQUIRE(model.add_node("Gemm", "gemm", Span<const InputRef>(gemm_in, 3), 1, &gemm) == Status::Ok);
        InputRef in = InputRef::by_id(gemm);
        REQUIRE(model.add_node("Relu", "relu", Span<const InputRef>(&in, 1), 1, &relu) == Status::Ok);
        flip = relu;
        in = InputRef::by_id(relu);
        if (cpu_node) {   // a node the GPU leaves to the CPU
            REQUIRE(model.add_node("Cast", "flip", Span<const InputRef>(&in, 1), 1, &flip) == Status::Ok);
            REQUIRE(model.set_int(flip, "to", 1) == Status::Ok);
        }
        in = InputRef::by_id(flip);
        REQUIRE(model.add_node("Neg", "negate", Span<const InputRef>(&in, 1), 1, &neg) == Status::Ok);
        in = InputRef::by_id(neg);
        REQUIRE(model.add_node("Softmax", "soft", Span<const InputRef>(&in, 1), 1, &soft) == Status::Ok);
        REQUIRE(model.add_output("y", InputRef::by_id(soft)) == Status::Ok);
        REQUIRE(model.finalize() == Status::Ok);
    }
};

void fill(InferRequest* request, int seed) {
    float* x = request->input(0).data_as<float>();
    for (int i = 0; i < 16 * 15; ++i) x[i] = (float)((i * 5 + seed) % 13) * 0.25f - 1.5f;
}

std::vector<float> cpu_output(const Net& net, int seed) {
    Core core;
    CompiledModel compiled;
    REQUIRE(core.compile_model(net.model, "CPU", {}, &compiled) == Status::Ok);
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    fill(&request, seed);
    REQUIRE(request.infer() == Status::Ok);
    const float* y = request.output(0).data_as<float>();
    return std::vector<float>(y, y + request.output(0).bytes() / 4);
}

// With the driver behind the shim: y equals the CPU's within rounding.
void check_values(const test::Shim& s, const Net& net, const InferRequest& request, int seed) {
    if (!s.forwarding()) return;   // the fake device's kernels compute nothing
    std::vector<float> want = cpu_output(net, seed);
    const float* y = request.output(0).data_as<float>();
    REQUIRE(request.output(0).bytes() == want.size() * 4);
    for (size_t i = 0; i < want.size(); ++i) {
        INFO("element " << i);
        CHECK(std::fabs(y[i] - want[i]) <= 1e-5f + 1e-5f * std::fabs(want[i]));
    }
}

struct Counts {
    long buffers, subs, reads, writes, maps, live;
};
Counts counts(const test::Shim& s) {
    return {s.calls("clCreateBuffer"), s.calls("clCreateSubBuffer"), s.calls("clEnqueueReadBuffer"), s.calls("clEnqueueWriteBuffer"),
            s.calls("clEnqueueMapBuffer"), s.live()};
}

}  // namespace

TEST_CASE("gpu memory: one buffer per request over its arena, sub-buffers made once, later infers make no OpenCL objects") {
    const test::Shim& s = test::shim();
    const long live_before = s.live();
    for (int unified : {1, 0}) {
        for (const char* device : {"GPU", "HETERO:GPU,CPU"}) {
            CAPTURE(unified);
            CAPTURE(std::string(device));
            s.set_unified(unified);
            {
                test::ShimCore shim_core;
                if (!test::shim_gpu_ready(shim_core.core)) { s.set_unified(-1); return; }
                Net net(std::strncmp(device, "HETERO", 6) == 0);
                CompiledModel compiled;
                Counts before_compile = counts(s);
                Status status = shim_core.core->compile_model(net.model, device, {}, &compiled);
                INFO(shim_core.core->last_error());
                REQUIRE(status == Status::Ok);
                // HETERO: Gemm and Relu, then Neg and Softmax, on the GPU, the Cast between on the CPU.
                const long gpu_programs = std::strncmp(device, "HETERO", 6) == 0 ? 2 : 1;
                CHECK(compiled.placement()[0].device == StringView("GPU"));
                // The weights: a buffer each, made by the compile.
                CHECK(counts(s).buffers - before_compile.buffers == 2);
                InferRequest request;
                REQUIRE(compiled.create_request(&request) == Status::Ok);
                Counts first = counts(s);
                fill(&request, 1);
                uint64_t allocations = tessel_test::allocation_count();
                REQUIRE(request.infer() == Status::Ok);
                CHECK(tessel_test::allocation_count() == allocations);
                check_values(s, net, request, 1);
                Counts second = counts(s);
                CHECK(second.buffers - first.buffers == gpu_programs);   // one per program over the arena
                CHECK(second.subs - first.subs > 0);
                fill(&request, 2);
                REQUIRE(request.infer() == Status::Ok);
                check_values(s, net, request, 2);
                Counts third = counts(s);
                CHECK(third.buffers == second.buffers);
                CHECK(third.subs == second.subs);
                CHECK(third.live == second.live);
                // Shared memory: map and unmap, nothing copied; device memory: writes of the
                // host's values, reads of the outputs the host reads, no maps.
                if (unified) {
                    CHECK(third.reads == second.reads);
                    CHECK(third.writes == second.writes);
                    CHECK(third.maps > second.maps);
                } else {
                    CHECK(third.maps == second.maps);
                    CHECK(third.writes > second.writes);
                    CHECK(third.reads > second.reads);
                }
                // A second request has its own mirror; the first's keeps working.
                InferRequest other;
                REQUIRE(compiled.create_request(&other) == Status::Ok);
                fill(&other, 3);
                REQUIRE(other.infer() == Status::Ok);
                check_values(s, net, other, 3);
                CHECK(counts(s).buffers - third.buffers == gpu_programs);
                fill(&request, 4);
                REQUIRE(request.infer() == Status::Ok);
                check_values(s, net, request, 4);
            }
            s.set_unified(-1);
            CHECK(s.live() == live_before);
        }
    }
}

TEST_CASE("gpu memory: values inside one GPU subgraph stay on a device without shared memory") {
    // x -> Gemm -> Relu -> Neg -> Softmax on the GPU alone: the device reads x once and
    // writes y once per infer; Gemm's and the islands' results between them never come back.
    const test::Shim& s = test::shim();
    s.set_unified(0);
    {
        test::ShimCore shim_core;
        if (!test::shim_gpu_ready(shim_core.core)) { s.set_unified(-1); return; }
        Net net(false);
        CompiledModel compiled;
        REQUIRE(shim_core.core->compile_model(net.model, "GPU", {}, &compiled) == Status::Ok);
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        fill(&request, 5);
        REQUIRE(request.infer() == Status::Ok);
        Counts before = counts(s);
        fill(&request, 6);
        REQUIRE(request.infer() == Status::Ok);
        check_values(s, net, request, 6);
        Counts after = counts(s);
        CHECK(after.writes - before.writes == 1);
        CHECK(after.reads - before.reads == 1);
    }
    s.set_unified(-1);
}

TEST_CASE("gpu memory: an input the user binds is read from the user's memory") {
    const test::Shim& s = test::shim();
    test::ShimCore shim_core;
    if (!test::shim_gpu_ready(shim_core.core)) return;
    Net net(false);
    CompiledModel compiled;
    REQUIRE(shim_core.core->compile_model(net.model, "GPU", {}, &compiled) == Status::Ok);
    InferRequest request, arena_request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    REQUIRE(compiled.create_request(&arena_request) == Status::Ok);
    fill(&arena_request, 7);
    std::vector<float> x(arena_request.input(0).data_as<float>(), arena_request.input(0).data_as<float>() + 16 * 15);
    Tensor bound;
    int64_t dims[] = {16, 15};
    REQUIRE(bound.view(ElementType::Float32, Span<const int64_t>(dims, 2), x.data()) == Status::Ok);
    REQUIRE(request.set_input(0, bound) == Status::Ok);
    REQUIRE(request.infer() == Status::Ok);
    check_values(s, net, request, 7);
    REQUIRE(request.infer() == Status::Ok);
    check_values(s, net, request, 7);
}
