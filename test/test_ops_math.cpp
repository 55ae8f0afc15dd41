// runtime.h math ops (trigonometric and other unary ops, more reductions, bitwise ops,
// CastLike, EyeLike, Trilu, Hardmax, CumSum): each kernel is driven through the op kernel
// contract (prepare, then run on dense tensors) on a one-node Model, and checked against
// expected values and the exact Status of bad input.
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


using I64 = std::vector<int64_t>;
using I32 = std::vector<int32_t>;
using I8 = std::vector<int8_t>;
using F32 = std::vector<float>;
using U8 = std::vector<uint8_t>;
using U16 = std::vector<uint16_t>;

// Each value within the conformance tolerance of the expected one (NaN matches NaN).
void check_close(const std::vector<float>& got, const std::vector<float>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        INFO(i);
        if (want[i] != want[i]) { CHECK(got[i] != got[i]); continue; }
        if (std::isinf(want[i])) { CHECK(got[i] == want[i]); continue; }
        CHECK(std::fabs(got[i] - want[i]) <= 1e-5 + 1e-3 * std::fabs(want[i]));
    }
}

// prepare's Status and that its message names the node.
void check_prepare_fails(OpTest& t, Status status, const char* part) {
    Status s = t.prepare();
    CHECK(s == status);
    INFO(t.error());
    CHECK(t.error().find("'node") != std::string::npos);
    CHECK(t.error().find(part) != std::string::npos);
}

}  // namespace

// ---- trigonometric and other unary ops --------------------------------------------------------

TEST_CASE("Sin ... Atanh match libm in float32, in place, shape kept") {
    struct Case { const char* op; float (*f)(float); F32 x; };
    const Case cases[] = {
        {"Sin", [](float v) { return std::sin(v); }, {-2.0f, 0.0f, 0.5f, 3.0f}},
        {"Cos", [](float v) { return std::cos(v); }, {-2.0f, 0.0f, 0.5f, 3.0f}},
        {"Tan", [](float v) { return std::tan(v); }, {-1.0f, 0.0f, 0.5f, 1.2f}},
        {"Asin", [](float v) { return std::asin(v); }, {-1.0f, 0.0f, 0.5f, 2.0f}},   // 2: NaN
        {"Acos", [](float v) { return std::acos(v); }, {-1.0f, 0.0f, 0.5f, 1.0f}},
        {"Atan", [](float v) { return std::atan(v); }, {-10.0f, 0.0f, 0.5f, 1e6f}},
        {"Sinh", [](float v) { return std::sinh(v); }, {-2.0f, 0.0f, 0.5f, 100.0f}},   // 100: inf
        {"Cosh", [](float v) { return std::cosh(v); }, {-2.0f, 0.0f, 0.5f, 3.0f}},
        {"Asinh", [](float v) { return std::asinh(v); }, {-2.0f, 0.0f, 0.5f, 3.0f}},
        {"Acosh", [](float v) { return std::acosh(v); }, {1.0f, 1.5f, 10.0f, 0.5f}},   // 0.5: NaN
        {"Atanh", [](float v) { return std::atanh(v); }, {-0.9f, 0.0f, 0.5f, 1.0f}},   // 1: inf
    };
    for (const Case& k : cases) {
        INFO(k.op);
        OpTest t;
        t.op(k.op, {t.input<float>({2, 2}, k.x)});
        t.go();
        CHECK(t.shape() == Shape{2, 2});
        CHECK(t.type() == ElementType::Float32);
        CHECK(t.prepared.in_place);
        F32 want;
        for (float v : k.x) want.push_back(k.f(v));
        check_close(t.out<float>(), want);
    }
    check_close(F32{std::sin(1.0f)}, F32{0.84147098f});   // the reference values are libm's
}

TEST_CASE("ThresholdedRelu, Shrink, Swish: attributes and their defaults") {
    {
        OpTest t;   // alpha defaults to 1
        t.op("ThresholdedRelu", {t.input<float>({5}, {-2.0f, 0.5f, 1.0f, 1.5f, 3.0f})});
        t.go();
        CHECK(t.out<float>() == F32{0.0f, 0.0f, 0.0f, 1.5f, 3.0f});
    }
    {
        OpTest t;
        t.op("ThresholdedRelu", {t.input<float>({3}, {-2.0f, 0.5f, 2.0f})});
        t.set_float("alpha", -1.0f);
        t.go();
        CHECK(t.out<float>() == F32{0.0f, 0.5f, 2.0f});
    }
    {
        OpTest t;   // hard shrink: lambd 1.5, bias 0
        t.op("Shrink", {t.input<float>({5}, {-2.0f, -1.0f, 0.0f, 1.0f, 2.0f})});
        t.set_float("lambd", 1.5f);
        t.go();
        CHECK(t.out<float>() == F32{-2.0f, 0.0f, 0.0f, 0.0f, 2.0f});
    }
    {
        OpTest t;   // soft shrink
        t.op("Shrink", {t.input<float>({5}, {-2.0f, -1.0f, 0.0f, 1.0f, 2.0f})});
        t.set_float("lambd", 1.5f);
        t.set_float("bias", 1.5f);
        t.go();
        CHECK(t.out<float>() == F32{-0.5f, 0.0f, 0.0f, 0.0f, 0.5f});
    }
    {
        OpTest t;   // lambd defaults to 0.5
        t.op("Shrink", {t.input<float>({3}, {-0.5f, 0.25f, 0.75f})});
        t.go();
        CHECK(t.out<float>() == F32{0.0f, 0.0f, 0.75f});
    }
    {
        OpTest t;
        t.op("Swish", {t.input<float>({4}, {-3.0f, 0.0f, 1.0f, 50.0f})});
        t.set_float("alpha", 2.0f);
        t.go();
        F32 want;
        for (float v : {-3.0f, 0.0f, 1.0f, 50.0f}) want.push_back(v / (1.0f + std::exp(-2.0f * v)));
        check_close(t.out<float>(), want);
        CHECK(t.out<float>()[3] == 50.0f);
    }
    {
        OpTest t;   // alpha defaults to 1: SiLU
        t.op("Swish", {t.input<float>({1}, {1.0f})});
        t.go();
        check_close(t.out<float>(), F32{0.7310586f});
    }
}

