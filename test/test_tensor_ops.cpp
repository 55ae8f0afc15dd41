// runtime.h tensor ops (shape, data movement, Cast, integer and logical ops): each kernel is
// driven directly through the op kernel contract (prepare, then run on dense tensors) on a
// one-node Model, and checked against exact expected values and the exact Status of bad input.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>
#include "runtime.h"
#include "test_helpers.h"
#include "op_test.h"

using namespace tessel;

namespace {

using test::OpTest;
using test::MalformedPicker;
using test::Shape;
using test::type_of;

using test::make_desc;

uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

float float_of(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

std::vector<float> iota_float(int n) {
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = (float)i;
    return v;
}
std::vector<int64_t> iota_int64(int n) {
    std::vector<int64_t> v(n);
    for (int i = 0; i < n; ++i) v[i] = i;
    return v;
}

using I64 = std::vector<int64_t>;
using I32 = std::vector<int32_t>;
using F32 = std::vector<float>;
using U8 = std::vector<uint8_t>;

}  // namespace

TEST_CASE("tensor ops: the table replaces the float-only entries and keeps the rest") {
    const char* ours[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice",
                          "Gather", "Pad", "Cast", "Shape", "Constant", "ConstantOfShape", "Expand", "Tile", "Range",
                          "Where", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or",
                          "Xor", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Max", "Min", "Sum", "Mean",
                          "DepthToSpace", "SpaceToDepth", "Identity", "Relu", "Pow"};
    for (const char* op : ours) {
        INFO(std::string(op));
        CHECK(find_builtin_kernel(op) != nullptr);
    }
    uint32_t adds = 0;
    for (const OpKernel& k : builtin_op_kernels()) adds += StringView(k.op) == StringView("Add");
    CHECK(adds == 1);
    CHECK((find_builtin_kernel("Add")->prepare != find_builtin_kernel("Relu")->prepare));
}

TEST_CASE("Reshape: 0 copies a dimension, -1 is inferred, allowzero keeps 0, in place") {
    {
        OpTest t;
        t.op("Reshape", {t.input<float>({2, 3, 4}, iota_float(24)), t.constant<int64_t>({2}, {0, -1})});
        t.go();
        CHECK(t.shape() == Shape{2, 12});
        CHECK(t.out<float>() == iota_float(24));
        CHECK(t.prepared.in_place);
    }
    {
        OpTest t;
        t.op("Reshape", {t.input<int64_t>({2, 3}, iota_int64(6)), t.constant<int64_t>({3}, {-1, 1, 2})});
        t.go();
        CHECK(t.shape() == Shape{3, 1, 2});
        CHECK(t.out<int64_t>() == iota_int64(6));
    }
    {
        OpTest t;   // allowzero: a 0 in the shape is a 0 dimension
        t.op("Reshape", {t.input<float>({0, 3}, {}), t.constant<int64_t>({3}, {3, 0, 5})});
        t.set_int("allowzero", 1);
        t.go();
        CHECK(t.shape() == Shape{3, 0, 5});
    }
}

TEST_CASE("Reshape: bad shapes") {
    struct Case { I64 shape; Status status; };
    const Case cases[] = {
        {{-1, -1}, Status::InvalidArgument},          // two -1
        {{5, -1}, Status::InvalidArgument},           // 24 % 5
        {{4, 7}, Status::InvalidArgument},            // 28 elements
        {{2, 3, 4, 0}, Status::InvalidArgument},      // 0 copies a dimension the input does not have
        {{-2, 12}, Status::InvalidArgument},
        {{1, 1, 1, 1, 1, 1, 2, 3, 4}, Status::LimitExceeded},   // rank 9
        {{INT64_MAX, INT64_MAX, -1}, Status::InvalidArgument},  // overflow is not a match
    };
    for (const Case& k : cases) {
        OpTest t;
        t.op("Reshape", {t.input<float>({2, 3, 4}, iota_float(24)), t.constant<int64_t>({(int64_t)k.shape.size()}, k.shape)});
        CHECK(t.prepare() == k.status);
    }
    OpTest t;   // the shape is computed at run time
    t.op("Reshape", {t.input<float>({2, 3, 4}, iota_float(24)), t.input<int64_t>({2}, {6, 4})});
    CHECK(t.prepare() == Status::Unsupported);
    CHECK(t.error().find("data-dependent shape: input 1") != std::string::npos);
}

TEST_CASE("Flatten, Squeeze, Unsqueeze") {
    {
        OpTest t;
        t.op("Flatten", {t.input<float>({2, 3, 4}, iota_float(24))});
        t.set_int("axis", -1);
        t.go();
        CHECK(t.shape() == Shape{6, 4});
        CHECK(t.out<float>() == iota_float(24));
    }
    {
        OpTest t;
        t.op("Flatten", {t.input<uint8_t>({2, 3}, {1, 2, 3, 4, 5, 6}, ElementType::Bool)});
        t.set_int("axis", 0);
        t.go();
        CHECK(t.shape() == Shape{1, 6});
        CHECK(t.type() == ElementType::Bool);
    }
    {
        OpTest t;
        t.op("Flatten", {t.input<float>({2, 3, 4}, iota_float(24))});
        t.set_int("axis", 3);
        t.go();
        CHECK(t.shape() == Shape{24, 1});
    }
    {
        OpTest t;
        t.op("Flatten", {t.input<float>({2, 3, 4}, iota_float(24))});
        t.set_int("axis", 4);
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;   // opset 13: axes input, negative axis
        t.op("Squeeze", {t.input<float>({2, 1, 3, 1}, iota_float(6)), t.constant<int64_t>({1}, {-1})});
        t.go();
        CHECK(t.shape() == Shape{2, 1, 3});
        CHECK(t.out<float>() == iota_float(6));
        CHECK(t.prepared.in_place);
    }
    {
        OpTest t;   // no axes: every 1
        t.op("Squeeze", {t.input<float>({1, 2, 1, 3, 1}, iota_float(6))});
        t.go();
        CHECK(t.shape() == Shape{2, 3});
    }
    {
        OpTest t;   // opset 11: axes attribute
        t.opset = 11;
        t.op("Squeeze", {t.input<int32_t>({1, 2, 1}, {7, 8})});
        t.set_ints("axes", {0});
        t.go();
        CHECK(t.shape() == Shape{2, 1});
        CHECK(t.out<int32_t>() == I32{7, 8});
    }
    {
        OpTest t;
        t.op("Squeeze", {t.input<float>({2, 1, 3}, iota_float(6)), t.constant<int64_t>({1}, {0})});
        CHECK(t.prepare() == Status::InvalidArgument);   // dimension 0 is 2
    }
    {
        OpTest t;
        t.op("Squeeze", {t.input<float>({2, 1, 3}, iota_float(6)), t.constant<int64_t>({1}, {3})});
        CHECK(t.prepare() == Status::InvalidArgument);   // out of range
    }
    {
        OpTest t;
        t.op("Squeeze", {t.input<float>({2, 1, 3}, iota_float(6)), t.input<int64_t>({1}, {1})});
        CHECK(t.prepare() == Status::Unsupported);
        CHECK(t.error().find("data-dependent shape: input 1") != std::string::npos);
    }
    {
        OpTest t;
        t.op("Unsqueeze", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({2}, {0, -1})});
        t.go();
        CHECK(t.shape() == Shape{1, 2, 3, 1});
        CHECK(t.out<float>() == iota_float(6));
    }
    {
        OpTest t;
        t.opset = 12;
        t.op("Unsqueeze", {t.input<int64_t>({3}, {1, 2, 3})});
        t.set_ints("axes", {1});
        t.go();
        CHECK(t.shape() == Shape{3, 1});
        CHECK(t.out<int64_t>() == I64{1, 2, 3});
    }
    {
        OpTest t;   // repeated axis
        t.op("Unsqueeze", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({2}, {1, -3})});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Unsqueeze", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({1}, {3})});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Unsqueeze", {t.input<float>({2, 3, 1, 1, 1, 1, 1}, iota_float(6)), t.constant<int64_t>({2}, {0, 1})});
        CHECK(t.prepare() == Status::LimitExceeded);   // rank 9
    }
}

