// Concat in place (runtime.h plan_concat_in_place): on the CPU device the inputs of a Concat
// with one run per input (batch 1, channel axis) are computed straight into their slices of its
// output and the Concat copies nothing. Each net runs on the CPU device at every ISA the
// machine has, at 1 and 2 threads, and on the TEMPLATE device (reference kernels, which the
// plan leaves alone): float outputs agree within the GEMM's rounding, integer ones exactly. The
// nets hold the cases the plan must refuse or get right: an input read again after the Concat,
// the output reused in place while an input is still read, a graph output feeding a Concat, the
// same input twice, DenseNet's nested Concats, batch 2, unaligned runs, integer types, a
// Concat along H, and HETERO with the convolutions on another device.
#include <doctest/doctest.h>
#include <cmath>
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

// Conv k x k (padded to keep the size), cin -> cout, then Relu.
InputRef conv_relu(OpTest& t, InputRef x, int64_t cin, int64_t cout, int64_t k, uint32_t seed) {
    t.op("Conv", {x, t.constant(Shape{cout, cin, k, k}, test::random_floats(cout * cin * k * k, seed, 0.5f)),
                  t.constant(Shape{cout}, test::random_floats(cout, seed + 1, 0.5f))});
    t.set_ints("pads", {k / 2, k / 2, k / 2, k / 2});
    return InputRef::by_id(t.op("Relu", {InputRef::by_id(t.node)}));
}

InputRef concat(OpTest& t, const std::vector<InputRef>& in, int64_t axis = 1) {
    t.op("Concat", in);
    t.set_int("axis", axis);
    return InputRef::by_id(t.node);
}

void output(OpTest& t, InputRef v) {
    REQUIRE(t.model.add_output(t.fresh("y").c_str(), v) == Status::Ok);
}

// SqueezeNet's fire module on x (1 x 8 x h x w): squeeze 1x1 to 4, expand 1x1 and 3x3 to 16 each.
struct Fire { InputRef squeeze, e1, e3; };
Fire fire(OpTest& t, InputRef x, uint32_t seed) {
    Fire f;
    f.squeeze = conv_relu(t, x, 8, 4, 1, seed);
    f.e1 = conv_relu(t, f.squeeze, 4, 16, 1, seed + 10);
    f.e3 = conv_relu(t, f.squeeze, 4, 16, 3, seed + 20);
    return f;
}

struct Outputs {
    std::vector<std::vector<unsigned char>> bytes;
    std::vector<ElementType> types;
    size_t arena = 0;
    std::string kernels;
};

Outputs run_on(OpTest& t, const char* device, std::vector<ConfigEntry> config) {
    config.push_back({"PERF_COUNT", "YES"});
    test::CompiledRun run;
    test::compile_and_infer(t, device, Span<const ConfigEntry>(config.data(), config.size()), &run);
    Outputs o;
    o.arena = run.compiled.arena_bytes();
    o.kernels = run.kernels;
    run.read_outputs(&o.bytes, &o.types);
    return o;
}

void check_close(const Outputs& got, const Outputs& want) {
    REQUIRE(got.bytes.size() == want.bytes.size());
    for (size_t i = 0; i < got.bytes.size(); ++i) {
        CAPTURE(i);
        REQUIRE(got.bytes[i].size() == want.bytes[i].size());
        if (got.types[i] != ElementType::Float32) {
            CHECK(got.bytes[i] == want.bytes[i]);
            continue;
        }
        const float* g = reinterpret_cast<const float*>(got.bytes[i].data());
        const float* w = reinterpret_cast<const float*>(want.bytes[i].data());
        int64_t bad = 0;
        for (size_t k = 0; k < got.bytes[i].size() / 4; ++k)
            if (!(std::fabs(g[k] - w[k]) <= 1e-4f * (1.0f + std::fabs(w[k]))) && bad++ < 3)
                MESSAGE("y" << i << "[" << k << "] = " << g[k] << ", want " << w[k]);
        CHECK(bad == 0);
    }
}