TEST_CASE("IsInf and IsNaN give bool, float16 too") {
    const F32 x = {INFINITY, -INFINITY, NAN, 0.0f, -1e30f};
    struct Case { int64_t positive, negative; U8 want; };
    const Case cases[] = {{1, 1, {1, 1, 0, 0, 0}}, {1, 0, {1, 0, 0, 0, 0}}, {0, 1, {0, 1, 0, 0, 0}}, {0, 0, {0, 0, 0, 0, 0}}};
    for (const Case& k : cases) {
        OpTest t;
        t.op("IsInf", {t.input<float>({5}, x)});
        if (k.positive != 1) t.set_int("detect_positive", k.positive);
        if (k.negative != 1) t.set_int("detect_negative", k.negative);
        t.go();
        CHECK(t.type() == ElementType::Bool);
        CHECK(!t.prepared.in_place);
        CHECK(t.out<uint8_t>() == k.want);
    }
    {
        OpTest t;
        t.op("IsNaN", {t.input<float>({5}, x)});
        t.go();
        CHECK(t.type() == ElementType::Bool);
        CHECK(t.out<uint8_t>() == U8{0, 0, 1, 0, 0});
    }
    {
        OpTest t;   // float16: +inf, -inf, NaN, 1
        t.op("IsNaN", {t.input<uint16_t>({4}, {0x7c00, 0xfc00, 0x7e00, 0x3c00})});
        t.go();
        CHECK(t.out<uint8_t>() == U8{0, 0, 1, 0});
    }
    {
        OpTest t;
        t.op("IsInf", {t.input<uint16_t>({4}, {0x7c00, 0xfc00, 0x7e00, 0x3c00})});
        t.go();
        CHECK(t.out<uint8_t>() == U8{1, 1, 0, 0});
    }
}

TEST_CASE("unary math ops: bad input") {
    {
        OpTest t;
        t.op("Sin", {t.input<int64_t>({2}, {1, 2})});
        check_prepare_fails(t, Status::Unsupported, "input 0 is i64 (float32 expected)");
    }
    {
        OpTest t;   // float16 only for the predicates
        t.op("Cos", {t.input<uint16_t>({1}, {0})});
        check_prepare_fails(t, Status::Unsupported, "float32 expected");
    }
    {
        OpTest t;
        t.op("Tan", {t.input<float>({1}, {0.0f}), t.input<float>({1}, {0.0f})});
        check_prepare_fails(t, Status::InvalidArgument, "expects 1 to 1 inputs, has 2");
    }
    {
        OpTest t;
        t.op("IsNaN", {t.input<int32_t>({1}, {0})});
        check_prepare_fails(t, Status::Unsupported, "input 0 is i32");
    }
    {
        OpTest t;
        t.op("ThresholdedRelu", {t.input<float>({1}, {0.0f})});
        t.set_int("alpha", 1);
        check_prepare_fails(t, Status::InvalidArgument, "attribute 'alpha' must be a float");
    }
    {
        OpTest t;
        t.op("Shrink", {t.input<float>({1}, {0.0f})});
        t.set_string("bias", "1");
        check_prepare_fails(t, Status::InvalidArgument, "attribute 'bias' must be a float");
    }
    {
        OpTest t;
        t.op("Swish", {t.input<float>({1}, {0.0f})});
        t.set_ints("alpha", {1});
        check_prepare_fails(t, Status::InvalidArgument, "attribute 'alpha' must be a float");
    }
    {
        OpTest t;
        t.op("IsInf", {t.input<float>({1}, {0.0f})});
        t.set_int("detect_negative", 2);
        check_prepare_fails(t, Status::InvalidArgument, "must be 0 or 1");
    }
    {
        OpTest t;
        t.op("IsInf", {t.input<float>({1}, {0.0f})});
        t.set_float("detect_positive", 1.0f);
        check_prepare_fails(t, Status::InvalidArgument, "attribute 'detect_positive' must be an int");
    }
}

// ---- more reductions ---------------------------------------------------------------------------