TEST_CASE("Transpose: default reverse, permutations, bad perm") {
    {
        OpTest t;
        t.op("Transpose", {t.input<int64_t>({2, 3}, iota_int64(6))});
        t.go();
        CHECK(t.shape() == Shape{3, 2});
        CHECK(t.out<int64_t>() == I64{0, 3, 1, 4, 2, 5});
    }
    {
        OpTest t;
        t.op("Transpose", {t.input<float>({2, 3, 4}, iota_float(24))});
        t.set_ints("perm", {1, 2, 0});
        t.go();
        CHECK(t.shape() == Shape{3, 4, 2});
        std::vector<float> y = t.out<float>(), expected;
        for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 4; ++j)
                for (int k = 0; k < 2; ++k) expected.push_back((float)(k * 12 + i * 4 + j));
        CHECK(y == expected);
    }
    {
        OpTest t;   // float16 and a rank-1 identity
        t.op("Transpose", {t.input<uint16_t>({3}, {0x3c00, 0x4000, 0x4200})});
        t.go();
        CHECK(t.out<uint16_t>() == std::vector<uint16_t>{0x3c00, 0x4000, 0x4200});
    }
    const I64 bad[] = {{0, 0, 1}, {0, 1}, {0, 1, 3}, {-1, 0, 1}, {0, 1, 2, 3}};
    for (const I64& perm : bad) {
        OpTest t;
        t.op("Transpose", {t.input<float>({2, 3, 4}, iota_float(24))});
        t.set_ints("perm", perm);
        CHECK(t.prepare() == Status::InvalidArgument);
    }
}

TEST_CASE("Concat and Split") {
    {
        OpTest t;
        t.op("Concat", {t.input<int32_t>({2, 2}, {1, 2, 3, 4}), t.constant<int32_t>({2, 1}, {5, 6}),
                        t.input<int32_t>({2, 0}, {})});
        t.set_int("axis", -1);
        t.go();
        CHECK(t.shape() == Shape{2, 3});
        CHECK(t.out<int32_t>() == I32{1, 2, 5, 3, 4, 6});
    }
    {
        OpTest t;
        t.op("Concat", {t.input<uint8_t>({1, 2}, {1, 0}, ElementType::Bool), t.input<uint8_t>({2, 2}, {0, 1, 1, 1}, ElementType::Bool)});
        t.set_int("axis", 0);
        t.go();
        CHECK(t.shape() == Shape{3, 2});
        CHECK(t.out<uint8_t>() == U8{1, 0, 0, 1, 1, 1});
    }
    {
        OpTest t;   // shapes differ off the axis
        t.op("Concat", {t.input<float>({2, 2}, iota_float(4)), t.input<float>({3, 1}, iota_float(3))});
        t.set_int("axis", 1);
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;   // types differ
        t.op("Concat", {t.input<float>({2}, iota_float(2)), t.input<int64_t>({2}, {1, 2})});
        t.set_int("axis", 0);
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Concat", {t.input<float>({2}, iota_float(2)), t.input<float>({2}, iota_float(2))});
        t.set_int("axis", 1);
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;   // axis is required
        t.op("Concat", {t.input<float>({2}, iota_float(2))});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;   // opset 13: sizes input
        t.op("Split", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({2}, {1, 2})}, 2);
        t.set_int("axis", -1);
        t.go();
        CHECK(t.shape(0) == Shape{2, 1});
        CHECK(t.shape(1) == Shape{2, 2});
        CHECK(t.out<float>(0) == F32{0, 3});
        CHECK(t.out<float>(1) == F32{1, 2, 4, 5});
    }
    {
        OpTest t;   // opset 11: split attribute
        t.opset = 11;
        t.op("Split", {t.input<int64_t>({5}, iota_int64(5))}, 2);
        t.set_ints("split", {4, 1});
        t.go();
        CHECK(t.out<int64_t>(0) == I64{0, 1, 2, 3});
        CHECK(t.out<int64_t>(1) == I64{4});
    }
    {
        OpTest t;   // equal parts
        t.op("Split", {t.input<int64_t>({6}, iota_int64(6))}, 3);
        t.go();
        CHECK(t.out<int64_t>(2) == I64{4, 5});
    }
    {
        OpTest t;   // num_outputs: the last chunk is smaller
        t.op("Split", {t.input<int64_t>({5}, iota_int64(5))}, 3);
        t.set_int("num_outputs", 3);
        t.go();
        CHECK(t.out<int64_t>(0) == I64{0, 1});
        CHECK(t.out<int64_t>(1) == I64{2, 3});
        CHECK(t.out<int64_t>(2) == I64{4});
    }
    {
        OpTest t;
        t.op("Split", {t.input<int64_t>({5}, iota_int64(5))}, 2);
        CHECK(t.prepare() == Status::InvalidArgument);   // 5 does not split evenly
    }
    {
        OpTest t;
        t.op("Split", {t.input<int64_t>({5}, iota_int64(5)), t.constant<int64_t>({2}, {2, 2})}, 2);
        CHECK(t.prepare() == Status::InvalidArgument);   // sizes add up to 4
    }
    {
        OpTest t;
        t.op("Split", {t.input<int64_t>({5}, iota_int64(5)), t.constant<int64_t>({2}, {6, -1})}, 2);
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Split", {t.input<int64_t>({5}, iota_int64(5)), t.input<int64_t>({2}, {2, 3})}, 2);
        CHECK(t.prepare() == Status::Unsupported);
    }
    {
        OpTest t;
        t.op("Split", {t.input<int64_t>({4}, iota_int64(4))}, 2);
        t.set_int("axis", 1);
        CHECK(t.prepare() == Status::InvalidArgument);
    }
}

