// Quantized binary islands on the CPU device: DequantizeLinear (uint8) -> one-input ops -> Add,
// Sub or Mul (broadcast as ONNX allows, one operand possibly a float32 constant) ->
// QuantizeLinear (uint8) as one step on the uint8 tensors, bit for bit the float path's results
// (FUSION=NO runs the reference kernels), at 1 and 2 threads, on both of its loops (the pair
// table and the dequantized floats), and the forms it leaves to the float path; the float
// tables of DequantizeLinear -> one-input ops chains read as floats.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

using test::count_of;

using test::every_byte;

struct Operand {
    Shape shape;
    float scale = 0.02f;
    uint8_t zero_point = 0;
    std::vector<const char*> ops;   // one-input ops after the DequantizeLinear
    bool constant = false;          // a float32 constant instead
    bool shared = false;            // the DequantizeLinear read by another output too
};

Operand u8(const Shape& shape, float scale, uint8_t zero_point, std::vector<const char*> ops = {}, bool shared = false) {
    Operand o;
    o.shape = shape, o.scale = scale, o.zero_point = zero_point, o.ops = ops, o.shared = shared;
    return o;
}

Operand constant(const Shape& shape) {
    Operand o;
    o.shape = shape, o.constant = true;
    return o;
}

struct IslandCase {
    const char* op;
    Operand a, b;
    float sy = 0.05f;
    uint8_t zy = 128;
    bool taken = true;
};

struct Result {
    std::vector<unsigned char> y;
    std::string kernels;
};

Result run_island(const IslandCase& ic, bool fusion, uint32_t threads) {
    OpTest t;
    t.opset = 14;
    InputRef in[2];
    const Operand* operands[2] = {&ic.a, &ic.b};
    std::vector<NodeId> shared;
    for (int k = 0; k < 2; ++k) {
        const Operand& o = *operands[k];
        if (o.constant) {
            std::vector<float> c((size_t)count_of(o.shape));
            for (size_t i = 0; i < c.size(); ++i) c[i] = 0.37f * (float)((int)(i % 11) - 5);
            in[k] = t.constant(o.shape, c);
            continue;
        }
        NodeId dq = t.op("DequantizeLinear", {t.input(o.shape, every_byte(o.shape, k ? 53 : 37, k ? 11 : 0)),
                                              t.constant(Shape{}, std::vector<float>{o.scale}),
                                              t.constant(Shape{}, std::vector<uint8_t>{o.zero_point})});
        if (o.shared) shared.push_back(dq);
        NodeId last = dq;
        for (const char* op : o.ops) last = t.op(op, {InputRef::by_id(last)});
        in[k] = InputRef::by_id(last);
    }
    NodeId binary = t.op(ic.op, {in[0], in[1]});
    NodeId q = t.op("QuantizeLinear", {InputRef::by_id(binary), t.constant(Shape{}, std::vector<float>{ic.sy}),
                                       t.constant(Shape{}, std::vector<uint8_t>{ic.zy})});
    for (NodeId dq : shared) REQUIRE(t.model.add_output("dq", InputRef::by_id(dq, 0)) == Status::Ok);
    t.node = q;
    test::CpuRun run = test::run_last_node_on_cpu(t, threads, fusion);
    return {run.bytes, run.kernels};
}

void check_island(const IslandCase& ic) {
    Result reference = run_island(ic, false, 1);
    CHECK(reference.kernels.find("int8:") == std::string::npos);
    REQUIRE(!reference.y.empty());
    for (uint32_t threads : {1u, 2u}) {
        CAPTURE(threads);
        Result fast = run_island(ic, true, threads);
        INFO(fast.kernels);
        const std::string kernel = "int8:" + test::int8_convert_target() + ":" + ic.op;
        CHECK((fast.kernels.find(kernel) != std::string::npos) == ic.taken);
        if (ic.taken) {
            const bool dq_left = ic.a.shared || ic.b.shared;
            CHECK((fast.kernels.find("DequantizeLinear") != std::string::npos) == dq_left);
        }
        REQUIRE(fast.y.size() == reference.y.size());
        size_t bad = 0;
        for (size_t i = 0; i < fast.y.size(); ++i)
            if (fast.y[i] != reference.y[i] && bad++ < 5) MESSAGE("y[" << i << "] = " << (int)fast.y[i] << ", want " << (int)reference.y[i]);
        CHECK(bad == 0);
    }
}
}  // namespace