TEST_CASE("ReduceSumSquare, ReduceL1, ReduceLogSum, ReduceLogSumExp: axes, keepdims") {
    const F32 x = {1, -2, 3, -4, 5, -6};   // 2x3
    {
        OpTest t;
        t.op("ReduceSumSquare", {t.input<float>({2, 3}, x)});
        t.set_ints("axes", {1});
        t.go();
        CHECK(t.shape() == Shape{2, 1});
        CHECK(t.out<float>() == F32{14, 77});
    }
    {
        OpTest t;   // all axes, keepdims 0
        t.op("ReduceL1", {t.input<float>({2, 3}, x)});
        t.set_int("keepdims", 0);
        t.go();
        CHECK(t.shape() == Shape{});
        CHECK(t.out<float>() == F32{21});
    }
    {
        OpTest t;   // negative axis
        t.op("ReduceL1", {t.input<float>({2, 3}, x)});
        t.set_ints("axes", {-2});
        t.go();
        CHECK(t.shape() == Shape{1, 3});
        CHECK(t.out<float>() == F32{5, 7, 9});
    }
    {
        OpTest t;
        t.op("ReduceLogSum", {t.input<float>({2, 3}, {1, 2, 3, 4, 5, 6})});
        t.set_ints("axes", {0});
        t.set_int("keepdims", 0);
        t.go();
        CHECK(t.shape() == Shape{3});
        check_close(t.out<float>(), F32{std::log(5.0f), std::log(7.0f), std::log(9.0f)});
    }
    {
        OpTest t;   // large values do not overflow; -inf rows and NaN are kept
        t.op("ReduceLogSumExp", {t.input<float>({4, 2}, {1000, 1000, 1, 2, -INFINITY, -INFINITY, NAN, 1})});
        t.set_ints("axes", {1});
        t.go();
        CHECK(t.shape() == Shape{4, 1});
        CHECK(t.prepared.scratch_bytes == 4 * sizeof(float));
        F32 y = t.out<float>();
        check_close(y, F32{1000 + std::log(2.0f), std::log(std::exp(1.0f) + std::exp(2.0f)), -INFINITY, NAN});
    }
    {
        OpTest t;   // an empty set: 0 for the sums, -inf for the logs
        t.op("ReduceLogSumExp", {t.input<float>({2, 0}, {})});
        t.set_ints("axes", {1});
        t.go();
        CHECK(t.out<float>() == F32{-INFINITY, -INFINITY});
    }
    {
        OpTest t;
        t.op("ReduceSumSquare", {t.input<float>({2, 0}, {})});
        t.set_ints("axes", {1});
        t.set_int("keepdims", 0);
        t.go();
        CHECK(t.out<float>() == F32{0, 0});
    }
    {
        OpTest t;
        t.op("ReduceLogSum", {t.input<float>({0}, {})});
        t.go();
        CHECK(t.out<float>() == F32{-INFINITY});
    }
}

TEST_CASE("more reductions: axes input from opset 18, noop_with_empty_axes") {
    {
        OpTest t;
        t.opset = 18;
        t.op("ReduceSumSquare", {t.input<float>({2, 2}, {1, 2, 3, 4}), t.constant<int64_t>({1}, {0})});
        t.go();
        CHECK(t.shape() == Shape{1, 2});
        CHECK(t.out<float>() == F32{10, 20});
    }
    {
        OpTest t;   // no axes and noop: the input as it is
        t.opset = 18;
        t.op("ReduceL1", {t.input<float>({2}, {-1, 2})});
        t.set_int("noop_with_empty_axes", 1);
        t.go();
        CHECK(t.shape() == Shape{2});
        CHECK(t.out<float>() == F32{-1, 2});
    }
    {
        OpTest t;   // before opset 18 a second input is refused
        t.op("ReduceL1", {t.input<float>({2}, {-1, 2}), t.constant<int64_t>({1}, {0})});
        check_prepare_fails(t, Status::InvalidArgument, "expects 1 to 1 inputs, has 2");
    }
}

TEST_CASE("more reductions: bad input") {
    {
        OpTest t;
        t.op("ReduceLogSumExp", {t.input<int64_t>({2}, {1, 2})});
        check_prepare_fails(t, Status::Unsupported, "input 0 is i64 (float32 expected)");
    }
    {
        OpTest t;
        t.op("ReduceSumSquare", {t.input<float>({2, 2}, {1, 2, 3, 4})});
        t.set_ints("axes", {2});
        check_prepare_fails(t, Status::InvalidArgument, "axis 2 out of range for rank 2");
    }
    {
        OpTest t;
        t.op("ReduceLogSum", {t.input<float>({2, 2}, {1, 2, 3, 4})});
        t.set_ints("axes", {1, -1});
        check_prepare_fails(t, Status::InvalidArgument, "axis 1 is repeated");
    }
    {
        OpTest t;
        t.opset = 18;
        t.op("ReduceL1", {t.input<float>({2, 2}, {1, 2, 3, 4}), t.input<int64_t>({1}, {0})});
        check_prepare_fails(t, Status::Unsupported, "data-dependent shape: input 1 is not a constant");
    }
    {
        OpTest t;
        t.opset = 18;
        t.op("ReduceL1", {t.input<float>({2, 2}, {1, 2, 3, 4}), t.constant<int32_t>({1}, {0})});
        check_prepare_fails(t, Status::InvalidArgument, "input 1 must be a 1-D int64 tensor");
    }
}