TEST_CASE("Slice: clamping, negative steps, attributes before opset 10") {
    {
        OpTest t;   // reverse everything: start -1, end INT64_MIN, step -1
        t.op("Slice", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({1}, {-1}),
                       t.constant<int64_t>({1}, {INT64_MIN}), t.constant<int64_t>({1}, {-1}), t.constant<int64_t>({1}, {-1})});
        t.go();
        CHECK(t.shape() == Shape{2, 3});
        CHECK(t.out<float>() == F32{2, 1, 0, 5, 4, 3});
    }
    {
        OpTest t;   // end past the dimension clamps; no axes: 0, 1, ...
        t.op("Slice", {t.input<int64_t>({3, 4}, iota_int64(12)), t.constant<int64_t>({2}, {1, 1}),
                       t.constant<int64_t>({2}, {1000, INT64_MAX})});
        t.go();
        CHECK(t.shape() == Shape{2, 3});
        CHECK(t.out<int64_t>() == I64{5, 6, 7, 9, 10, 11});
    }
    {
        OpTest t;   // step 2 and -2 with int32 starts, axes given out of order
        t.op("Slice", {t.input<int64_t>({3, 5}, iota_int64(15)), t.constant<int32_t>({2}, {4, 0}),
                       t.constant<int32_t>({2}, {-100, 3}), t.constant<int32_t>({2}, {1, 0}), t.constant<int32_t>({2}, {-2, 2})});
        t.go();
        CHECK(t.shape() == Shape{2, 3});
        CHECK(t.out<int64_t>() == I64{4, 2, 0, 14, 12, 10});
    }
    {
        OpTest t;   // empty result: start after end
        t.op("Slice", {t.input<float>({4}, iota_float(4)), t.constant<int64_t>({1}, {3}), t.constant<int64_t>({1}, {1})});
        t.go();
        CHECK(t.shape() == Shape{0});
    }
    {
        OpTest t;   // opset 9: attributes
        t.opset = 9;
        t.op("Slice", {t.input<float>({2, 3}, iota_float(6))});
        t.set_ints("starts", {-2});
        t.set_ints("ends", {3});
        t.set_ints("axes", {1});
        t.go();
        CHECK(t.shape() == Shape{2, 2});
        CHECK(t.out<float>() == F32{1, 2, 4, 5});
    }
    {
        OpTest t;
        t.op("Slice", {t.input<float>({4}, iota_float(4)), t.constant<int64_t>({1}, {0}), t.constant<int64_t>({1}, {4}),
                       t.constant<int64_t>({1}, {0}), t.constant<int64_t>({1}, {0})});
        CHECK(t.prepare() == Status::InvalidArgument);   // step 0
    }
    {
        OpTest t;
        t.op("Slice", {t.input<float>({4}, iota_float(4)), t.constant<int64_t>({1}, {0}), t.constant<int64_t>({1}, {4}),
                       t.constant<int64_t>({1}, {1})});
        CHECK(t.prepare() == Status::InvalidArgument);   // axis 1 of rank 1
    }
    {
        OpTest t;
        t.op("Slice", {t.input<float>({4}, iota_float(4)), t.constant<int64_t>({1}, {0}), t.constant<int64_t>({2}, {4, 4})});
        CHECK(t.prepare() == Status::InvalidArgument);   // lengths differ
    }
    {
        OpTest t;
        t.op("Slice", {t.input<float>({4}, iota_float(4)), t.input<int64_t>({1}, {0}), t.constant<int64_t>({1}, {4})});
        CHECK(t.prepare() == Status::Unsupported);
        CHECK(t.error().find("data-dependent shape: input 1") != std::string::npos);
    }
}

TEST_CASE("Gather: axes, negative indices, bad indices at compile and run time") {
    {
        OpTest t;
        t.op("Gather", {t.input<float>({3, 2}, iota_float(6)), t.input<int64_t>({3}, {-1, 0, 2})});
        t.go();
        CHECK(t.shape() == Shape{3, 2});
        CHECK(t.out<float>() == F32{4, 5, 0, 1, 4, 5});
    }
    {
        OpTest t;   // axis -1, int32 indices of rank 2
        t.op("Gather", {t.input<int64_t>({2, 3}, iota_int64(6)), t.input<int32_t>({2, 2}, {2, -3, 1, 1})});
        t.set_int("axis", -1);
        t.go();
        CHECK(t.shape() == Shape{2, 2, 2});
        CHECK(t.out<int64_t>() == I64{2, 0, 1, 1, 5, 3, 4, 4});
    }
    {
        OpTest t;   // scalar index drops the axis
        t.op("Gather", {t.input<uint8_t>({3, 2}, {1, 2, 3, 4, 5, 6}), t.constant<int64_t>({}, {1})});
        t.go();
        CHECK(t.shape() == Shape{2});
        CHECK(t.out<uint8_t>() == U8{3, 4});
    }
    {
        OpTest t;   // out of range at run time: InvalidArgument, no crash
        t.op("Gather", {t.input<float>({3, 2}, iota_float(6)), t.input<int64_t>({2}, {0, 3})});
        REQUIRE(t.prepare() == Status::Ok);
        CHECK(t.run() == Status::InvalidArgument);
        CHECK(std::string(t.run_error).find("index 3 out of range") != std::string::npos);
    }
    {
        OpTest t;
        t.op("Gather", {t.input<float>({3, 2}, iota_float(6)), t.input<int64_t>({1}, {-4})});
        REQUIRE(t.prepare() == Status::Ok);
        CHECK(t.run() == Status::InvalidArgument);
    }
    {
        OpTest t;   // known at compile time: refused by prepare
        t.op("Gather", {t.input<float>({3, 2}, iota_float(6)), t.constant<int64_t>({1}, {INT64_MIN})});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Gather", {t.input<float>({3, 2}, iota_float(6)), t.input<int64_t>({1}, {0})});
        t.set_int("axis", 2);
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Gather", {t.input<float>({3, 2}, iota_float(6)), t.input<float>({1}, {0})});
        CHECK(t.prepare() == Status::Unsupported);   // float indices
    }
}

TEST_CASE("Pad: constant, reflect, edge, negative pads, attributes before opset 11") {
    {
        OpTest t;
        t.op("Pad", {t.input<float>({2, 2}, {1, 2, 3, 4}), t.constant<int64_t>({4}, {1, 0, 0, 1}),
                     t.input<float>({}, {9.5f})});
        t.go();
        CHECK(t.shape() == Shape{3, 3});
        CHECK(t.out<float>() == F32{9.5f, 9.5f, 9.5f, 1, 2, 9.5f, 3, 4, 9.5f});
    }
    {
        OpTest t;   // no constant_value: zero
        t.op("Pad", {t.input<int64_t>({2}, {7, 8}), t.constant<int64_t>({2}, {1, 2})});
        t.go();
        CHECK(t.out<int64_t>() == I64{0, 7, 8, 0, 0});
    }
    {
        OpTest t;
        t.op("Pad", {t.input<float>({2, 3}, {1, 2, 3, 4, 5, 6}), t.constant<int64_t>({4}, {1, 2, 1, 2})});
        t.set_string("mode", "reflect");
        t.go();
        CHECK(t.shape() == Shape{4, 7});
        CHECK(t.out<float>() == F32{6, 5, 4, 5, 6, 5, 4,
                                    3, 2, 1, 2, 3, 2, 1,
                                    6, 5, 4, 5, 6, 5, 4,
                                    3, 2, 1, 2, 3, 2, 1});
    }
    {
        OpTest t;
        t.op("Pad", {t.input<int32_t>({2, 2}, {1, 2, 3, 4}), t.constant<int64_t>({4}, {0, 2, 1, 1})});
        t.set_string("mode", "edge");
        t.go();
        CHECK(t.shape() == Shape{3, 5});
        CHECK(t.out<int32_t>() == I32{1, 1, 1, 2, 2, 3, 3, 3, 4, 4, 3, 3, 3, 4, 4});
    }
    {
        OpTest t;   // negative pads crop
        t.op("Pad", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({4}, {0, -1, -1, 1})});
        t.go();
        CHECK(t.shape() == Shape{1, 3});
        CHECK(t.out<float>() == F32{1, 2, 0});
    }
    {
        OpTest t;   // opset 7: pads and value attributes
        t.opset = 7;
        t.op("Pad", {t.input<float>({2}, {1, 2})});
        t.set_ints("pads", {2, 1});
        t.set_float("value", -1.5f);
        t.go();
        CHECK(t.out<float>() == F32{-1.5f, -1.5f, 1, 2, -1.5f});
    }
    {
        OpTest t;   // reflect needs pads below the dimension
        t.op("Pad", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({4}, {0, 3, 0, 0})});
        t.set_string("mode", "reflect");
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Pad", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({3}, {0, 3, 0})});
        CHECK(t.prepare() == Status::InvalidArgument);   // 3 pads for rank 2
    }
    {
        OpTest t;
        t.op("Pad", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({4}, {-2, 0, -1, 0})});
        CHECK(t.prepare() == Status::InvalidArgument);   // removes 3 of 2
    }
    {
        OpTest t;
        t.op("Pad", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({4}, {0, 0, INT64_MAX, 0})});
        CHECK(t.prepare() == Status::LimitExceeded);
    }
    {
        OpTest t;
        t.op("Pad", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({4}, {0, 0, 0, 0})});
        t.set_string("mode", "mirror");
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Pad", {t.input<float>({2, 3}, iota_float(6)), t.input<int64_t>({4}, {0, 0, 0, 0})});
        CHECK(t.prepare() == Status::Unsupported);
    }
}