TEST_CASE("int8 islands: Add of two DequantizeLinears, same shape, small (dequantized floats) and large (pair table)") {
    IslandCase small{"Add", u8({1, 16, 9, 11}, 0.02f, 100), u8({1, 16, 9, 11}, 0.031f, 7), 0.04f, 128};
    check_island(small);
    IslandCase large{"Add", u8({1, 16, 60, 41}, 0.02f, 100), u8({1, 16, 60, 41}, 0.031f, 7), 0.04f, 128};   // 39360 elements: 3 units
    check_island(large);
    IslandCase one_grid{"Add", u8({2, 3, 50, 70}, 0.05f, 0), u8({2, 3, 50, 70}, 0.05f, 0), 0.05f, 0};          // ReLU-like grids, ties
    check_island(one_grid);
}

TEST_CASE("int8 islands: Mul with a broadcast operand through HardSigmoid (a squeeze-excite block), either side") {
    IslandCase se{"Mul", u8({1, 24, 13, 17}, 0.02f, 0), u8({1, 24, 1, 1}, 0.1f, 128, {"HardSigmoid"}), 0.03f, 0};
    check_island(se);
    IslandCase swapped{"Mul", u8({1, 24, 1, 1}, 0.1f, 128, {"HardSigmoid"}), u8({1, 24, 13, 17}, 0.02f, 0, {"HardSwish"}), 0.03f, 3};
    check_island(swapped);
    IslandCase long_rows{"Mul", u8({1, 2, 190, 190}, 0.02f, 9), u8({1, 2, 1, 1}, 0.1f, 128), 0.03f, 0};       // rows cut in pieces
    check_island(long_rows);
}

TEST_CASE("int8 islands: Sub and Add with broadcasts on both sides, ops on both, a constant operand") {
    IslandCase both{"Sub", u8({2, 1, 5, 7}, 0.02f, 30, {"Relu"}), u8({3, 1, 7}, 0.015f, 200, {"Sigmoid", "Tanh"}), 0.01f, 100};
    check_island(both);
    IslandCase scalar{"Add", u8({1, 4, 33, 35}, 0.02f, 30), u8({}, 0.5f, 1), 0.05f, 60};
    check_island(scalar);
    // a constant of one value per channel makes the chain a table per channel (test_int8_channel_table.cpp)
    IslandCase with_constant{"Mul", u8({1, 5, 9, 300}, 0.02f, 30, {"HardSwish"}), constant({9, 300}), 0.05f, 128};
    check_island(with_constant);
    IslandCase constant_first{"Sub", constant({1, 1, 300}), u8({1, 7, 300}, 0.02f, 30), 0.05f, 128};
    check_island(constant_first);
    IslandCase shared{"Add", u8({1, 16, 9, 11}, 0.02f, 100, {}, true), u8({1, 16, 9, 11}, 0.031f, 7), 0.04f, 128};
    check_island(shared);
}

TEST_CASE("int8 islands: Div and two constants stay on the float path; an int8 model input's DequantizeLinear is an operand") {
    IslandCase div{"Div", u8({1, 4, 6, 6}, 0.02f, 100), u8({1, 4, 6, 6}, 0.031f, 7), 0.04f, 128, false};
    check_island(div);
    // int8 x: a model input, reaching the island as uint8 through its recast (a byte table,
    // detail_prepare::signed_activation); the float path's bits
    OpTest t;
    t.opset = 14;
    const Shape shape = {1, 3, 8, 8};
    std::vector<int8_t> x((size_t)count_of(shape));
    for (size_t i = 0; i < x.size(); ++i) x[i] = (int8_t)(i * 37 % 256 - 128);
    const std::vector<uint8_t> other = every_byte(shape, 53, 1);
    NodeId a = t.op("DequantizeLinear", {t.input(shape, x), t.constant(Shape{}, std::vector<float>{0.02f}),
                                         t.constant(Shape{}, std::vector<int8_t>{3})});
    NodeId b = t.op("DequantizeLinear", {t.input(shape, other), t.constant(Shape{}, std::vector<float>{0.03f}),
                                         t.constant(Shape{}, std::vector<uint8_t>{9})});
    NodeId sum = t.op("Add", {InputRef::by_id(a), InputRef::by_id(b)});
    t.op("QuantizeLinear", {InputRef::by_id(sum), t.constant(Shape{}, std::vector<float>{0.05f}),
                            t.constant(Shape{}, std::vector<uint8_t>{128})});
    test::CpuRun run = test::run_last_node_on_cpu(t, 1, true);
    INFO(run.kernels);
    CHECK(run.kernels.find("int8:" + test::int8_convert_target() + ":Add") != std::string::npos);
    std::vector<unsigned char> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const float f = (float)((int)x[i] - 3) * 0.02f + (float)((int)other[i] - 9) * 0.03f;
        want[i] = (unsigned char)std::min(255.0f, std::max(0.0f, std::nearbyint(f / 0.05f) + 128.0f));
    }
    CHECK(run.bytes == want);
}