// ---- bitwise ops -----------------------------------------------------------------------------

TEST_CASE("BitwiseAnd, Or, Xor, Not on every integer type, broadcasting") {
    {
        OpTest t;
        t.op("BitwiseAnd", {t.input<int64_t>({2, 2}, {0xff, -1, 6, INT64_MIN}), t.input<int64_t>({2}, {0x0f, 5})});
        t.go();
        CHECK(t.shape() == Shape{2, 2});
        CHECK(t.type() == ElementType::Int64);
        CHECK(t.out<int64_t>() == I64{0x0f, 5, 6, 0});
    }
    {
        OpTest t;
        t.op("BitwiseOr", {t.input<int32_t>({3}, {1, 2, INT32_MIN}), t.input<int32_t>({}, {4})});
        t.go();
        CHECK(t.out<int32_t>() == I32{5, 6, INT32_MIN | 4});
    }
    {
        OpTest t;
        t.op("BitwiseXor", {t.input<int8_t>({3}, {-1, 3, 0}), t.input<int8_t>({3}, {1, 5, -128})});
        t.go();
        CHECK(t.out<int8_t>() == I8{-2, 6, -128});
    }
    {
        OpTest t;
        t.op("BitwiseXor", {t.input<uint8_t>({2}, {0xf0, 0xff}), t.input<uint8_t>({2}, {0xff, 0x0f})});
        t.go();
        CHECK(t.out<uint8_t>() == U8{0x0f, 0xf0});
    }
    {
        OpTest t;
        t.op("BitwiseNot", {t.input<int32_t>({3}, {0, -1, 5})});
        t.go();
        CHECK(t.out<int32_t>() == I32{-1, 0, -6});
    }
    {
        OpTest t;
        t.op("BitwiseNot", {t.input<uint8_t>({2}, {0, 0x0f})});
        t.go();
        CHECK(t.out<uint8_t>() == U8{0xff, 0xf0});
    }
}

TEST_CASE("BitShift: uint8 left and right; shifts past the width give 0") {
    {
        OpTest t;
        t.op("BitShift", {t.input<uint8_t>({4}, {16, 4, 1, 0xff}), t.input<uint8_t>({4}, {1, 2, 7, 8})});
        t.set_string("direction", "LEFT");
        t.go();
        CHECK(t.type() == ElementType::UInt8);
        CHECK(t.out<uint8_t>() == U8{32, 16, 128, 0});
    }
    {
        OpTest t;
        t.op("BitShift", {t.input<uint8_t>({2, 2}, {16, 4, 1, 0xff}), t.input<uint8_t>({2}, {1, 200})});
        t.set_string("direction", "RIGHT");
        t.go();
        CHECK(t.out<uint8_t>() == U8{8, 0, 0, 0});
    }
}

TEST_CASE("bitwise ops: bad input") {
    {
        OpTest t;
        t.op("BitwiseAnd", {t.input<float>({1}, {1.0f}), t.input<float>({1}, {1.0f})});
        check_prepare_fails(t, Status::InvalidArgument, "inputs are f32 (integers expected)");
    }
    {
        OpTest t;
        t.op("BitwiseNot", {t.input<uint8_t>({1}, {1}, ElementType::Bool)});
        check_prepare_fails(t, Status::InvalidArgument, "inputs are bool (integers expected)");
    }
    {
        OpTest t;
        t.op("BitwiseOr", {t.input<int32_t>({1}, {1}), t.input<int64_t>({1}, {1})});
        check_prepare_fails(t, Status::InvalidArgument, "input 1 is i64, input 0 i32");
    }
    {
        OpTest t;
        t.op("BitwiseXor", {t.input<int32_t>({2}, {1, 2}), t.input<int32_t>({3}, {1, 2, 3})});
        check_prepare_fails(t, Status::InvalidArgument, "input shapes do not broadcast");
    }
    {
        OpTest t;
        t.op("BitwiseAnd", {t.input<int32_t>({2}, {1, 2})});
        check_prepare_fails(t, Status::InvalidArgument, "expects 2 to 2 inputs, has 1");
    }
    {
        OpTest t;
        t.op("BitShift", {t.input<uint8_t>({1}, {1}), t.input<uint8_t>({1}, {1})});
        check_prepare_fails(t, Status::InvalidArgument, "attribute 'direction' must be LEFT or RIGHT");
    }
    {
        OpTest t;
        t.op("BitShift", {t.input<uint8_t>({1}, {1}), t.input<uint8_t>({1}, {1})});
        t.set_string("direction", "left");
        check_prepare_fails(t, Status::InvalidArgument, "attribute 'direction' must be LEFT or RIGHT");
    }
    {
        OpTest t;
        t.op("BitShift", {t.input<int32_t>({1}, {1}), t.input<int32_t>({1}, {1})});
        t.set_string("direction", "LEFT");
        check_prepare_fails(t, Status::InvalidArgument, "inputs are i32 (BitShift takes unsigned integers)");
    }
}