TEST_CASE("Cast: float16 rounds to nearest even, float to int truncates, ints wrap") {
    {
        OpTest t;
        const F32 x = {1.0f, 65504.0f, 65519.99f, 65520.0f, -70000.0f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
                       0x1p-24f, 0x1p-25f, 1.5f * 0x1p-25f, 0x1p-14f, 0x1.ffcp-15f, -0.0f, INFINITY, NAN, 0.1f,
                       1.0f + 0x1p-11f + 0x1p-20f};
        t.op("Cast", {t.input<float>({(int64_t)x.size()}, x)});
        t.set_int("to", 10);
        t.go();
        CHECK(t.type() == ElementType::Float16);
        const std::vector<uint16_t> expected = {0x3c00, 0x7bff, 0x7bff, 0x7c00, 0xfc00, 0x3c00, 0x3c02, 0x0001, 0x0000,
                                                0x0001, 0x0400, 0x0400, 0x8000, 0x7c00, 0x7e00, 0x2e66, 0x3c01};
        std::vector<uint16_t> y = t.out<uint16_t>();
        REQUIRE(y.size() == expected.size());
        for (size_t i = 0; i < y.size(); ++i) {
            INFO("element " << i << " = " << x[i]);
            CHECK(y[i] == expected[i]);
        }
    }
    {
        OpTest t;   // float16 to float32 is exact
        t.op("Cast", {t.input<uint16_t>({7}, {0x0001, 0x03ff, 0x0400, 0x7bff, 0xfc00, 0x8000, 0x3555})});
        t.set_int("to", 1);
        t.go();
        std::vector<float> y = t.out<float>();
        REQUIRE(y.size() == 7);
        CHECK(y[0] == 0x1p-24f);
        CHECK(y[1] == 1023 * 0x1p-24f);
        CHECK(y[2] == 0x1p-14f);
        CHECK(y[3] == 65504.0f);
        CHECK(y[4] == -INFINITY);
        CHECK(bits_of(y[5]) == 0x80000000u);
        CHECK(y[6] == 0x1.554p-2f);
    }
    {
        OpTest t;   // every half round-trips through float
        std::vector<uint16_t> all;
        for (uint32_t h = 0; h < 0x10000; ++h)
            if ((h & 0x7c00) != 0x7c00 || (h & 0x3ff) == 0) all.push_back((uint16_t)h);   // not NaN
        t.op("Cast", {t.input<uint16_t>({(int64_t)all.size()}, all)});
        t.set_int("to", 1);
        t.go();
        OpTest back;
        back.op("Cast", {back.input<float>({(int64_t)all.size()}, t.out<float>())});
        back.set_int("to", 10);
        back.go();
        CHECK(back.out<uint16_t>() == all);
    }
    {
        OpTest t;
        t.op("Cast", {t.input<float>({7}, {2.7f, -2.7f, NAN, 1e10f, -1e10f, 2147483520.0f, -0.5f})});
        t.set_int("to", 6);
        t.go();
        CHECK(t.out<int32_t>() == I32{2, -2, 0, INT32_MAX, INT32_MIN, 2147483520, 0});
    }
    {
        OpTest t;
        t.op("Cast", {t.input<float>({5}, {-3.5f, 255.9f, 300.0f, 7.99f, INFINITY})});
        t.set_int("to", 2);
        t.go();
        CHECK(t.out<uint8_t>() == U8{0, 255, 255, 7, 255});
    }
    {
        OpTest t;
        t.op("Cast", {t.input<float>({3}, {0x1.fffffep62f, -9.9e18f, -7.9f})});
        t.set_int("to", 7);
        t.go();
        CHECK(t.out<int64_t>() == I64{9223371487098961920ll, INT64_MIN, -7});
    }
    {
        OpTest t;   // int64 to int8 wraps
        t.op("Cast", {t.input<int64_t>({4}, {300, -129, 127, -4})});
        t.set_int("to", 3);
        t.go();
        CHECK(t.out<int8_t>() == std::vector<int8_t>{44, 127, 127, -4});
    }
    {
        OpTest t;
        t.op("Cast", {t.input<float>({4}, {0.5f, 0.0f, -0.0f, NAN})});
        t.set_int("to", 9);
        t.go();
        CHECK(t.type() == ElementType::Bool);
        CHECK(t.out<uint8_t>() == U8{1, 0, 0, 1});
    }
    {
        OpTest t;
        t.op("Cast", {t.input<uint8_t>({3}, {1, 0, 1}, ElementType::Bool)});
        t.set_int("to", 1);
        t.go();
        CHECK(t.out<float>() == F32{1, 0, 1});
    }
    {
        OpTest t;   // int64 to float rounds to nearest even
        t.op("Cast", {t.input<int64_t>({2}, {16777217, -16777219})});
        t.set_int("to", 1);
        t.go();
        CHECK(t.out<float>() == F32{16777216.0f, -16777220.0f});
    }
    {
        OpTest t;
        t.op("Cast", {t.input<int32_t>({3}, {70000, -2049, 2049})});
        t.set_int("to", 10);
        t.go();
        CHECK(t.out<uint16_t>() == std::vector<uint16_t>{0x7c00, 0xe800, 0x6800});
    }
    {
        OpTest t;
        t.op("Cast", {t.input<int8_t>({3}, {-128, 5, -1})});
        t.set_int("to", 2);
        t.go();
        CHECK(t.out<uint8_t>() == U8{128, 5, 255});
    }
    {
        OpTest t;
        t.op("Cast", {t.input<float>({1}, {1})});
        t.set_int("to", 8);   // string
        CHECK(t.prepare() == Status::Unsupported);
    }
    {
        OpTest t;
        t.op("Cast", {t.input<float>({1}, {1})});
        CHECK(t.prepare() == Status::InvalidArgument);   // no 'to'
    }
}

TEST_CASE("ConstantOfShape: fills at run time, 1 MiB and more on two threads, every element and tail") {
    auto check = [](auto value, ElementType type, int64_t n, const char* threads) {
        using T = decltype(value);
        OpTest t;
        t.op("ConstantOfShape", {t.constant<int64_t>({1}, {n})});
        t.set_tensor<T>("value", {1}, {value}, type);
        t.limits.max_folded_bytes = 0;   // not folded: the kernel runs in infer()
        REQUIRE(t.infer("CPU", threads) == Status::Ok);
        const T* y = t.outputs[0].data_as<T>();
        int64_t bad = 0;
        for (int64_t i = 0; i < n; ++i) bad += std::memcmp(&y[i], &value, sizeof(T)) != 0;
        INFO("n " << n << " element bytes " << sizeof(T) << " threads " << threads);
        CHECK(t.outputs[0].elements() == (uint64_t)n);
        CHECK(bad == 0);
    };
    for (int64_t n : {1, 3, 8191, 8193, 300007})   // below and past the 32 KiB block and 1 MiB
        for (const char* threads : {"1", "2"}) {
            check((uint8_t)0xa7, ElementType::UInt8, n * 4 + 1, threads);
            check((int16_t)-2, ElementType::Int16, n, threads);
            check(1.5f, ElementType::Float32, n, threads);
            check((int64_t)-7, ElementType::Int64, n, threads);
        }
}

