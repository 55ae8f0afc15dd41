// A fused island's output takes the buffer of an input of its own shape that dies at the island
// (runtime.h plan_memory, ProgramStep::in_place_reads; a snippet may run with an output over
// such an input). Each net runs on the CPU device at the suite's ISA, at 1 and 2 threads: its
// output equals, bit for bit, the same net's with that input kept (also a graph output, so
// never shared), and a request's activations are smaller by the shared tensor.
#include <doctest/doctest.h>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

struct Result {
    std::vector<float> y;
    size_t arena = 0;
    std::string kernels;
};

// `build` returns the island's last node and the value it may share; with `kept` that value is
// a graph output too (after y).
Result run(const std::function<NodeId(OpTest&, NodeId*)>& build, bool kept, uint32_t threads) {
    OpTest t;
    NodeId shared = kNoNode;
    NodeId y = build(t, &shared);
    REQUIRE(t.model.add_output("y", InputRef::by_id(y, 0)) == Status::Ok);
    if (kept) REQUIRE(t.model.add_output("kept", InputRef::by_id(shared, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    const std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}};
    test::CompiledRun r;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 2), &r);
    Result out;
    out.arena = r.compiled.arena_bytes();
    out.kernels = r.kernels;
    const Tensor& yt = r.request.output(0);
    out.y.assign(yt.data_as<float>(), yt.data_as<float>() + yt.elements());
    return out;
}

NodeId softmax(OpTest& t, const Shape& shape, uint32_t seed) {
    NodeId s = t.op("Softmax", {t.input(shape, test::random_floats(test::count_of(shape), seed, 2.0f))});
    t.set_int("axis", 1);
    return s;
}

InputRef scalar(OpTest& t, float v) { return t.constant(Shape{}, std::vector<float>{v}); }

// Relu(3 s - 0.1)
NodeId scale_shift_relu(OpTest& t, NodeId s) {
    NodeId mul = t.op("Mul", {InputRef::by_id(s, 0), scalar(t, 3.0f)});
    NodeId sub = t.op("Sub", {InputRef::by_id(mul, 0), scalar(t, 0.1f)});
    return t.op("Relu", {InputRef::by_id(sub, 0)});
}
}  // namespace

TEST_CASE("island in place: the output takes a dying input of its shape, the results unchanged") {
    struct Net {
        const char* what;
        std::function<NodeId(OpTest&, NodeId*)> build;
        size_t shared_bytes;
    };
    const Net nets[] = {
        {"a unary chain over a Softmax's output", [](OpTest& t, NodeId* shared) {
             *shared = softmax(t, {1, 8, 16, 16}, 1);
             return scale_shift_relu(t, *shared);
         }, 8 * 16 * 16 * 4},
        {"Add of a graph input and a dying value (the second read taken)", [](OpTest& t, NodeId* shared) {
             InputRef x = t.input(Shape{1, 8, 12, 12}, test::random_floats(8 * 144, 2));
             *shared = softmax(t, {1, 8, 12, 12}, 3);
             NodeId add = t.op("Add", {x, InputRef::by_id(*shared, 0)});
             return t.op("Relu", {InputRef::by_id(add, 0)});
         }, 8 * 144 * 4},
        {"a per-channel scale broadcast onto the dying value", [](OpTest& t, NodeId* shared) {
             *shared = softmax(t, {1, 16, 9, 7}, 4);
             NodeId mul = t.op("Mul", {InputRef::by_id(*shared, 0), t.constant(Shape{1, 16, 1, 1}, test::random_floats(16, 5))});
             return t.op("Sigmoid", {InputRef::by_id(mul, 0)});
         }, 16 * 63 * 4},
        {"1 MB: the island runs in parts at two threads", [](OpTest& t, NodeId* shared) {
             *shared = softmax(t, {1, 64, 64, 64}, 6);
             return scale_shift_relu(t, *shared);
         }, 64 * 64 * 64 * 4},
    };
    for (const Net& net : nets)
        for (uint32_t threads : {1u, 2u}) {
            const std::string what = net.what;
            CAPTURE(what);
            CAPTURE(threads);
            Result in_place = run(net.build, false, threads), kept = run(net.build, true, threads);
            INFO(in_place.kernels);
            CHECK(in_place.kernels.find("snippet:") != std::string::npos);
            REQUIRE(in_place.y.size() == kept.y.size());
            CHECK(std::memcmp(in_place.y.data(), kept.y.data(), in_place.y.size() * sizeof(float)) == 0);
            CHECK(in_place.arena + net.shared_bytes <= kept.arena + 64);   // buffers are 64-byte aligned
            CHECK(in_place.arena < kept.arena);
        }
}