// ---- Size, CastLike, EyeLike ------------------------------------------------------------------

TEST_CASE("Size: the element count as an int64 scalar, any type") {
    {
        OpTest t;
        t.op("Size", {t.input<uint8_t>({2, 3, 4}, U8(24, 1), ElementType::Bool)});
        t.go();
        CHECK(t.type() == ElementType::Int64);
        CHECK(t.shape() == Shape{});
        CHECK(t.out<int64_t>() == I64{24});
    }
    {
        OpTest t;
        t.op("Size", {t.input<float>({3, 0}, {})});
        t.go();
        CHECK(t.out<int64_t>() == I64{0});
    }
    {
        OpTest t;
        t.op("Size", {t.input<float>({}, {1.0f})});
        t.go();
        CHECK(t.out<int64_t>() == I64{1});
    }
    {
        OpTest t;
        t.op("Size", {t.input<float>({1}, {1.0f}), t.input<float>({1}, {1.0f})});
        check_prepare_fails(t, Status::InvalidArgument, "expects 1 to 1 inputs, has 2");
    }
}


TEST_CASE("CastLike takes the second input's type; EyeLike puts ones on diagonal k") {
    {
        OpTest t;
        t.op("CastLike", {t.input<float>({3}, {1.7f, -2.5f, 0.0f}), t.input<int32_t>({0}, {})});
        t.go();
        CHECK(t.type() == ElementType::Int32);
        CHECK(t.shape() == Shape{3});
        CHECK(t.out<int32_t>() == I32{1, -2, 0});
        CHECK(!t.prepared.in_place);
    }
    {
        OpTest t;
        t.op("CastLike", {t.input<int64_t>({2}, {3, 0}), t.input<uint8_t>({1}, {0}, ElementType::Bool)});
        t.go();
        CHECK(t.type() == ElementType::Bool);
        CHECK(t.out<uint8_t>() == U8{1, 0});
    }
    {
        OpTest t;   // same type: a copy, in place
        t.op("CastLike", {t.input<float>({2}, {1.5f, 2.5f}), t.input<float>({1}, {0.0f})});
        t.go();
        CHECK(t.prepared.in_place);
        CHECK(t.out<float>() == F32{1.5f, 2.5f});
    }
    {
        OpTest t;   // the input's type by default
        t.op("EyeLike", {t.input<int64_t>({3, 4}, I64(12, 7))});
        t.go();
        CHECK(t.type() == ElementType::Int64);
        CHECK(t.out<int64_t>() == I64{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0});
    }
    {
        OpTest t;   // dtype float, k 1
        t.op("EyeLike", {t.input<int32_t>({3, 3}, I32(9, 0))});
        t.set_int("dtype", 1);
        t.set_int("k", 1);
        t.go();
        CHECK(t.type() == ElementType::Float32);
        CHECK(t.out<float>() == F32{0, 1, 0, 0, 0, 1, 0, 0, 0});
    }
    {
        OpTest t;   // k -2 and k far outside
        t.op("EyeLike", {t.input<float>({3, 2}, F32(6, 0))});
        t.set_int("k", -2);
        t.go();
        CHECK(t.out<float>() == F32{0, 0, 0, 0, 1, 0});
    }
    for (int64_t k : {INT64_MIN, INT64_MAX, (int64_t)3, (int64_t)-3}) {
        OpTest t;
        t.op("EyeLike", {t.input<float>({3, 3}, F32(9, 0))});
        t.set_int("dtype", 9);
        t.set_int("k", k);
        t.go();
        CHECK(t.type() == ElementType::Bool);
        CHECK(t.out<uint8_t>() == U8(9, 0));
    }
}

TEST_CASE("CastLike, EyeLike: bad input") {
    {
        OpTest t;
        t.op("CastLike", {t.input<float>({1}, {1.0f})});
        check_prepare_fails(t, Status::InvalidArgument, "expects 2 to 2 inputs, has 1");
    }
    {
        OpTest t;
        t.op("EyeLike", {t.input<float>({4}, F32(4, 0))});
        check_prepare_fails(t, Status::InvalidArgument, "input 0 has rank 1 (2 expected)");
    }
    {
        OpTest t;
        t.op("EyeLike", {t.input<float>({2, 2}, F32(4, 0))});
        t.set_int("dtype", 17);   // float8e4m3fn
        check_prepare_fails(t, Status::Unsupported, "dtype is ONNX data type 17");
    }
    {
        OpTest t;
        t.op("EyeLike", {t.input<float>({2, 2}, F32(4, 0))});
        t.set_float("k", 1.0f);
        check_prepare_fails(t, Status::InvalidArgument, "attribute 'k' must be an int");
    }
}

// ---- Trilu, Hardmax, CumSum ------------------------------------------------------------------------