TEST_CASE("Shape, Constant, ConstantOfShape") {
    {
        OpTest t;
        t.op("Shape", {t.input<float>({2, 3, 4}, iota_float(24))});
        t.go();
        CHECK(t.type() == ElementType::Int64);
        CHECK(t.out<int64_t>() == I64{2, 3, 4});
    }
    {
        OpTest t;
        t.op("Shape", {t.input<float>({2, 3, 4}, iota_float(24))});
        t.set_int("start", 1);
        t.set_int("end", -1);
        t.go();
        CHECK(t.out<int64_t>() == I64{3});
    }
    {
        OpTest t;
        t.op("Shape", {t.input<float>({2, 3, 4}, iota_float(24))});
        t.set_int("start", -100);
        t.set_int("end", 100);
        t.go();
        CHECK(t.out<int64_t>() == I64{2, 3, 4});
    }
    {
        OpTest t;   // opset 14: start and end do not exist yet
        t.opset = 14;
        t.op("Shape", {t.input<float>({2, 3}, iota_float(6))});
        t.set_int("start", 1);
        t.go();
        CHECK(t.out<int64_t>() == I64{2, 3});
    }
    {
        OpTest t;
        t.op("Constant", {});
        t.set_ints("value_ints", {4, -5});
        t.go();
        CHECK(t.shape() == Shape{2});
        CHECK(t.out<int64_t>() == I64{4, -5});
    }
    {
        OpTest t;
        t.op("Constant", {});
        t.set_float("value_float", 2.5f);
        t.go();
        CHECK(t.shape() == Shape{});
        CHECK(t.type() == ElementType::Float32);
        CHECK(t.out<float>() == F32{2.5f});
    }
    {
        OpTest t;   // a Model constant: the 'value' tensor
        t.constant<int32_t>({2, 2}, {1, 2, 3, 4});
        t.node = 0;
        t.go();
        CHECK(t.shape() == Shape{2, 2});
        CHECK(t.out<int32_t>() == I32{1, 2, 3, 4});
    }
    {
        OpTest t;
        t.op("Constant", {});
        t.set_int("value_int", 1);
        t.set_float("value_float", 1);
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Constant", {});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("ConstantOfShape", {t.constant<int64_t>({2}, {2, 3})});
        t.set_tensor<int64_t>("value", {1}, {-7});
        t.go();
        CHECK(t.shape() == Shape{2, 3});
        CHECK(t.out<int64_t>() == I64(6, -7));
    }
    {
        OpTest t;   // default: float32 zeros
        t.op("ConstantOfShape", {t.constant<int64_t>({1}, {3})});
        t.go();
        CHECK(t.type() == ElementType::Float32);
        CHECK(t.out<float>() == F32{0, 0, 0});
    }
    {
        OpTest t;   // empty shape: a scalar
        t.op("ConstantOfShape", {t.constant<int64_t>({0}, {})});
        t.set_tensor<uint8_t>("value", {1}, {1}, ElementType::Bool);
        t.go();
        CHECK(t.shape() == Shape{});
        CHECK(t.out<uint8_t>() == U8{1});
    }
    {
        OpTest t;
        t.op("ConstantOfShape", {t.constant<int64_t>({2}, {1 << 20, 1 << 20})});
        CHECK(t.prepare() == Status::LimitExceeded);
    }
    {
        OpTest t;   // a product that overflows 64 bits is still LimitExceeded
        t.op("ConstantOfShape", {t.constant<int64_t>({3}, {1ll << 40, 1ll << 40, 1ll << 40})});
        CHECK(t.prepare() == Status::LimitExceeded);
    }
    {
        OpTest t;
        t.op("ConstantOfShape", {t.constant<int64_t>({2}, {2, -1})});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("ConstantOfShape", {t.constant<int64_t>({1}, {2})});
        t.set_tensor<float>("value", {2}, {1, 2});
        CHECK(t.prepare() == Status::InvalidArgument);   // value must have one element
    }
    {
        OpTest t;
        t.op("ConstantOfShape", {t.input<int64_t>({1}, {2})});
        CHECK(t.prepare() == Status::Unsupported);
        CHECK(t.error().find("data-dependent shape: input 0") != std::string::npos);
    }
}

TEST_CASE("Dropout: inference passes through; training mode only at a constant ratio 0") {
    for (bool training : {false, true}) {
        CAPTURE(training);
        OpTest t;
        t.opset = 13;
        uint8_t flag = training;
        t.op("Dropout", {t.input<float>({2, 3}, iota_float(6)), t.constant<float>({}, {0.0f}),
                         t.constant<uint8_t>({}, {flag}, ElementType::Bool)}, 2);
        t.go();
        CHECK(t.out<float>(0) == iota_float(6));
        CHECK(t.out<uint8_t>(1) == std::vector<uint8_t>(6, 1));
    }
    OpTest t;
    t.opset = 13;
    t.op("Dropout", {t.input<float>({2, 3}, iota_float(6)), t.constant<float>({}, {0.5f}),
                     t.constant<uint8_t>({}, {1}, ElementType::Bool)}, 2);
    CHECK(t.prepare() == Status::Unsupported);
    OpTest u;   // a ratio known only at run time
    u.opset = 13;
    u.op("Dropout", {u.input<float>({2, 3}, iota_float(6)), u.input<float>({}, {0.0f}),
                     u.constant<uint8_t>({}, {1}, ElementType::Bool)}, 2);
    CHECK(u.prepare() == Status::Unsupported);
    OpTest v;   // training_mode must be bool
    v.opset = 13;
    v.op("Dropout", {v.input<float>({2, 3}, iota_float(6)), v.absent(), v.constant<float>({}, {1.0f})});
    CHECK(v.prepare() == Status::InvalidArgument);
}

TEST_CASE("Expand, Tile, Range") {
    {
        OpTest t;
        t.op("Expand", {t.input<int32_t>({3, 1}, {1, 2, 3}), t.constant<int64_t>({3}, {2, 1, 2})});
        t.go();
        CHECK(t.shape() == Shape{2, 3, 2});
        CHECK(t.out<int32_t>() == I32{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
    }
    {
        OpTest t;   // the shape may be smaller than the input's
        t.op("Expand", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({1}, {1})});
        t.go();
        CHECK(t.shape() == Shape{2, 3});
        CHECK(t.out<float>() == iota_float(6));
    }
    {
        OpTest t;
        t.op("Expand", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({2}, {2, 4})});
        CHECK(t.prepare() == Status::InvalidArgument);
        CHECK(std::string(t.prepared.error).find("dimension 3 does not broadcast to 4") != std::string::npos);
    }
    {
        OpTest t;   // the shape longer than the input, the mismatch in its last dimension
        t.op("Expand", {t.input<float>({3}, iota_float(3)), t.constant<int64_t>({3}, {2, 1, 5})});
        CHECK(t.prepare() == Status::InvalidArgument);
        CHECK(std::string(t.prepared.error).find("dimension 3 does not broadcast to 5") != std::string::npos);
    }
    {
        OpTest t;
        t.op("Expand", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({2}, {2, -3})});
        CHECK(t.prepare() == Status::InvalidArgument);
        CHECK(std::string(t.prepared.error).find("shape[1] = -3") != std::string::npos);
    }
    {
        OpTest t;
        t.op("Expand", {t.input<float>({1}, {1}), t.constant<int64_t>({3}, {1 << 20, 1 << 20, 1 << 20})});
        CHECK(t.prepare() == Status::LimitExceeded);
    }
    {
        OpTest t;
        t.op("Expand", {t.input<float>({1}, {1}), t.input<int64_t>({1}, {4})});
        CHECK(t.prepare() == Status::Unsupported);
    }
    {
        OpTest t;
        t.op("Tile", {t.input<int64_t>({2, 2}, {1, 2, 3, 4}), t.constant<int64_t>({2}, {2, 3})});
        t.go();
        CHECK(t.shape() == Shape{4, 6});
        CHECK(t.out<int64_t>() == I64{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4, 1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4});
    }
    {
        OpTest t;
        t.op("Tile", {t.input<uint8_t>({3}, {1, 0, 1}, ElementType::Bool), t.constant<int64_t>({1}, {0})});
        t.go();
        CHECK(t.shape() == Shape{0});
    }
    {
        OpTest t;
        t.op("Tile", {t.input<int64_t>({2, 2}, {1, 2, 3, 4}), t.constant<int64_t>({1}, {2})});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Tile", {t.input<int64_t>({2, 2}, {1, 2, 3, 4}), t.constant<int64_t>({2}, {INT64_MAX, INT64_MAX})});
        CHECK(t.prepare() == Status::LimitExceeded);
    }
    {
        OpTest t;
        t.op("Range", {t.constant<int64_t>({}, {1}), t.constant<int64_t>({}, {10}), t.constant<int64_t>({}, {3})});
        t.go();
        CHECK(t.out<int64_t>() == I64{1, 4, 7});
    }
    {
        OpTest t;
        t.op("Range", {t.constant<int32_t>({}, {5}), t.constant<int32_t>({}, {0}), t.constant<int32_t>({}, {-2})});
        t.go();
        CHECK(t.out<int32_t>() == I32{5, 3, 1});
    }
    {
        OpTest t;   // accumulates in float, as the ONNX function
        t.op("Range", {t.constant<float>({}, {0}), t.constant<float>({}, {1}), t.constant<float>({}, {0.25f})});
        t.go();
        CHECK(t.out<float>() == F32{0, 0.25f, 0.5f, 0.75f});
    }
    {
        OpTest t;
        t.op("Range", {t.constant<int64_t>({}, {10}), t.constant<int64_t>({}, {1}), t.constant<int64_t>({}, {1})});
        t.go();
        CHECK(t.shape() == Shape{0});
    }
    {
        OpTest t;
        t.op("Range", {t.constant<int64_t>({}, {0}), t.constant<int64_t>({}, {1}), t.constant<int64_t>({}, {0})});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Range", {t.constant<int64_t>({}, {INT64_MIN}), t.constant<int64_t>({}, {INT64_MAX}), t.constant<int64_t>({}, {1})});
        CHECK(t.prepare() == Status::LimitExceeded);
    }
    {
        OpTest t;
        t.op("Range", {t.constant<float>({}, {0}), t.constant<float>({}, {INFINITY}), t.constant<float>({}, {1})});
        CHECK(t.prepare() == Status::LimitExceeded);
    }
    {
        OpTest t;
        t.op("Range", {t.constant<int64_t>({}, {0}), t.input<int64_t>({}, {4}), t.constant<int64_t>({}, {1})});
        CHECK(t.prepare() == Status::Unsupported);
        CHECK(t.error().find("data-dependent shape: input 1") != std::string::npos);
    }
}