// The net on the CPU device at every ISA and 1 and 2 threads against TEMPLATE; returns the
// largest arena of the CPU plans.
size_t check_net(const std::function<void(OpTest&)>& build) {
    OpTest t;
    build(t);
    REQUIRE(t.model.finalize() == Status::Ok);
    const Outputs want = run_on(t, "TEMPLATE", {});
    size_t arena = 0;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        for (const char* threads : {"1", "2"}) {
            CAPTURE(isa_name(isa));
            CAPTURE(threads);
            const Outputs got = run_on(t, "CPU", {{"ISA", isa_name(isa)}, {"NUM_THREADS", threads}});
            check_close(got, want);
            if (arena < got.arena) arena = got.arena;
            // Unfused: elementwise ops are reference steps that run in place.
            check_close(run_on(t, "CPU", {{"ISA", isa_name(isa)}, {"NUM_THREADS", threads}, {"FUSION", "NO"}}), want);
        }
    }
    return arena;
}

constexpr size_t kFloat = 4;
}  // namespace

TEST_CASE("concat in place: a fire module's expands write into the Concat's output") {
    const size_t plane = 12 * 12 * kFloat;
    const size_t arena = check_net([](OpTest& t) {
        const InputRef x = t.input(Shape{1, 8, 12, 12}, test::random_floats(8 * 144, 1));
        const InputRef s = conv_relu(t, x, 8, 4, 1, 100);
        const InputRef e1 = InputRef::by_id(t.op("Conv", {s, t.constant(Shape{16, 4, 1, 1}, test::random_floats(64, 101))}));
        t.op("Conv", {s, t.constant(Shape{16, 4, 3, 3}, test::random_floats(576, 102))});
        t.set_ints("pads", {1, 1, 1, 1});
        output(t, concat(t, {e1, InputRef::by_id(t.node)}));
    });
    // Copied, x, both expands and the output (8 + 16 + 16 + 32 maps) would be live at the Concat.
    CHECK(arena < (8 + 16 + 16 + 32) * plane);
}

TEST_CASE("concat in place: inputs read again after the Concat, before and after a buffer is reused in place") {
    // The output reused in place (Softmax; its input dies there) before e1's last read (the
    // Add after it): e1 keeps its own buffer.
    check_net([](OpTest& t) {
        const Fire f = fire(t, t.input(Shape{1, 8, 12, 12}, test::random_floats(8 * 144, 2)), 200);
        const InputRef y = InputRef::by_id(t.op("Softmax", {concat(t, {f.e1, f.e3})}));
        t.op("ReduceMax", {y});
        t.set_ints("axes", {1});
        output(t, InputRef::by_id(t.op("Add", {f.e1, InputRef::by_id(t.node)})));
    });
    // e3 read for the last time before the output is reused in place.
    check_net([](OpTest& t) {
        const Fire f = fire(t, t.input(Shape{1, 8, 12, 12}, test::random_floats(8 * 144, 3)), 300);
        const InputRef y = concat(t, {f.e1, f.e3});
        const InputRef z = InputRef::by_id(t.op("Mul", {f.e3, f.e3}));
        output(t, InputRef::by_id(t.op("Softmax", {y})));
        output(t, z);
    });
    // An input reused in place after the Concat (unfused, Add's output takes e1's buffer, its
    // other operand computed from the Concat's output): e1 keeps its own buffer, or the Add
    // would overwrite the Concat's output (a graph output).
    check_net([](OpTest& t) {
        const Fire f = fire(t, t.input(Shape{1, 8, 12, 12}, test::random_floats(8 * 144, 4)), 400);
        const InputRef y = concat(t, {f.e1, f.e3});
        t.op("ReduceMax", {y});
        t.set_ints("axes", {1});
        t.op("Add", {f.e1, InputRef::by_id(t.node)});
        output(t, InputRef::by_id(t.op("Conv", {InputRef::by_id(t.node), t.constant(Shape{4, 16, 1, 1}, test::random_floats(64, 5))})));
        output(t, y);
    });
}