TEST_CASE("Trilu: upper and lower, k, batches, any type") {
    const F32 x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};   // 3x4
    {
        OpTest t;
        t.op("Trilu", {t.input<float>({3, 4}, x)});
        t.go();
        CHECK(t.prepared.in_place);
        CHECK(t.out<float>() == F32{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12});
    }
    {
        OpTest t;
        t.op("Trilu", {t.input<float>({3, 4}, x), t.input<int64_t>({}, {-1})});
        t.set_int("upper", 0);
        t.go();
        CHECK(t.out<float>() == F32{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
    }
    {
        OpTest t;   // k past the matrix: everything or nothing
        t.op("Trilu", {t.input<int64_t>({2, 1, 2}, {1, 2, 3, 4}), t.input<int64_t>({1}, {INT64_MAX})});
        t.go();
        CHECK(t.out<int64_t>() == I64{0, 0, 0, 0});
    }
    {
        OpTest t;
        t.op("Trilu", {t.input<uint8_t>({2, 2, 2}, {1, 1, 1, 1, 1, 1, 1, 1}, ElementType::Bool), t.input<int64_t>({}, {INT64_MIN})});
        t.set_int("upper", 0);
        t.go();
        CHECK(t.out<uint8_t>() == U8{0, 0, 0, 0, 0, 0, 0, 0});
    }
    {
        OpTest t;
        t.op("Trilu", {t.input<int32_t>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}), t.input<int64_t>({}, {1})});
        t.go();
        CHECK(t.out<int32_t>() == I32{0, 2, 0, 0, 0, 6, 0, 0});
    }
}

TEST_CASE("an empty tensor is dense, so it can be an input (Trilu of a [3,0,5])") {
    Tensor t;
    const int64_t dims[] = {3, 0, 5};
    REQUIRE(t.allocate(ElementType::Int64, Span<const int64_t>(dims, 3)) == Status::Ok);
    CHECK(t.dense());
}

TEST_CASE("Hardmax: first maximum along axis; before opset 13 over a 2-D view") {
    const F32 x = {3, 1, 3, 0, 2, 5};   // 2x3
    {
        OpTest t;   // default axis -1
        t.opset = 13;
        t.op("Hardmax", {t.input<float>({2, 3}, x)});
        t.go();
        CHECK(t.out<float>() == F32{1, 0, 0, 0, 0, 1});
    }
    {
        OpTest t;
        t.opset = 13;
        t.op("Hardmax", {t.input<float>({2, 3}, x)});
        t.set_int("axis", 0);
        t.go();
        CHECK(t.out<float>() == F32{1, 0, 0, 0, 1, 1});
    }
    {
        OpTest t;   // opset 11, axis 0: one row of 6
        t.opset = 11;
        t.op("Hardmax", {t.input<float>({2, 3}, x)});
        t.set_int("axis", 0);
        t.go();
        CHECK(t.out<float>() == F32{0, 0, 0, 0, 0, 1});
    }
    {
        OpTest t;   // opset 11 default axis 1 on rank 3: rows of 2x2
        t.opset = 11;
        t.op("Hardmax", {t.input<float>({2, 2, 2}, {1, 4, 2, 3, 8, 1, 2, 9})});
        t.go();
        CHECK(t.out<float>() == F32{0, 1, 0, 0, 0, 0, 0, 1});
    }
}

TEST_CASE("CumSum: exclusive, reverse, axis from an input, int types") {
    {
        OpTest t;
        t.op("CumSum", {t.input<float>({5}, {1, 2, 3, 4, 5}), t.constant<int32_t>({}, {0})});
        t.go();
        CHECK(t.out<float>() == F32{1, 3, 6, 10, 15});
    }
    {
        OpTest t;
        t.op("CumSum", {t.input<float>({5}, {1, 2, 3, 4, 5}), t.input<int64_t>({}, {0})});
        t.set_int("exclusive", 1);
        t.set_int("reverse", 1);
        t.go();
        CHECK(t.out<float>() == F32{14, 12, 9, 5, 0});
    }
    {
        OpTest t;
        t.op("CumSum", {t.input<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6}), t.input<int64_t>({1}, {-1})});
        t.set_int("exclusive", 1);
        t.go();
        CHECK(t.out<int32_t>() == I32{0, 1, 3, 0, 4, 9});
    }
    {
        OpTest t;
        t.op("CumSum", {t.input<int64_t>({2, 3}, {1, 2, 3, INT64_MAX, 5, 6}), t.input<int32_t>({}, {0})});
        t.set_int("reverse", 1);
        t.go();
        CHECK(t.out<int64_t>() == I64{INT64_MIN, 7, 9, INT64_MAX, 5, 6});   // wraps
    }
}