// ---- DequantizeLinear (uint8) -> one-input float ops whose float value other ops read: one float table ----
namespace {
struct FloatChainCase {
    Shape shape;
    std::vector<const char*> ops;
    bool pool_and_mul = false;   // the last value read by a GlobalAveragePool and a Mul (squeeze-and-excite)
    bool dq_shared = false;      // the DequantizeLinear read by another output too
    bool quantized = false;      // a QuantizeLinear reads the last value (the uint8 table's chain)
    bool taken = true;
    bool gate = false;           // the Mul's gate quantized (pool -> Q -> DQ -> HardSigmoid) and the Mul's output
                                 // quantized: a binary island whose operand is the chain, read by the pool too
};

Result run_chain(const FloatChainCase& c, bool fusion, uint32_t threads) {
    OpTest t;
    t.opset = 14;
    NodeId dq = t.op("DequantizeLinear", {t.input(c.shape, every_byte(c.shape, 37, 5)), t.constant(Shape{}, std::vector<float>{0.021f}),
                                          t.constant(Shape{}, std::vector<uint8_t>{131})});
    NodeId last = dq;
    for (const char* op : c.ops) last = t.op(op, {InputRef::by_id(last)});
    if (c.dq_shared) REQUIRE(t.model.add_output("dq", InputRef::by_id(dq, 0)) == Status::Ok);
    if (c.pool_and_mul) {
        NodeId pool = t.op("GlobalAveragePool", {InputRef::by_id(last)});
        NodeId gate = kNoNode;
        if (c.gate) {
            NodeId q = t.op("QuantizeLinear", {InputRef::by_id(pool), t.constant(Shape{}, std::vector<float>{0.01f}),
                                               t.constant(Shape{}, std::vector<uint8_t>{3})});
            NodeId dq2 = t.op("DequantizeLinear", {InputRef::by_id(q), t.constant(Shape{}, std::vector<float>{0.01f}),
                                                   t.constant(Shape{}, std::vector<uint8_t>{3})});
            gate = t.op("HardSigmoid", {InputRef::by_id(dq2)});
        } else {
            gate = t.op("Sigmoid", {InputRef::by_id(pool)});
        }
        last = t.op("Mul", {InputRef::by_id(last), InputRef::by_id(gate)});
    }
    if (c.quantized)
        last = t.op("QuantizeLinear", {InputRef::by_id(last), t.constant(Shape{}, std::vector<float>{0.05f}),
                                       t.constant(Shape{}, std::vector<uint8_t>{128})});
    t.node = last;
    test::CpuRun run = test::run_last_node_on_cpu(t, threads, fusion);
    return {run.bytes, run.kernels};
}
}  // namespace