TEST_CASE("concat in place: a graph output, the same input twice, batch 2, unaligned runs") {
    check_net([](OpTest& t) {   // e1 is a graph output too
        const Fire f = fire(t, t.input(Shape{1, 8, 12, 12}, test::random_floats(8 * 144, 6)), 500);
        output(t, f.e1);
        output(t, concat(t, {f.e1, f.e3}));
    });
    check_net([](OpTest& t) {
        const Fire f = fire(t, t.input(Shape{1, 8, 12, 12}, test::random_floats(8 * 144, 7)), 600);
        output(t, concat(t, {f.e1, f.e3, f.e1}));
    });
    check_net([](OpTest& t) {   // batch 2: two runs per input, copied
        const Fire f = fire(t, t.input(Shape{2, 8, 12, 12}, test::random_floats(2 * 8 * 144, 8)), 700);
        output(t, concat(t, {f.e1, f.e3}));
    });
    check_net([](OpTest& t) {   // 3 channels of 5 x 5: 300 bytes, off the 64-byte grid
        const InputRef x = t.input(Shape{1, 8, 5, 5}, test::random_floats(8 * 25, 9));
        const InputRef a = conv_relu(t, x, 8, 3, 3, 800), b = conv_relu(t, x, 8, 5, 1, 810), c = conv_relu(t, x, 8, 16, 1, 820);
        output(t, concat(t, {a, b, c}));
    });
}

TEST_CASE("concat in place: DenseNet's nested Concats share one buffer") {
    const size_t plane = 12 * 12 * kFloat;
    const size_t arena = check_net([](OpTest& t) {
        const InputRef x = t.input(Shape{1, 8, 12, 12}, test::random_floats(8 * 144, 10));
        InputRef c = InputRef::by_id(t.op("Conv", {x, t.constant(Shape{16, 8, 1, 1}, test::random_floats(128, 900))}));
        int64_t channels = 16;
        for (uint32_t layer = 0; layer < 4; ++layer, channels += 8) {   // Relu on the block so far, a 3x3 conv to 8 more maps
            const InputRef pre = InputRef::by_id(t.op("Relu", {c}));
            t.op("Conv", {pre, t.constant(Shape{8, channels, 3, 3}, test::random_floats(8 * channels * 9, 910 + layer))});
            t.set_ints("pads", {1, 1, 1, 1});
            c = concat(t, {c, InputRef::by_id(t.node)});
        }
        output(t, InputRef::by_id(t.op("Conv", {c, t.constant(Shape{4, channels, 1, 1}, test::random_floats(4 * channels, 11))})));
    });
    // Copied, x, the third Concat's output, the last conv's and the last Concat's (8 + 40 + 8 +
    // 48 maps) would be live at the last Concat; nested, the last output holds all the others.
    CHECK(arena < (8 + 40 + 8 + 48) * plane);
}

TEST_CASE("concat in place: integer values, a Concat along H, HETERO") {
    check_net([](OpTest& t) {
        std::vector<int32_t> p(16 * 16), q(16 * 16);
        for (size_t i = 0; i < p.size(); ++i) { p[i] = (int32_t)(i * 7 % 23) - 11; q[i] = (int32_t)(i * 5 % 19) - 9; }
        const InputRef a = t.input(Shape{1, 16, 4, 4}, p), b = t.input(Shape{1, 16, 4, 4}, q);
        const InputRef sum = InputRef::by_id(t.op("Add", {a, b})), product = InputRef::by_id(t.op("Mul", {a, b}));
        output(t, concat(t, {sum, product, sum}));
    });
    check_net([](OpTest& t) {   // one map: rows of 16 floats, 8 of them per input
        const InputRef x = t.input(Shape{1, 1, 8, 16}, test::random_floats(128, 12));
        const InputRef a = InputRef::by_id(t.op("Sigmoid", {x})), b = InputRef::by_id(t.op("Neg", {x}));
        output(t, concat(t, {a, b, a}, 2));
    });
    OpTest t;
    const Fire f = fire(t, t.input(Shape{1, 8, 12, 12}, test::random_floats(8 * 144, 13)), 1000);
    output(t, concat(t, {f.e1, f.e3}));
    REQUIRE(t.model.finalize() == Status::Ok);
    const Outputs want = run_on(t, "TEMPLATE", {});
    for (const char* threads : {"1", "2"}) {
        CAPTURE(threads);
        check_close(run_on(t, "HETERO:TEMPLATE,CPU", {{"TEMPLATE:SUPPORTED_OPS", "Conv"}, {"CPU:NUM_THREADS", threads}}), want);
        check_close(run_on(t, "HETERO:CPU,TEMPLATE", {{"CPU:NUM_THREADS", threads}}), want);
    }
}