TEST_CASE("Trilu, Hardmax, CumSum: bad input") {
    {
        OpTest t;
        t.op("Trilu", {t.input<float>({3}, {1, 2, 3})});
        check_prepare_fails(t, Status::InvalidArgument, "input 0 has rank 1 (at least 2 expected)");
    }
    {
        OpTest t;
        t.op("Trilu", {t.input<float>({2, 2}, {1, 2, 3, 4}), t.input<int64_t>({2}, {1, 2})});
        check_prepare_fails(t, Status::InvalidArgument, "input 1 (k) must be one int64");
    }
    {
        OpTest t;
        t.op("Trilu", {t.input<float>({2, 2}, {1, 2, 3, 4}), t.input<int32_t>({}, {1})});
        check_prepare_fails(t, Status::InvalidArgument, "input 1 (k) must be one int64");
    }
    {
        OpTest t;
        t.op("Trilu", {t.input<float>({2, 2}, {1, 2, 3, 4})});
        t.set_string("upper", "yes");
        check_prepare_fails(t, Status::InvalidArgument, "attribute 'upper' must be an int");
    }
    {
        OpTest t;
        t.opset = 13;
        t.op("Hardmax", {t.input<float>({2, 3}, F32(6, 0))});
        t.set_int("axis", 2);
        check_prepare_fails(t, Status::InvalidArgument, "axis 2 out of range for rank 2");
    }
    {
        OpTest t;   // before 13 the rank itself is an axis, one more is not
        t.opset = 11;
        t.op("Hardmax", {t.input<float>({2, 3}, F32(6, 0))});
        t.set_int("axis", 3);
        check_prepare_fails(t, Status::InvalidArgument, "axis 3 out of range for rank 2");
    }
    {
        OpTest t;
        t.op("Hardmax", {t.input<int64_t>({2}, {1, 2})});
        check_prepare_fails(t, Status::Unsupported, "input 0 is i64 (float32 expected)");
    }
    {
        OpTest t;
        t.op("CumSum", {t.input<uint8_t>({2}, {1, 2}), t.constant<int64_t>({}, {0})});
        check_prepare_fails(t, Status::Unsupported, "input 0 is u8 (float32, int32 or int64 expected)");
    }
    {
        OpTest t;
        t.op("CumSum", {t.input<float>({2}, {1, 2}), t.constant<int64_t>({}, {1})});
        check_prepare_fails(t, Status::InvalidArgument, "axis 1 out of range for rank 1");
    }
    {
        OpTest t;
        t.op("CumSum", {t.input<float>({2}, {1, 2}), t.constant<float>({}, {0})});
        check_prepare_fails(t, Status::InvalidArgument, "input 1 (axis) must be one int32 or int64");
    }
    {
        OpTest t;
        t.op("CumSum", {t.input<float>({}, {1}), t.constant<int64_t>({}, {0})});
        check_prepare_fails(t, Status::InvalidArgument, "input 0 is a scalar");
    }
    {
        OpTest t;   // an axis known only at run time is checked there
        t.op("CumSum", {t.input<float>({2}, {1, 2}), t.input<int64_t>({}, {-2})});
        REQUIRE(t.prepare() == Status::Ok);
        CHECK(t.run() == Status::InvalidArgument);
        CHECK(std::string(t.run_error) == "CumSum 'node2': axis -2 out of range for rank 1");
    }
}

// ---- through compile_model -----------------------------------------------------------------------

TEST_CASE("math ops compile and run on CPU, TEMPLATE and HETERO alike, infer() allocating nothing") {
    // y0 = ReduceLogSumExp(Sin(x), axes 1) uses scratch; y1 = CumSum(Hardmax(x), axis 0);
    // y2 = Trilu(BitwiseXor(CastLike(x, int32 k), k)) with k a constant
    Model m;
    NodeId x, k, axis, sin, lse, hardmax, cumsum, cast, bxor, trilu;
    REQUIRE(m.add_input("x", make_desc(ElementType::Float32, {3, 4}), &x) == Status::Ok);
    const int32_t kv[] = {1, 2, 4, 8};
    REQUIRE(m.add_constant("k", make_desc(ElementType::Int32, {4}), kv, &k) == Status::Ok);
    const int64_t axis_value = 0;
    REQUIRE(m.add_constant("axis", make_desc(ElementType::Int64, {}), &axis_value, &axis) == Status::Ok);
    InputRef in_x[] = {InputRef::by_id(x)};
    REQUIRE(m.add_node("Sin", "sin", in_x, 1, &sin) == Status::Ok);
    InputRef in_sin[] = {InputRef::by_id(sin)};
    REQUIRE(m.add_node("ReduceLogSumExp", "lse", in_sin, 1, &lse) == Status::Ok);
    const int64_t axes[] = {1};
    REQUIRE(m.set_ints(lse, "axes", Span<const int64_t>(axes, 1)) == Status::Ok);
    REQUIRE(m.add_node("Hardmax", "hardmax", in_x, 1, &hardmax) == Status::Ok);
    InputRef in_cumsum[] = {InputRef::by_id(hardmax), InputRef::by_id(axis)};
    REQUIRE(m.add_node("CumSum", "cumsum", in_cumsum, 1, &cumsum) == Status::Ok);
    InputRef in_cast[] = {InputRef::by_id(x), InputRef::by_id(k)};
    REQUIRE(m.add_node("CastLike", "cast", in_cast, 1, &cast) == Status::Ok);
    InputRef in_xor[] = {InputRef::by_id(cast), InputRef::by_id(k)};
    REQUIRE(m.add_node("BitwiseXor", "xor", in_xor, 1, &bxor) == Status::Ok);
    InputRef in_trilu[] = {InputRef::by_id(bxor)};
    REQUIRE(m.add_node("Trilu", "trilu", in_trilu, 1, &trilu) == Status::Ok);
    REQUIRE(m.add_output("y0", InputRef::by_id(lse)) == Status::Ok);
    REQUIRE(m.add_output("y1", InputRef::by_id(cumsum)) == Status::Ok);
    REQUIRE(m.add_output("y2", InputRef::by_id(trilu)) == Status::Ok);
    REQUIRE(m.finalize() == Status::Ok);

    const float xv[12] = {0, 1, 2, 3, 7, 6, 5, 4, -1, -2, 9, -3};
    F32 want0;
    for (int r = 0; r < 3; ++r) {
        float sum = 0;
        for (int c = 0; c < 4; ++c) sum += std::exp(std::sin(xv[r * 4 + c]));
        want0.push_back(std::log(sum));
    }
    const F32 want1 = {0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 1, 1};   // one-hot rows 3, 0, 2 summed down
    const I32 want2 = {0 xor 1, 1 xor 2, 2 xor 4, 3 xor 8, 0, 6 xor 2, 5 xor 4, 4 xor 8, 0, 0, 9 xor 4, -3 xor 8};   // BitwiseXor
    Core core;
    for (const char* device : {"CPU", "TEMPLATE", "HETERO:TEMPLATE,CPU"}) {
        INFO(std::string(device));
        CompiledModel compiled;
        bool hetero = std::string(device).rfind("HETERO", 0) == 0;
        ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", hetero ? "Sin,CumSum,BitwiseXor" : "*"}};
        Status s = core.compile_model(m, device, Span<const ConfigEntry>(config, 1), &compiled);
        INFO(std::string(core.last_error()));
        REQUIRE(s == Status::Ok);
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        std::memcpy(request.input(0).data(), xv, sizeof xv);
        uint64_t before = tessel_test::allocation_count();
        for (int i = 0; i < 3; ++i) REQUIRE(request.infer() == Status::Ok);
        CHECK(tessel_test::allocation_count() == before);
        const float* y0 = request.output(0).data_as<float>();
        check_close(F32(y0, y0 + 3), want0);
        const float* y1 = request.output(1).data_as<float>();
        CHECK(F32(y1, y1 + 12) == want1);
        REQUIRE(request.output(2).type() == ElementType::Int32);
        const int32_t* y2 = request.output(2).data_as<int32_t>();
        CHECK(I32(y2, y2 + 12) == want2);
    }
}