TEST_CASE("Where: typed branches; float32 results bitwise equal to the elementwise Select") {
    {
        OpTest t;
        t.op("Where", {t.input<uint8_t>({2, 1}, {1, 0}, ElementType::Bool), t.input<int64_t>({3}, {1, 2, 3}),
                       t.input<int64_t>({}, {-1})});
        t.go();
        CHECK(t.shape() == Shape{2, 3});
        CHECK(t.type() == ElementType::Int64);
        CHECK(t.out<int64_t>() == I64{1, 2, 3, -1, -1, -1});
    }
    {
        OpTest t;
        const F32 a = {NAN, -0.0f, INFINITY, 1.5f, float_of(0x7fc01234u), 0x1p-149f};
        const F32 b = {2.0f, 0.0f, -INFINITY, NAN, -1.0f, -0.0f};
        const U8 cond = {1, 1, 0, 0, 1, 0};
        t.op("Where", {t.input<uint8_t>({6}, cond, ElementType::Bool), t.input<float>({6}, a), t.input<float>({6}, b)});
        t.go();
        std::vector<float> y = t.out<float>();
        REQUIRE(y.size() == 6);
        for (size_t i = 0; i < 6; ++i) {
            float args[3] = {cond[i] ? 1.0f : 0.0f, a[i], b[i]};
            float select = snippet_evaluate(SnippetOp::Select, args, 0, 0, isa_uses_fma(default_isa()));
            INFO(i);
            CHECK(bits_of(y[i]) == bits_of(select));
            CHECK(bits_of(y[i]) == bits_of(cond[i] ? a[i] : b[i]));
        }
    }
    {
        OpTest t;   // a float condition keeps the elementwise Select (NaN condition is true)
        t.op("Where", {t.input<float>({3}, {0.0f, NAN, -2.0f}), t.input<float>({3}, {1, 2, 3}), t.input<float>({3}, {4, 5, 6})});
        t.go();
        CHECK(t.out<float>() == F32{4, 2, 3});
    }
    {
        OpTest t;
        t.op("Where", {t.input<uint8_t>({2}, {1, 0}, ElementType::Bool), t.input<int64_t>({2}, {1, 2}), t.input<int32_t>({2}, {1, 2})});
        CHECK(t.prepare() == Status::InvalidArgument);   // branch types differ
    }
    {
        OpTest t;
        t.op("Where", {t.input<uint8_t>({2}, {1, 0}, ElementType::Bool), t.input<int64_t>({2}, {1, 2}), t.input<int64_t>({3}, {1, 2, 3})});
        CHECK(t.prepare() == Status::InvalidArgument);   // shapes do not broadcast
    }
    {
        OpTest t;
        t.op("Where", {t.input<int64_t>({2}, {1, 0}), t.input<int64_t>({2}, {1, 2}), t.input<int64_t>({2}, {1, 2})});
        CHECK(t.prepare() == Status::Unsupported);   // int64 condition
    }
}

