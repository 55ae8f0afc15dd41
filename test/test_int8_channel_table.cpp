// DequantizeLinear (uint8) -> float ops whose other input is a constant of one value or one per
// channel (DenseNet's BatchNormalization as Mul and Add, then Relu) -> QuantizeLinear (uint8)
// as one table step, a 256-byte table per channel: bit for bit the float path's results
// (FUSION=NO runs the reference kernels) at every ISA of the machine and at 1 and 2 threads,
// over runs of a channel shorter and longer than a vector, and the forms it leaves to the float
// path.
#include <doctest/doctest.h>
#include <string>
#include <vector>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;
using test::count_of;

struct Op {
    const char* type;
    Shape constant;            // empty: a one-input op
    bool constant_first = false;
    bool batchnorm = false;    // BatchNormalization with per-channel constants (constant unused)
    bool square = false;       // the two-input op reads the chain's value twice
};

struct ChannelCase {
    Shape x;
    std::vector<Op> ops;
    bool taken = true;
    float sx = 0.031f, sy = 0.027f;
    uint8_t zx = 117, zy = 9;
};

// Values around 1 of either sign, never 0 (a Div's divisor), differing between channels.
std::vector<float> constants(const Shape& shape, uint32_t salt) {
    std::vector<float> v((size_t)count_of(shape));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * (float)((int)((i * 7 + salt) % 13) - 6) + 0.125f;
    return v;
}

struct Result {
    std::vector<unsigned char> y;
    std::string kernels;
};

Result run_chain(const ChannelCase& c, const char* isa, uint32_t threads, bool fusion) {
    OpTest t;
    t.opset = 14;
    std::vector<uint8_t> x((size_t)count_of(c.x));
    for (size_t i = 0; i < x.size(); ++i) x[i] = (uint8_t)((i * 37 + i / 256) % 256);   // every value in every channel
    NodeId last = t.op("DequantizeLinear", {t.input(c.x, x), t.constant(Shape{}, std::vector<float>{c.sx}),
                                            t.constant(Shape{}, std::vector<uint8_t>{c.zx})});
    uint32_t salt = 0;
    for (const Op& op : c.ops) {
        if (op.batchnorm) {
            const Shape per_channel{c.x[1]};
            std::vector<float> var = constants(per_channel, ++salt);
            for (float& v : var) v = v * v + 0.5f;
            last = t.op("BatchNormalization", {InputRef::by_id(last), t.constant(per_channel, constants(per_channel, ++salt)),
                                               t.constant(per_channel, constants(per_channel, ++salt)),
                                               t.constant(per_channel, constants(per_channel, ++salt)), t.constant(per_channel, var)});
        } else if (op.square) {
            last = t.op(op.type, {InputRef::by_id(last), InputRef::by_id(last)});
        } else if (op.constant.empty()) {
            last = t.op(op.type, {InputRef::by_id(last)});
        } else {
            InputRef k = t.constant(op.constant, constants(op.constant, ++salt));
            last = op.constant_first ? t.op(op.type, {k, InputRef::by_id(last)}) : t.op(op.type, {InputRef::by_id(last), k});
        }
    }
    t.node = t.op("QuantizeLinear", {InputRef::by_id(last), t.constant(Shape{}, std::vector<float>{c.sy}),
                                     t.constant(Shape{}, std::vector<uint8_t>{c.zy})});
    test::CpuRun run = test::run_last_node_on_cpu(t, threads, fusion, isa);
    return {run.bytes, run.kernels};
}

void check(const ChannelCase& c) {
    const Result want = run_chain(c, "ref", 1, false);
    CHECK(want.kernels.find("int8:") == std::string::npos);
    REQUIRE(!want.y.empty());
    std::string ops;
    for (const Op& op : c.ops) ops += std::string(op.type) + " ";
    CAPTURE(ops);
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(isa_name(isa));
            CAPTURE(threads);
            const Result got = run_chain(c, isa_name(isa), threads, true);
            INFO(got.kernels);
            const std::string table = "int8:" + test::int8_lookup_target(isa) + ":Table";
            CHECK((got.kernels.find(table) != std::string::npos) == c.taken);
            if (c.taken) CHECK(got.kernels == table + " ");   // the one step
            REQUIRE(got.y.size() == want.y.size());
            size_t bad = 0;
            for (size_t i = 0; i < got.y.size(); ++i)
                if (got.y[i] != want.y[i] && bad++ < 5) MESSAGE("y[" << i << "] = " << (int)got.y[i] << ", want " << (int)want.y[i]);
            CHECK(bad == 0);
        }
    }
}

const Op kRelu{"Relu", {}};
}  // namespace

TEST_CASE("int8 channel table: DenseNet's Mul, Add (one value per channel), Relu; a BatchNormalization; runs short and long") {
    const Shape c24{24, 1, 1};
    check({{1, 24, 13, 17}, {{"Mul", c24}, {"Add", c24}, kRelu}});                  // runs of 221: vectors and a tail
    check({{2, 16, 7, 7}, {{"BatchNormalization", {}, false, true}, kRelu}});       // 2 images, runs of 49
    check({{1, 64, 40, 40}, {{"Mul", {64, 1, 1}}, {"Add", {1, 64, 1, 1}}, kRelu}});  // several units at 2 threads
    check({{2, 6, 33, 35}, {{"BatchNormalization", {}, false, true}, kRelu}});      // 2 images, runs of 1155
    check({{4, 5, 4, 4}, {{"Add", {5, 1, 1}}, {"Sigmoid", {}}}});                    // runs of 16, a transcendental after
}

TEST_CASE("int8 channel table: a constant first (Sub, Div), one value for the tensor, PRelu, rank 2 and 3") {
    check({{1, 12, 9, 11}, {{"Sub", {12, 1, 1}, true}, {"Div", {12, 1, 1}}, kRelu}});
    check({{1, 12, 9, 11}, {{"Div", {12, 1, 1}, true}, {"Neg", {}}}});
    check({{1, 6, 10, 10}, {{"Mul", {1}}, {"Add", {1, 1, 1, 1}, true}, kRelu}});   // one value: one table
    check({{1, 8, 9, 9}, {{"PRelu", {8, 1, 1}}}});
    check({{64, 40}, {{"Mul", {40}}, {"Add", {1, 40}}, kRelu}});   // [N, C]: runs of one
    check({{2, 10, 33}, {{"Mul", {10, 1}}, kRelu}});              // [N, C, L]
}

TEST_CASE("int8 channel table: constants along other axes or widening x, no constant, Pow, short channels stay on the float path") {
    check({{1, 4, 8, 9}, {{"Mul", {1, 1, 8, 1}}, kRelu}, false});   // one value per row
    check({{1, 4, 8, 9}, {{"Mul", {9}}, kRelu}, false});            // one value per column
    check({{1, 4, 1, 1}, {{"Add", {1, 4, 3, 3}}, kRelu}, false});   // y wider than x
    check({{1, 4, 8, 9}, {{"Mul", {}, false, false, true}, kRelu}, false});   // x * x: no constant
    check({{63, 40}, {{"Mul", {40}}, kRelu}, false});   // 63 bytes a channel: too few for a 256-byte table
    check({{1, 4, 8, 9}, {{"Pow", {4, 1, 1}}}, false});   // Pow's kernel (any exponent type) is not the elementwise one
}