TEST_CASE("math ops: random malformed nodes fail with a Status, never crash") {
    // As the tensor ops' case: random op, opset, input types, shapes, values (known or not,
    // absent), output counts and attributes; a prepare that succeeds must give allocatable
    // outputs and a run that returns.
    const char* ops[] = {"Sin", "Acosh", "ThresholdedRelu", "Shrink", "Swish", "IsInf", "IsNaN", "ReduceSumSquare",
                         "ReduceL1", "ReduceLogSum", "ReduceLogSumExp", "BitwiseAnd", "BitwiseNot", "BitShift", "Size",
                         "CastLike", "EyeLike", "Trilu", "Hardmax", "CumSum"};
    const char* int_names[] = {"axis", "exclusive", "reverse", "upper", "k", "dtype", "keepdims", "noop_with_empty_axes",
                               "detect_positive", "detect_negative"};
    MalformedPicker picker(20261129);
    auto pick = [&](uint32_t n) { return picker.pick(n); };
    uint32_t prepared = 0, ran = 0;
    for (int iteration = 0; iteration < 10000; ++iteration) {
        OpTest t;
        t.opset = 7 + pick(18);
        const char* op = ops[pick(sizeof ops / sizeof ops[0])];
        uint32_t num_inputs = pick(4);
        std::vector<InputRef> inputs;
        for (uint32_t i = 0; i < num_inputs; ++i) {
            if (pick(10) == 0) { inputs.push_back(t.model.absent()); continue; }
            ElementType type = i == 0 && pick(2) ? ElementType::Float32 : i > 0 && pick(2) ? ElementType::Int64 : picker.any_type();
            inputs.push_back(picker.input(t, picker.any_shape(), type));
        }
        t.op(op, inputs, 1 + (pick(4) == 0 ? pick(3) : 0));
        for (const char* name : int_names) if (pick(5) == 0) t.set_int(name, pick(2) ? picker.special() : (int64_t)pick(12));
        if (pick(5) == 0) {
            std::vector<int64_t> v(pick(4));
            for (int64_t& x : v) x = pick(2) ? picker.special() : (int64_t)pick(4) - 1;
            t.set_ints("axes", v);
        }
        if (pick(5) == 0) t.set_string("direction", pick(2) ? "LEFT" : pick(2) ? "RIGHT" : "UP");
        if (pick(5) == 0) t.set_float(pick(2) ? "alpha" : "lambd", pick(2) ? NAN : -1.5f);
        if (pick(8) == 0) t.set_float("k", 1.0f);
        INFO(std::string(op) << " opset " << t.opset << " iteration " << iteration);
        t.prepare_and_run_any(&prepared, &ran);
    }
    CHECK(prepared > 600);   // the generator reaches the kernels' bodies, not only their checks
    CHECK(ran > 500);
}