TEST_CASE("Comparisons and logical ops give bool with broadcasting") {
    struct Case { const char* op; U8 expected; };
    const Case cases[] = {
        {"Equal", {0, 1, 0, 0, 0, 0}},
        {"Less", {1, 0, 0, 0, 0, 0}},
        {"Greater", {0, 0, 1, 1, 1, 1}},
        {"LessOrEqual", {1, 1, 0, 0, 0, 0}},
        {"GreaterOrEqual", {0, 1, 1, 1, 1, 1}},
    };
    for (const Case& k : cases) {
        INFO(std::string(k.op));
        {
            OpTest t;   // [2,3] against [3]
            t.op(k.op, {t.input<int64_t>({2, 3}, {-5, 2, 9, 4, 5, 6}), t.input<int64_t>({3}, {0, 2, 4})});
            t.go();
            CHECK(t.type() == ElementType::Bool);
            CHECK(t.shape() == Shape{2, 3});
            CHECK(t.out<uint8_t>() == k.expected);
        }
        {
            OpTest t;
            t.op(k.op, {t.input<float>({2, 3}, {-5, 2, 9, 4, 5, 6}), t.input<float>({3}, {0, 2, 4})});
            t.go();
            CHECK(t.out<uint8_t>() == k.expected);
        }
        {
            OpTest t;
            t.op(k.op, {t.input<int32_t>({2, 3}, {-5, 2, 9, 4, 5, 6}), t.constant<int32_t>({1, 3}, {0, 2, 4})});
            t.go();
            CHECK(t.out<uint8_t>() == k.expected);
        }
        {
            OpTest t;   // NaN compares false, even to itself
            t.op(k.op, {t.input<float>({1}, {NAN}), t.input<float>({1}, {NAN})});
            t.go();
            CHECK(t.out<uint8_t>() == U8{0});
        }
    }
    {
        OpTest t;
        t.op("Equal", {t.input<uint8_t>({4}, {0, 0, 1, 1}, ElementType::Bool), t.input<uint8_t>({4}, {0, 1, 0, 1}, ElementType::Bool)});
        t.go();
        CHECK(t.out<uint8_t>() == U8{1, 0, 0, 1});
    }
    {
        OpTest t;
        t.op("Less", {t.input<uint8_t>({1}, {0}, ElementType::Bool), t.input<uint8_t>({1}, {1}, ElementType::Bool)});
        CHECK(t.prepare() == Status::Unsupported);
    }
    {
        OpTest t;
        t.op("Less", {t.input<float>({2}, {1, 2}), t.input<int64_t>({2}, {1, 2})});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    struct Logic { const char* op; U8 expected; };
    const Logic logic[] = {{"And", {0, 0, 0, 1}}, {"Or", {0, 1, 1, 1}}, {"Xor", {0, 1, 1, 0}}};
    for (const Logic& k : logic) {
        INFO(std::string(k.op));
        OpTest t;   // [2,1] against [2]
        t.op(k.op, {t.input<uint8_t>({2, 1}, {0, 1}, ElementType::Bool), t.input<uint8_t>({2}, {0, 1}, ElementType::Bool)});
        t.go();
        CHECK(t.shape() == Shape{2, 2});
        CHECK(t.out<uint8_t>() == k.expected);
    }
    {
        OpTest t;
        t.op("Not", {t.input<uint8_t>({3}, {0, 1, 0}, ElementType::Bool)});
        t.go();
        CHECK(t.out<uint8_t>() == U8{1, 0, 1});
    }
    {
        OpTest t;
        t.op("And", {t.input<int64_t>({1}, {1}), t.input<int64_t>({1}, {1})});
        CHECK(t.prepare() == Status::Unsupported);
    }
}

TEST_CASE("Integer Add, Sub, Mul, Div, Mod, Neg, Abs; float32 keeps the elementwise kernel") {
    {
        OpTest t;
        t.op("Add", {t.input<int64_t>({2, 2}, {1, 2, 3, 4}), t.input<int64_t>({2}, {10, INT64_MAX})});
        t.go();
        CHECK(t.type() == ElementType::Int64);
        CHECK(t.out<int64_t>() == I64{11, INT64_MIN + 1, 13, INT64_MIN + 3});   // wraps
    }
    {
        OpTest t;
        t.op("Sub", {t.input<int32_t>({3}, {1, 2, INT32_MIN}), t.input<int32_t>({}, {3})});
        t.go();
        CHECK(t.out<int32_t>() == I32{-2, -1, INT32_MAX - 2});
    }
    {
        OpTest t;
        t.op("Mul", {t.input<int64_t>({3}, {-3, 4, 1ll << 62}), t.input<int64_t>({3}, {5, -6, 4})});
        t.go();
        CHECK(t.out<int64_t>() == I64{-15, -24, 0});
    }
    {
        OpTest t;   // truncates toward zero; INT_MIN / -1 wraps instead of trapping
        t.op("Div", {t.input<int64_t>({5}, {7, -7, 7, -7, INT64_MIN}), t.input<int64_t>({5}, {2, 2, -2, -2, -1})});
        t.go();
        CHECK(t.out<int64_t>() == I64{3, -3, -3, 3, INT64_MIN});
    }
    {
        OpTest t;
        t.op("Div", {t.input<int32_t>({2}, {1, 2}), t.input<int32_t>({2}, {1, 0})});
        REQUIRE(t.prepare() == Status::Ok);
        CHECK(t.run() == Status::InvalidArgument);
        CHECK(std::string(t.run_error).find("division by zero") != std::string::npos);
    }
    {
        OpTest t;   // fmod 0: the sign of the divisor
        t.op("Mod", {t.input<int64_t>({5}, {7, -7, 7, -7, INT64_MIN}), t.input<int64_t>({5}, {3, 3, -3, -3, -1})});
        t.go();
        CHECK(t.out<int64_t>() == I64{1, 2, -2, -1, 0});
    }
    {
        OpTest t;   // fmod 1: the sign of the dividend
        t.op("Mod", {t.input<int32_t>({4}, {7, -7, 7, -7}), t.input<int32_t>({4}, {3, 3, -3, -3})});
        t.set_int("fmod", 1);
        t.go();
        CHECK(t.out<int32_t>() == I32{1, -1, 1, -1});
    }
    {
        OpTest t;
        t.op("Mod", {t.input<float>({2}, {7.5f, -7.5f}), t.input<float>({1}, {2})});
        t.set_int("fmod", 1);
        t.go();
        CHECK(t.out<float>() == F32{1.5f, -1.5f});
    }
    {
        OpTest t;
        t.op("Mod", {t.input<float>({2}, {7.5f, -7.5f}), t.input<float>({1}, {2})});
        CHECK(t.prepare() == Status::InvalidArgument);   // float Mod needs fmod = 1
    }
    {
        OpTest t;
        t.op("Mod", {t.input<int64_t>({2}, {1, 2}), t.input<int64_t>({1}, {0})});
        REQUIRE(t.prepare() == Status::Ok);
        CHECK(t.run() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Neg", {t.input<int32_t>({3}, {5, -5, INT32_MIN})});
        t.go();
        CHECK(t.out<int32_t>() == I32{-5, 5, INT32_MIN});
    }
    {
        OpTest t;
        t.op("Abs", {t.input<int64_t>({3}, {5, -5, INT64_MIN})});
        t.go();
        CHECK(t.out<int64_t>() == I64{5, 5, INT64_MIN});
    }
    {
        OpTest t;   // float32: the elementwise kernel (in place allowed, same results)
        t.op("Add", {t.input<float>({3}, {1, 2, 3}), t.input<float>({1}, {0.5f})});
        t.go();
        CHECK(t.prepared.in_place);
        CHECK(t.out<float>() == F32{1.5f, 2.5f, 3.5f});
    }
    {
        OpTest t;
        t.op("Abs", {t.input<float>({2}, {-0.0f, -3})});
        t.go();
        CHECK(bits_of(t.out<float>()[0]) == 0u);
        CHECK(t.out<float>()[1] == 3.0f);
    }
    {
        OpTest t;
        t.op("Add", {t.input<int64_t>({2}, {1, 2}), t.input<int32_t>({2}, {1, 2})});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Add", {t.input<uint8_t>({2}, {1, 2}, ElementType::Bool), t.input<uint8_t>({2}, {1, 2}, ElementType::Bool)});
        CHECK(t.prepare() == Status::Unsupported);
    }
    {
        OpTest t;
        t.op("Add", {t.input<int64_t>({2}, {1, 2}), t.input<int64_t>({3}, {1, 2, 3})});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Add", {t.input<int64_t>({2}, {1, 2})});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
}

TEST_CASE("Max, Min (variadic), Sum, Mean") {
    const F32 a = {1, NAN, 3, -0.0f, 5, NAN};
    const F32 b = {2, 2, NAN, 0.0f, -1, NAN};
    const F32 c = {0, 9, 1, -0.0f};
    const F32 s = {4};
    for (const char* op : {"Max", "Min"}) {
        INFO(std::string(op));
        SnippetOp snippet = std::string(op) == "Max" ? SnippetOp::Max : SnippetOp::Min;
        OpTest t;   // three inputs, one of them broadcast: a fold left with the snippet semantics
        t.op(op, {t.input<float>({6}, a), t.input<float>({6}, b), t.input<float>({1}, s)});
        t.go();
        std::vector<float> y = t.out<float>();
        REQUIRE(y.size() == 6);
        for (size_t i = 0; i < 6; ++i) {
            float args[2] = {a[i], b[i]};
            float v = snippet_evaluate(snippet, args, 0, 0, false);
            args[0] = v;
            args[1] = s[0];
            v = snippet_evaluate(snippet, args, 0, 0, false);
            INFO(i);
            CHECK(bits_of(y[i]) == bits_of(v));
        }
        OpTest two;   // two float inputs: the elementwise kernel, the same semantics
        two.op(op, {two.input<float>({6}, a), two.input<float>({6}, b)});
        two.go();
        std::vector<float> z = two.out<float>();
        REQUIRE(z.size() == 6);
        for (size_t i = 0; i < 6; ++i) {
            float args[2] = {a[i], b[i]};
            INFO(i);
            CHECK(bits_of(z[i]) == bits_of(snippet_evaluate(snippet, args, 0, 0, false)));
        }
        OpTest one;
        one.op(op, {one.input<float>({4}, c)});
        one.go();
        CHECK(one.out<float>() == c);
    }
    {
        OpTest t;
        t.op("Max", {t.input<int64_t>({2, 2}, {1, 5, -3, 7}), t.input<int64_t>({2}, {4, 6}), t.input<int64_t>({2, 1}, {0, 9})});
        t.go();
        CHECK(t.out<int64_t>() == I64{4, 6, 9, 9});
    }
    {
        OpTest t;
        t.op("Min", {t.input<int32_t>({3}, {1, 5, -3}), t.input<int32_t>({3}, {4, -6, 0})});
        t.go();
        CHECK(t.out<int32_t>() == I32{1, -6, -3});
    }
    {
        OpTest t;
        t.op("Sum", {t.input<float>({2}, {1, 2}), t.input<float>({2}, {0.5f, 0.25f}), t.input<float>({1}, {100})});
        t.go();
        CHECK(t.out<float>() == F32{101.5f, 102.25f});
    }
    {
        OpTest t;   // fold left in float: (1e8 + 1) - 1e8 = 0
        t.op("Sum", {t.input<float>({1}, {1e8f}), t.input<float>({1}, {1}), t.input<float>({1}, {-1e8f})});
        t.go();
        CHECK(t.out<float>() == F32{0});
    }
    {
        OpTest t;
        t.op("Mean", {t.input<float>({2}, {1, 2}), t.input<float>({2}, {2, 2}), t.input<float>({2}, {3, 3})});
        t.go();
        CHECK(t.out<float>() == F32{2, 7.0f / 3.0f});
    }
    {
        OpTest t;
        t.op("Mean", {t.input<float>({2}, {1, 2}), t.input<float>({3}, {2, 2, 2})});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Mean", {t.input<int64_t>({2}, {1, 2})});
        CHECK(t.prepare() == Status::Unsupported);
    }
    {
        OpTest t;
        t.op("Max", {});
        CHECK(t.prepare() == Status::InvalidArgument);
    }
}

TEST_CASE("DepthToSpace (DCR, CRD) and SpaceToDepth") {
    const int64_t n = 1, ch = 8, h = 2, w = 3, b = 2, co = ch / (b * b);
    for (const char* mode : {"DCR", "CRD"}) {
        INFO(std::string(mode));
        OpTest t;
        t.op("DepthToSpace", {t.input<float>({n, ch, h, w}, iota_float(48))});
        t.set_int("blocksize", b);
        t.set_string("mode", mode);
        t.go();
        CHECK(t.shape() == Shape{1, 2, 4, 6});
        bool crd = std::string(mode) == "CRD";
        std::vector<float> expected(48);
        for (int64_t c = 0; c < co; ++c)
            for (int64_t y = 0; y < h * b; ++y)
                for (int64_t x = 0; x < w * b; ++x) {
                    int64_t i = y % b, j = x % b;
                    int64_t source = crd ? c * b * b + i * b + j : (i * b + j) * co + c;
                    expected[(size_t)((c * h * b + y) * w * b + x)] = (float)((source * h + y / b) * w + x / b);
                }
        CHECK(t.out<float>() == expected);
        if (!crd) {   // the ONNX documentation's example, first rows
            std::vector<float> y = t.out<float>();
            CHECK(F32(y.begin(), y.begin() + 12) == F32{0, 12, 1, 13, 2, 14, 24, 36, 25, 37, 26, 38});
            OpTest back;   // SpaceToDepth undoes DCR
            back.op("SpaceToDepth", {back.input<float>({1, 2, 4, 6}, y)});
            back.set_int("blocksize", b);
            back.go();
            CHECK(back.shape() == Shape{1, 8, 2, 3});
            CHECK(back.out<float>() == iota_float(48));
        } else {
            std::vector<float> y = t.out<float>();
            CHECK(F32(y.begin(), y.begin() + 12) == F32{0, 6, 1, 7, 2, 8, 12, 18, 13, 19, 14, 20});
        }
    }
    {
        OpTest t;
        t.op("DepthToSpace", {t.input<float>({1, 6, 2, 2}, iota_float(24))});
        t.set_int("blocksize", 2);
        CHECK(t.prepare() == Status::InvalidArgument);   // 6 % 4
    }
    {
        OpTest t;
        t.op("DepthToSpace", {t.input<float>({1, 4, 2, 2}, iota_float(16))});
        t.set_int("blocksize", 0);
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("DepthToSpace", {t.input<float>({1, 4, 2, 2}, iota_float(16))});
        t.set_int("blocksize", 2);
        t.set_string("mode", "XYZ");
        CHECK(t.prepare() == Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("SpaceToDepth", {t.input<float>({1, 1, 3, 2}, iota_float(6))});
        t.set_int("blocksize", 2);
        CHECK(t.prepare() == Status::InvalidArgument);   // 3 % 2
    }
    {
        OpTest t;
        t.op("SpaceToDepth", {t.input<float>({4, 2, 2}, iota_float(16))});
        t.set_int("blocksize", 2);
        CHECK(t.prepare() == Status::InvalidArgument);   // rank 3
    }
}

TEST_CASE("tensor ops: random malformed nodes fail with a Status, never crash") {
    // Random op, opset, input types, shapes, values (known or not, absent), output counts and
    // attributes. A prepare that succeeds must describe outputs that can be allocated and a
    // run that returns (Ok or a Status); the sanitizer builds catch what this cannot see.
    const char* ops[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice",
                         "Gather", "Pad", "Cast", "Shape", "Constant", "ConstantOfShape", "Expand", "Tile", "Range",
                         "Where", "Equal", "Less", "Not", "And", "Add", "Div", "Mod", "Neg", "Abs", "Max", "Min",
                         "Sum", "Mean", "DepthToSpace", "SpaceToDepth"};
    const char* int_names[] = {"axis", "to", "blocksize", "allowzero", "start", "end", "fmod", "num_outputs", "value_int"};
    const char* ints_names[] = {"axes", "perm", "split", "starts", "ends", "pads", "shape", "value_ints"};
    MalformedPicker picker(20261123);
    auto pick = [&](uint32_t n) { return picker.pick(n); };
    uint32_t prepared = 0, ran = 0;
    for (int iteration = 0; iteration < 20000; ++iteration) {
        OpTest t;
        t.opset = 7 + pick(11);
        const char* op = ops[pick(sizeof ops / sizeof ops[0])];
        uint32_t num_inputs = pick(5);
        std::vector<InputRef> inputs;
        for (uint32_t i = 0; i < num_inputs; ++i) {
            if (pick(10) == 0) { inputs.push_back(t.model.absent()); continue; }
            ElementType type = pick(2) ? ElementType::Int64 : picker.any_type();
            inputs.push_back(picker.input(t, picker.any_shape(), type));
        }
        t.op(op, inputs, 1 + (pick(4) == 0 ? pick(3) : 0));
        for (const char* name : int_names) if (pick(5) == 0) t.set_int(name, pick(2) ? picker.special() : (int64_t)pick(12));
        for (const char* name : ints_names) {
            if (pick(5) != 0) continue;
            std::vector<int64_t> v(pick(5));
            for (int64_t& x : v) x = pick(2) ? picker.special() : (int64_t)pick(4) - 1;
            t.set_ints(name, v);
        }
        if (pick(6) == 0) t.set_string("mode", pick(2) ? "reflect" : pick(2) ? "edge" : "CRD");
        if (pick(8) == 0) t.set_float("value_float", 1.5f);
        INFO(std::string(op) << " opset " << t.opset << " iteration " << iteration);
        t.prepare_and_run_any(&prepared, &ran);
    }
    CHECK(prepared > 600);   // the generator reaches the kernels' bodies, not only their checks
    CHECK(ran > 500);
}