TEST_CASE("int8 islands: DequantizeLinear -> HardSwish and other one-input ops read as floats become one float table, the float path's bits") {
    const FloatChainCase cases[] = {
        {{1, 8, 13, 17}, {"HardSwish"}, true},                     // a squeeze-and-excite block's input, vector tails
        {{1, 64, 40, 40}, {"HardSwish"}, true},                    // several 64K-element units
        {{2, 3, 5, 7}, {"Sigmoid", "HardSwish", "Relu"}},          // a chain of three, the model's output
        {{1, 4, 9, 9}, {"Neg", "Abs", "HardSwish"}, true},         // float32 Neg and Abs: prepare_typed's elementwise kernel
        {{1, 4, 9, 9}, {"HardSwish"}, true, true, false, false},   // the DequantizeLinear read by an output too
        {{1, 4, 9, 9}, {"HardSwish"}, false, false, true, false},  // a QuantizeLinear after: the uint8 table's
        {{1, 4, 9, 9}, {}, true, false, false, false},             // no op in between
        {{1, 16, 7, 24}, {"HardSwish"}, true, false, true, true, true},   // the chain read by the pool and a Mul island
    };
    for (const FloatChainCase& c : cases) {
        CAPTURE(c.shape[1]); CAPTURE(c.ops.size()); CAPTURE(c.dq_shared); CAPTURE(c.quantized);
        Result reference = run_chain(c, false, 1);
        CHECK(reference.kernels.find("int8:") == std::string::npos);
        REQUIRE(!reference.y.empty());
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(threads);
            Result fast = run_chain(c, true, threads);
            INFO(fast.kernels);
            const std::string table = "int8:" + test::int8_convert_target() + ":DequantizeLinear+Table";
            CHECK((fast.kernels.find(table) != std::string::npos) == c.taken);
            if (c.quantized)
                CHECK(fast.kernels.find(c.gate ? "int8:" + test::int8_convert_target() + ":Mul" : "int8:" + test::int8_lookup_target() + ":Table") !=
                      std::string::npos);
            if (c.gate) CHECK(fast.kernels.find("snippet") == std::string::npos);   // no float Mul left
            REQUIRE(fast.y.size() == reference.y.size());
            size_t bad = 0;
            for (size_t i = 0; i < fast.y.size(); ++i) bad += fast.y[i] != reference.y[i];
            CHECK(bad == 0);
        }
    }
}

// ---- DequantizeLinear -> MaxPool -> QuantizeLinear on uint8: the row tails ----
TEST_CASE("int8 islands: uint8 MaxPool rows whose widths leave vector tails (strides 1 and 2, the tensor's last row), the float path's bits") {
    struct Case { Shape x, kernel, strides, pads; float sx, sy; uint8_t zx, zy; };
    const std::vector<Case> cases = {
        {{1, 3, 111, 111}, {3, 3}, {2, 2}, {}, 0.02f, 0.03f, 10, 0},        // squeezenet's first pool: 55 outputs a row
        {{2, 2, 9, 37}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0.05f, 0.05f, 3, 3},  // one grid: no table
        {{1, 4, 7, 17}, {2, 3}, {1, 1}, {0, 1, 1, 0}, 0.02f, 0.011f, 128, 77},
        {{1, 1, 5, 50}, {2, 2}, {2, 2}, {}, 0.1f, 0.05f, 0, 0},
        {{1, 2, 6, 70}, {3, 5}, {2, 2}, {1, 2, 1, 2}, 0.02f, 0.02f, 5, 5},  // 5 taps a row: two pairs and one even
        {{1, 2, 4, 66}, {1, 1}, {2, 2}, {}, 0.02f, 0.03f, 0, 9},            // one tap
        {{1, 1, 3, 90}, {2, 4}, {1, 1}, {}, 0.02f, 0.03f, 0, 9},            // stride 1, vectors of 16
    };
    for (const Case& pc : cases) {
        CAPTURE(pc.x[3]);
        auto build = [&](bool fusion, uint32_t threads) {
            OpTest t;
            t.opset = 13;
            NodeId dq = t.op("DequantizeLinear", {t.input(pc.x, every_byte(pc.x, 91, 5)), t.constant(Shape{}, std::vector<float>{pc.sx}),
                                                  t.constant(Shape{}, std::vector<uint8_t>{pc.zx})});
            t.op("MaxPool", {InputRef::by_id(dq)});
            t.set_ints("kernel_shape", pc.kernel);
            t.set_ints("strides", pc.strides);
            if (!pc.pads.empty()) t.set_ints("pads", pc.pads);
            NodeId pool = t.node;
            t.op("QuantizeLinear", {InputRef::by_id(pool), t.constant(Shape{}, std::vector<float>{pc.sy}),
                                    t.constant(Shape{}, std::vector<uint8_t>{pc.zy})});
            test::CpuRun run = test::run_last_node_on_cpu(t, threads, fusion);
            return Result{run.bytes, run.kernels};
        };
        Result reference = build(false, 1);
        REQUIRE(!reference.y.empty());
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(threads);
            Result fast = build(true, threads);
            INFO(fast.kernels);
            CHECK(test::has_int8_step(fast.kernels, "MaxPool", pc.sx != pc.sy || pc.zx != pc.zy));
            CHECK(fast.y == reference.y);
        }
    }
}
