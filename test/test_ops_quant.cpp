// runtime.h quantization and misc kernels (QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv, Compress,
// BitCast, Celu, CumProd, Det, Einsum, TfIdfVectorizer): each kernel is driven through
// prepare/run on a one-node model and checked against values worked out by hand (rounding
// ties, saturation, per-axis and blocked parameters), and each kind of bad input against its
// exact Status and a message naming the node. A few run through a Core on CPU and TEMPLATE.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "alloc_counter.h"
#include "runtime.h"
#include "test_helpers.h"
#include "op_test.h"

using namespace tessel;

namespace {

using test::OpTest;
using test::MalformedPicker;
using test::Shape;
using I64 = std::vector<int64_t>;
using I32 = std::vector<int32_t>;
using I8 = std::vector<int8_t>;
using U8 = std::vector<uint8_t>;
using U16 = std::vector<uint16_t>;
using F32 = std::vector<float>;

void check_close(const std::vector<float>& got, const std::vector<float>& want, double rtol = 1e-5, double atol = 1e-6) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i << ": " << got[i] << ", expected " << want[i]);
        if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
        else CHECK(std::fabs((double)got[i] - want[i]) <= atol + rtol * std::fabs((double)want[i]));
    }
}

// float16 bit patterns used below
constexpr uint16_t kHalfHalf = 0x3800, kHalfOne = 0x3C00, kHalfOneAndHalf = 0x3E00, kHalfTwo = 0x4000,
                   kHalfThree = 0x4200, kHalfMinusOneAndHalf = 0xBE00;

}  // namespace

TEST_CASE("quant ops: every op of the table is found") {
    const char* ours[] = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearMatMul",
                          "ConvInteger", "QLinearConv", "Compress", "BitCast", "Celu", "CumProd", "Det", "Einsum",
                          "TfIdfVectorizer"};
    for (const char* op : ours) {
        INFO(std::string(op));
        CHECK(find_builtin_kernel(op) != nullptr);
    }
}

// ---- QuantizeLinear ---------------------------------------------------------------------------

TEST_CASE("QuantizeLinear: per tensor, ties to even before the zero point, saturation, NaN") {
    {
        OpTest t;   // ties: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0, -1.5 -> -2, -2.5 -> -2
        t.opset = 13;
        t.op("QuantizeLinear", {t.input<float>({8}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 1000.0f, -1000.0f}),
                                t.constant<float>({}, {1.0f}), t.constant<int8_t>({}, {0})});
        t.go();
        CHECK(t.type() == ElementType::Int8);
        CHECK(t.shape() == Shape{8});
        CHECK(t.out<int8_t>() == I8{0, 2, 2, 0, -2, -2, 127, -128});
    }
    {
        OpTest t;   // the zero point (odd) is added after rounding: 0.5 -> 0 + 1, not round(1.5)
        t.op("QuantizeLinear", {t.input<float>({4}, {0.5f, 1.5f, 255.0f, NAN}), t.input<float>({1}, {1.0f}),
                                t.input<uint8_t>({1}, {1})});
        t.go();
        CHECK(t.out<uint8_t>() == U8{1, 3, 255, 1});   // NaN gives the zero point
    }
    {
        OpTest t;   // the ONNX example: scale 2, zero point 128
        t.op("QuantizeLinear", {t.input<float>({6}, {0, 2, 3, 1000, -254, -1000}), t.input<float>({}, {2.0f}),
                                t.input<uint8_t>({}, {128})});
        t.go();
        CHECK(t.out<uint8_t>() == U8{128, 129, 130, 255, 1, 0});
    }
    {
        OpTest t;   // no zero point: uint8 with zero point 0
        t.op("QuantizeLinear", {t.input<float>({3}, {-1.0f, 3.0f, 7.0f}), t.input<float>({}, {2.0f})});
        t.go();
        CHECK(t.type() == ElementType::UInt8);
        CHECK(t.out<uint8_t>() == U8{0, 2, 4});   // -0.5 -> 0, 1.5 -> 2, 3.5 -> 4
    }
    {
        OpTest t;   // output_dtype (opset 21) without a zero point
        t.opset = 21;
        t.op("QuantizeLinear", {t.input<float>({2}, {-300.0f, 4.0f}), t.input<float>({}, {1.0f})});
        t.set_int("output_dtype", 3);
        t.go();
        CHECK(t.type() == ElementType::Int8);
        CHECK(t.out<int8_t>() == I8{-128, 4});
    }
    {
        OpTest t;   // float16 x and scale: the division in float16
        t.op("QuantizeLinear", {t.input<uint16_t>({2}, {kHalfThree, kHalfOne}), t.input<uint16_t>({}, {kHalfTwo}),
                                t.input<int8_t>({}, {0})});
        t.go();
        CHECK(t.out<int8_t>() == I8{2, 0});   // 1.5 -> 2, 0.5 -> 0
    }
    {
        OpTest t;   // int32 x
        t.op("QuantizeLinear", {t.input<int32_t>({3}, {5, -5, 100000}), t.input<float>({}, {2.0f}), t.input<int8_t>({}, {0})});
        t.go();
        CHECK(t.out<int8_t>() == I8{2, -2, 127});
    }
    {
        OpTest t;   // int16 (opset 21): ties to even, saturation at the 16-bit range
        t.opset = 21;
        t.op("QuantizeLinear", {t.input<float>({5}, {2.5f, -2.5f, 1e6f, -1e6f, 300.0f}), t.input<float>({}, {1.0f}),
                                t.input<int16_t>({}, {-3})});
        t.go();
        CHECK(t.type() == ElementType::Int16);
        CHECK(t.out<int16_t>() == std::vector<int16_t>{-1, -5, 32767, -32768, 297});
    }
    {
        OpTest t;   // uint16 by output_dtype 4, without a zero point
        t.opset = 21;
        t.op("QuantizeLinear", {t.input<float>({3}, {-1.0f, 1000.5f, 1e9f}), t.input<float>({}, {0.5f})});
        t.set_int("output_dtype", 4);
        t.go();
        CHECK(t.type() == ElementType::UInt16);
        CHECK(t.out<uint16_t>() == U16{0, 2001, 65535});
    }
}

TEST_CASE("QuantizeLinear: per axis (opset 13) and blocked (opset 21)") {
    {
        OpTest t;   // [2, 3] along axis 1: scales 1, 2, 4 and zero points 0, 1, 2
        t.opset = 13;
        t.op("QuantizeLinear", {t.input<float>({2, 3}, {1, 2, 4, -1, 6, 10}), t.constant<float>({3}, {1, 2, 4}),
                                t.constant<uint8_t>({3}, {0, 1, 2})});
        t.go();
        CHECK(t.out<uint8_t>() == U8{1, 2, 3, 0, 4, 4});   // 10 / 4 = 2.5 -> 2, + 2
    }
    {
        OpTest t;   // axis 0, negative
        t.opset = 13;
        t.op("QuantizeLinear", {t.input<float>({2, 2}, {3, 3, 3, 3}), t.input<float>({2}, {1, 3}), t.input<int8_t>({2}, {0, -1})});
        t.set_int("axis", -2);
        t.go();
        CHECK(t.out<int8_t>() == I8{3, 3, 0, 0});
    }
    {
        OpTest t;   // blocks of 2 along axis 1 of [2, 5]: 3 blocks, the last one short
        t.opset = 21;
        t.op("QuantizeLinear", {t.input<float>({2, 5}, {2, 4, 6, 8, 10, 1, 2, 3, 4, 5}),
                                t.input<float>({2, 3}, {2, 2, 10, 1, 1, 5}), t.input<uint8_t>({2, 3}, {0, 1, 0, 0, 0, 10})});
        t.set_int("axis", 1);
        t.set_int("block_size", 2);
        t.go();
        CHECK(t.out<uint8_t>() == U8{1, 2, 4, 5, 1, 1, 2, 3, 4, 11});
    }
    {
        OpTest t;   // blocks along axis 0
        t.opset = 21;
        t.op("QuantizeLinear", {t.input<float>({4, 1}, {4, 4, 4, 4}), t.input<float>({2, 1}, {1, 4}), t.input<int8_t>({2, 1}, {0, 0})});
        t.set_int("axis", 0);
        t.set_int("block_size", 2);
        t.go();
        CHECK(t.out<int8_t>() == I8{4, 4, 1, 1});
    }
}

TEST_CASE("QuantizeLinear: bad input") {
    auto node = [](OpTest& t, ElementType x, ElementType scale, ElementType zero, const Shape& zero_shape = {}) {
        std::vector<unsigned char> bytes(16, 0);
        t.op("QuantizeLinear", {t.input<unsigned char>({2}, bytes, x), t.input<unsigned char>({}, bytes, scale),
                                t.input<unsigned char>(zero_shape, bytes, zero)});
    };
    { OpTest t; node(t, ElementType::Int8, ElementType::Float32, ElementType::UInt8); t.fails(Status::Unsupported); }
    { OpTest t; node(t, ElementType::Float32, ElementType::Int32, ElementType::UInt8); t.fails(Status::Unsupported); }
    { OpTest t; node(t, ElementType::Float32, ElementType::Float32, ElementType::Float32); t.fails(Status::Unsupported); }
    { OpTest t; node(t, ElementType::Float32, ElementType::Float32, ElementType::Int64); t.fails(Status::Unsupported); }
    { OpTest t; node(t, ElementType::Float32, ElementType::Float32, ElementType::UInt32); t.fails(Status::Unsupported); }
    { OpTest t; node(t, ElementType::Float32, ElementType::Float32, ElementType::UInt8, {2}); t.fails(Status::InvalidArgument); }
    {
        OpTest t;   // per axis before opset 13
        t.opset = 10;
        t.op("QuantizeLinear", {t.input<float>({2, 2}, F32(4, 1)), t.input<float>({2}, {1, 1}), t.input<uint8_t>({2}, {0, 0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // per-axis scale of the wrong length
        t.opset = 13;
        t.op("QuantizeLinear", {t.input<float>({2, 3}, F32(6, 1)), t.input<float>({2}, {1, 1}), t.input<uint8_t>({2}, {0, 0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // axis out of range
        t.opset = 13;
        t.op("QuantizeLinear", {t.input<float>({2, 3}, F32(6, 1)), t.input<float>({3}, {1, 1, 1})});
        t.set_int("axis", 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // a blocked scale whose blocked dim is not ceil(5 / 2)
        t.opset = 21;
        t.op("QuantizeLinear", {t.input<float>({2, 5}, F32(10, 1)), t.input<float>({2, 2}, F32(4, 1))});
        t.set_int("block_size", 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.opset = 21;
        t.op("QuantizeLinear", {t.input<float>({2, 4}, F32(8, 1)), t.input<float>({2, 2}, F32(4, 1))});
        t.set_int("block_size", -2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // output_dtype differs from the zero point's type
        t.opset = 21;
        t.op("QuantizeLinear", {t.input<float>({2}, F32(2, 1)), t.input<float>({}, {1}), t.input<uint8_t>({}, {0})});
        t.set_int("output_dtype", 3);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // float8 output
        t.opset = 21;
        t.op("QuantizeLinear", {t.input<float>({2}, F32(2, 1)), t.input<float>({}, {1})});
        t.set_int("output_dtype", 17);
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // bfloat16 precision
        t.opset = 23;
        t.op("QuantizeLinear", {t.input<float>({2}, F32(2, 1)), t.input<float>({}, {1})});
        t.set_int("precision", 16);
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // a missing scale
        t.op("QuantizeLinear", {t.input<float>({2}, F32(2, 1))});
        t.fails(Status::InvalidArgument);
    }
}

// ---- DequantizeLinear -------------------------------------------------------------------------

TEST_CASE("DequantizeLinear: per tensor, per axis, blocked, int32, float16") {
    {
        OpTest t;
        t.op("DequantizeLinear", {t.input<uint8_t>({4}, {0, 3, 128, 255}), t.input<float>({}, {2.0f}), t.input<uint8_t>({}, {128})});
        t.go();
        CHECK(t.type() == ElementType::Float32);
        CHECK(t.out<float>() == F32{-256, -250, 0, 254});
    }
    {
        OpTest t;   // int8 along axis 1 of [1, 3, 2]
        t.opset = 13;
        t.op("DequantizeLinear", {t.input<int8_t>({1, 3, 2}, {-128, 127, 1, 2, 10, -10}), t.input<float>({3}, {1, 0.5f, 2}),
                                  t.input<int8_t>({3}, {0, 2, -10})});
        t.go();
        CHECK(t.out<float>() == F32{-128, 127, -0.5f, 0, 40, 0});
    }
    {
        OpTest t;   // int32 without a zero point
        t.op("DequantizeLinear", {t.input<int32_t>({2}, {-7, 1 << 20}), t.input<float>({}, {0.5f})});
        t.go();
        CHECK(t.out<float>() == F32{-3.5f, 524288.0f});
    }
    {
        OpTest t;   // int16 and uint16 (opset 21) with zero points at their ends of the range
        t.opset = 21;
        t.op("DequantizeLinear", {t.input<int16_t>({3}, {-32768, 0, 32767}), t.input<float>({}, {0.25f}),
                                  t.input<int16_t>({}, {-32768})});
        t.go();
        CHECK(t.out<float>() == F32{0.0f, 8192.0f, 16383.75f});
        OpTest u;
        u.opset = 21;
        u.op("DequantizeLinear", {u.input<uint16_t>({2}, {0, 65535}, ElementType::UInt16), u.input<float>({}, {2.0f}),
                                  u.input<uint16_t>({}, {65535}, ElementType::UInt16)});
        u.go();
        CHECK(u.out<float>() == F32{-131070.0f, 0.0f});
    }
    {
        OpTest t;   // blocks of 2 along axis 0 of [3, 2]
        t.opset = 21;
        t.op("DequantizeLinear", {t.input<uint8_t>({3, 2}, {1, 2, 3, 4, 5, 6}), t.input<float>({2, 2}, {1, 10, 2, 20}),
                                  t.input<uint8_t>({2, 2}, {1, 0, 0, 1})});
        t.set_int("axis", 0);
        t.set_int("block_size", 2);
        t.go();
        CHECK(t.out<float>() == F32{0, 20, 2, 40, 10, 100});
    }
    {
        OpTest t;   // a float16 scale gives float16
        t.op("DequantizeLinear", {t.input<int8_t>({2}, {2, -3}), t.input<uint16_t>({}, {kHalfHalf})});
        t.go();
        CHECK(t.type() == ElementType::Float16);
        CHECK(t.out<uint16_t>() == U16{kHalfOne, kHalfMinusOneAndHalf});
    }
    {
        OpTest t;   // output_dtype float16 (opset 23) from a float scale
        t.opset = 23;
        t.op("DequantizeLinear", {t.input<uint8_t>({1}, {3}), t.input<float>({}, {0.5f})});
        t.set_int("output_dtype", 10);
        t.go();
        CHECK(t.type() == ElementType::Float16);
        CHECK(t.out<uint16_t>() == U16{kHalfOneAndHalf});
    }
}

TEST_CASE("DequantizeLinear: bad input") {
    {
        OpTest t;
        t.op("DequantizeLinear", {t.input<float>({2}, F32(2, 1)), t.input<float>({}, {1})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // zero point of another type
        t.op("DequantizeLinear", {t.input<uint8_t>({2}, {1, 2}), t.input<float>({}, {1}), t.input<int8_t>({}, {0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("DequantizeLinear", {t.input<uint8_t>({2}, {1, 2}), t.input<int32_t>({}, {1})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // an integer output_dtype
        t.opset = 23;
        t.op("DequantizeLinear", {t.input<uint8_t>({2}, {1, 2}), t.input<float>({}, {1})});
        t.set_int("output_dtype", 3);
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // scale [2] for axis 1 of [2, 3]
        t.opset = 13;
        t.op("DequantizeLinear", {t.input<uint8_t>({2, 3}, U8(6, 1)), t.input<float>({2}, {1, 1})});
        t.fails(Status::InvalidArgument);
    }
}

// ---- DynamicQuantizeLinear --------------------------------------------------------------------

TEST_CASE("DynamicQuantizeLinear: scale, zero point and values (the ONNX example), all zeros") {
    {
        OpTest t;
        t.op("DynamicQuantizeLinear", {t.input<float>({6}, {0, 2, -3, -2.5f, 1.34f, 0.5f})}, 3);
        t.go();
        CHECK(t.type(0) == ElementType::UInt8);
        CHECK(t.shape(1) == Shape{});
        check_close(t.out<float>(1), {5.0f / 255.0f});
        CHECK(t.out<uint8_t>(2) == U8{153});
        CHECK(t.out<uint8_t>(0) == U8{153, 255, 0, 26, 221, 179});
    }
    {
        OpTest t;   // max == min: scale 1 / 255
        t.op("DynamicQuantizeLinear", {t.input<float>({2}, {0, 0})}, 3);
        t.go();
        check_close(t.out<float>(1), {1.0f / 255.0f});
        CHECK(t.out<uint8_t>(2) == U8{0});
        CHECK(t.out<uint8_t>(0) == U8{0, 0});
    }
    {
        OpTest t;
        t.op("DynamicQuantizeLinear", {t.input<int8_t>({2}, {0, 1})}, 3);
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // one output
        t.op("DynamicQuantizeLinear", {t.input<float>({2}, {0, 1})}, 1);
        t.fails(Status::InvalidArgument);
    }
}

// ---- integer matmuls --------------------------------------------------------------------------

TEST_CASE("MatMulInteger: zero points per tensor, per row, per column; batches") {
    {
        OpTest t;   // (A - 1) B: [[0, 1], [2, 3]] x [[1, -1], [2, 0]]
        t.op("MatMulInteger", {t.input<uint8_t>({2, 2}, {1, 2, 3, 4}), t.input<int8_t>({2, 2}, {1, -1, 2, 0}),
                               t.input<uint8_t>({}, {1})});
        t.go();
        CHECK(t.type() == ElementType::Int32);
        CHECK(t.out<int32_t>() == I32{2, 0, 8, -2});
    }
    {
        OpTest t;   // per row of A (1, 2) and per column of B (0, -1)
        t.op("MatMulInteger", {t.input<uint8_t>({2, 2}, {1, 2, 3, 4}), t.input<int8_t>({2, 2}, {1, -1, 2, 0}),
                               t.input<uint8_t>({2}, {1, 2}), t.input<int8_t>({2}, {0, -1})});
        t.go();
        // A - zp = [[0, 1], [1, 2]], B - zp = [[1, 0], [2, 1]]
        CHECK(t.out<int32_t>() == I32{2, 1, 5, 2});
    }
    {
        OpTest t;   // batch [2, 1, 2] x [2, 1]: B broadcast over the batch
        t.op("MatMulInteger", {t.input<int8_t>({2, 1, 2}, {1, 2, -3, 4}), t.input<int8_t>({2, 1}, {5, 6})});
        t.go();
        CHECK(t.shape() == Shape{2, 1, 1});
        CHECK(t.out<int32_t>() == I32{17, 9});
    }
    {
        OpTest t;   // a vector times a matrix
        t.op("MatMulInteger", {t.input<uint8_t>({2}, {255, 255}), t.input<uint8_t>({2, 1}, {255, 255})});
        t.go();
        CHECK(t.shape() == Shape{1});
        CHECK(t.out<int32_t>() == I32{130050});
    }
}

TEST_CASE("MatMulInteger: bad input") {
    {
        OpTest t;
        t.op("MatMulInteger", {t.input<float>({2, 2}, F32(4, 1)), t.input<int8_t>({2, 2}, I8(4, 1))});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // zero point of another type than A
        t.op("MatMulInteger", {t.input<uint8_t>({2, 2}, U8(4, 1)), t.input<int8_t>({2, 2}, I8(4, 1)), t.input<int8_t>({}, {0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // a per-row zero point of the wrong length
        t.op("MatMulInteger", {t.input<uint8_t>({2, 2}, U8(4, 1)), t.input<int8_t>({2, 2}, I8(4, 1)), t.input<uint8_t>({3}, U8(3, 0))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // inner dims differ
        t.op("MatMulInteger", {t.input<uint8_t>({2, 3}, U8(6, 1)), t.input<int8_t>({2, 2}, I8(4, 1))});
        t.fails(Status::InvalidArgument);
    }
}

TEST_CASE("QLinearMatMul: requantization ties to even, saturation, float16 scales, per-row scales") {
    auto make = [](OpTest& t, float y_scale, uint8_t y_zero) {
        // a = [2, 4] * 0.5 = [1, 2]; b = [2, 4]^T * 0.5 = [1, 2]^T: the real product is 5
        t.op("QLinearMatMul", {t.input<uint8_t>({1, 2}, {2, 4}), t.input<float>({}, {0.5f}), t.input<uint8_t>({}, {0}),
                               t.input<uint8_t>({2, 1}, {2, 4}), t.input<float>({}, {0.5f}), t.input<uint8_t>({}, {0}),
                               t.input<float>({}, {y_scale}), t.input<uint8_t>({}, {y_zero})});
    };
    { OpTest t; make(t, 2.0f, 10); t.go(); CHECK(t.out<uint8_t>() == U8{12}); }     // 2.5 -> 2
    { OpTest t; make(t, 1.0f / 3.0f, 0); t.go(); CHECK(t.out<uint8_t>() == U8{15}); }
    { OpTest t; make(t, 0.01f, 0); t.go(); CHECK(t.out<uint8_t>() == U8{255}); }    // 500 saturates
    {
        OpTest t;   // int8, zero points, float16 scales: (3 - 1) * (5 - 1) * 1 * 1 / 2 = 4, + (-5)
        t.op("QLinearMatMul", {t.input<int8_t>({1, 1}, {3}), t.input<uint16_t>({}, {kHalfOne}), t.input<int8_t>({}, {1}),
                               t.input<int8_t>({1, 1}, {5}), t.input<uint16_t>({}, {kHalfOne}), t.input<int8_t>({}, {1}),
                               t.input<uint16_t>({}, {kHalfTwo}), t.input<int8_t>({}, {-5})});
        t.go();
        CHECK(t.type() == ElementType::Int8);
        CHECK(t.out<int8_t>() == I8{-1});
    }
    {
        OpTest t;   // per-row a scale (rows scaled 1 and 2), per-column b zero point
        t.op("QLinearMatMul", {t.input<uint8_t>({2, 1}, {3, 3}), t.input<float>({2}, {1, 2}), t.input<uint8_t>({2}, {0, 0}),
                               t.input<uint8_t>({1, 2}, {2, 3}), t.input<float>({2}, {1, 1}), t.input<uint8_t>({2}, {1, 0}),
                               t.input<float>({}, {1}), t.input<uint8_t>({}, {0})});
        t.go();
        CHECK(t.out<uint8_t>() == U8{3, 9, 6, 18});
    }
    {
        OpTest t;   // scales of different types
        t.op("QLinearMatMul", {t.input<uint8_t>({1, 1}, {3}), t.input<uint16_t>({}, {kHalfOne}), t.input<uint8_t>({}, {1}),
                               t.input<uint8_t>({1, 1}, {5}), t.input<float>({}, {1}), t.input<uint8_t>({}, {1}),
                               t.input<float>({}, {1}), t.input<uint8_t>({}, {0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // an integer scale
        t.op("QLinearMatMul", {t.input<uint8_t>({1, 1}, {3}), t.input<int32_t>({}, {1}), t.input<uint8_t>({}, {1}),
                               t.input<uint8_t>({1, 1}, {5}), t.input<int32_t>({}, {1}), t.input<uint8_t>({}, {1}),
                               t.input<int32_t>({}, {1}), t.input<uint8_t>({}, {0})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // 7 inputs
        t.op("QLinearMatMul", {t.input<uint8_t>({1, 1}, {3}), t.input<float>({}, {1}), t.input<uint8_t>({}, {1}),
                               t.input<uint8_t>({1, 1}, {5}), t.input<float>({}, {1}), t.input<uint8_t>({}, {1}),
                               t.input<float>({}, {1})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // a per-column b scale of the wrong length
        t.op("QLinearMatMul", {t.input<uint8_t>({1, 1}, {3}), t.input<float>({}, {1}), t.input<uint8_t>({}, {1}),
                               t.input<uint8_t>({1, 2}, {5, 5}), t.input<float>({3}, {1, 1, 1}), t.input<uint8_t>({}, {1}),
                               t.input<float>({}, {1}), t.input<uint8_t>({}, {0})});
        t.fails(Status::InvalidArgument);
    }
}

// ---- integer convs ----------------------------------------------------------------------------

TEST_CASE("ConvInteger: zero points, padding counts zero, per-map weight zero points, groups") {
    {
        OpTest t;   // x - 1 = 0..8 in 3x3, a 2x2 window of ones
        t.op("ConvInteger", {t.input<uint8_t>({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), t.input<uint8_t>({1, 1, 2, 2}, U8(4, 1)),
                             t.input<uint8_t>({}, {1})});
        t.go();
        CHECK(t.type() == ElementType::Int32);
        CHECK(t.shape() == Shape{1, 1, 2, 2});
        CHECK(t.out<int32_t>() == I32{8, 12, 20, 24});
    }
    {
        OpTest t;   // padded 1: the corner window sees only x[0][0] - 1 = 0 and x[0][1] - 1 ...
        t.op("ConvInteger", {t.input<uint8_t>({1, 1, 2, 2}, {11, 12, 13, 14}), t.input<uint8_t>({1, 1, 2, 2}, U8(4, 1)),
                             t.input<uint8_t>({}, {10})});
        t.set_ints("pads", {1, 1, 1, 1});
        t.go();
        CHECK(t.shape() == Shape{1, 1, 3, 3});
        CHECK(t.out<int32_t>() == I32{1, 3, 2, 4, 10, 6, 3, 7, 4});
    }
    {
        OpTest t;   // two maps, weight zero points 1 and 2 per map; int8
        t.op("ConvInteger", {t.input<int8_t>({1, 1, 1, 2}, {3, -4}), t.input<int8_t>({2, 1, 1, 1}, {2, 3}), t.absent(),
                             t.input<int8_t>({2}, {1, 2})});
        t.go();
        CHECK(t.out<int32_t>() == I32{3, -4, 3, -4});
    }
    {
        OpTest t;   // two groups of one channel
        t.op("ConvInteger", {t.input<uint8_t>({1, 2, 1, 1}, {3, 5}), t.input<uint8_t>({2, 1, 1, 1}, {2, 7})});
        t.set_int("group", 2);
        t.go();
        CHECK(t.out<int32_t>() == I32{6, 35});
    }
}

TEST_CASE("ConvInteger and QLinearConv: bad input") {
    {
        OpTest t;
        t.op("ConvInteger", {t.input<float>({1, 1, 2, 2}, F32(4, 1)), t.input<uint8_t>({1, 1, 1, 1}, {1})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // rank 2
        t.op("ConvInteger", {t.input<uint8_t>({2, 2}, U8(4, 1)), t.input<uint8_t>({1, 1}, {1})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // x's zero point per channel
        t.op("ConvInteger", {t.input<uint8_t>({1, 2, 1, 1}, U8(2, 1)), t.input<uint8_t>({1, 2, 1, 1}, {1, 1}),
                             t.input<uint8_t>({2}, {0, 0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // weight zero point of 3 for 2 maps
        t.op("ConvInteger", {t.input<uint8_t>({1, 1, 1, 1}, {1}), t.input<uint8_t>({2, 1, 1, 1}, {1, 1}), t.absent(),
                             t.input<uint8_t>({3}, {0, 0, 0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // channels do not match
        t.op("ConvInteger", {t.input<uint8_t>({1, 3, 1, 1}, U8(3, 1)), t.input<uint8_t>({1, 2, 1, 1}, {1, 1})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // group 0
        t.op("ConvInteger", {t.input<uint8_t>({1, 1, 1, 1}, {1}), t.input<uint8_t>({1, 1, 1, 1}, {1})});
        t.set_int("group", 0);
        t.fails(Status::InvalidArgument);
    }
    auto qlinear = [](OpTest& t, const Shape& x_scale, const Shape& bias, ElementType bias_type) {
        std::vector<unsigned char> bytes(64, 0);
        t.op("QLinearConv", {t.input<uint8_t>({1, 1, 1, 1}, {1}), t.input<float>(x_scale, F32(2, 1)), t.input<uint8_t>({}, {0}),
                             t.input<uint8_t>({1, 1, 1, 1}, {1}), t.input<float>({}, {1}), t.input<uint8_t>({}, {0}),
                             t.input<float>({}, {1}), t.input<uint8_t>({}, {0}), t.input<unsigned char>(bias, bytes, bias_type)});
    };
    { OpTest t; qlinear(t, {2}, {1}, ElementType::Int32); t.fails(Status::InvalidArgument); }   // x_scale per channel
    { OpTest t; qlinear(t, {}, {1}, ElementType::Float32); t.fails(Status::InvalidArgument); }  // float bias
    { OpTest t; qlinear(t, {}, {2}, ElementType::Int32); t.fails(Status::InvalidArgument); }    // bias of 2 for 1 map
}

TEST_CASE("QLinearConv: requantization ties to even, int32 bias, per-map weight scales") {
    {
        OpTest t;   // 1x1 kernel 3, x scale 0.5: x * 3 * 0.5; 1.5 -> 2, 4.5 -> 4, 7.5 -> 8
        t.op("QLinearConv", {t.input<uint8_t>({1, 1, 1, 4}, {1, 3, 5, 200}), t.input<float>({}, {0.5f}), t.input<uint8_t>({}, {0}),
                             t.input<uint8_t>({1, 1, 1, 1}, {3}), t.input<float>({}, {1.0f}), t.input<uint8_t>({}, {0}),
                             t.input<float>({}, {1.0f}), t.input<uint8_t>({}, {0})});
        t.go();
        CHECK(t.type() == ElementType::UInt8);
        CHECK(t.out<uint8_t>() == U8{2, 4, 8, 255});
    }
    {
        OpTest t;   // bias 2 added to the accumulator, then * 0.5; y zero point 1
        t.op("QLinearConv", {t.input<uint8_t>({1, 1, 1, 2}, {2, 4}), t.input<float>({}, {0.5f}), t.input<uint8_t>({}, {0}),
                             t.input<uint8_t>({1, 1, 1, 1}, {3}), t.input<float>({}, {1.0f}), t.input<uint8_t>({}, {0}),
                             t.input<float>({}, {1.0f}), t.input<uint8_t>({}, {1}), t.input<int32_t>({1}, {2})});
        t.go();
        CHECK(t.out<uint8_t>() == U8{5, 8});
    }
    {
        OpTest t;   // int8, two maps with weight scales 1 and 2, weight zero points 0 and 1
        t.op("QLinearConv", {t.input<int8_t>({1, 1, 1, 1}, {-3}), t.input<float>({}, {1.0f}), t.input<int8_t>({}, {-1}),
                             t.input<int8_t>({2, 1, 1, 1}, {2, 4}), t.input<float>({2}, {1.0f, 2.0f}), t.input<int8_t>({2}, {0, 1}),
                             t.input<float>({}, {1.0f}), t.input<int8_t>({}, {0})});
        t.go();
        CHECK(t.type() == ElementType::Int8);
        CHECK(t.out<int8_t>() == I8{-4, -12});   // (-3 + 1) * 2 * 1, (-3 + 1) * (4 - 1) * 2
    }
}

// ---- Compress and BitCast ---------------------------------------------------------------------

TEST_CASE("Compress: axis, flattened, a shorter condition, negative axis (opset 11)") {
    {
        OpTest t;
        t.opset = 11;
        t.op("Compress", {t.input<float>({3, 2}, {1, 2, 3, 4, 5, 6}), t.constant<uint8_t>({3}, {0, 1, 1}, ElementType::Bool)});
        t.set_int("axis", 0);
        t.go();
        CHECK(t.shape() == Shape{2, 2});
        CHECK(t.out<float>() == F32{3, 4, 5, 6});
    }
    {
        OpTest t;   // axis -1, condition shorter than the dim
        t.opset = 11;
        t.op("Compress", {t.input<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6}), t.constant<uint8_t>({2}, {0, 1}, ElementType::Bool)});
        t.set_int("axis", -1);
        t.go();
        CHECK(t.shape() == Shape{2, 1});
        CHECK(t.out<int64_t>() == I64{2, 5});
    }
    {
        OpTest t;   // no axis: the flattened input
        t.op("Compress", {t.input<uint8_t>({2, 2}, {1, 2, 3, 4}), t.constant<uint8_t>({4}, {1, 0, 0, 1}, ElementType::Bool)});
        t.go();
        CHECK(t.shape() == Shape{2});
        CHECK(t.out<uint8_t>() == U8{1, 4});
    }
    {
        OpTest t;   // nothing kept
        t.op("Compress", {t.input<float>({2, 2}, F32(4, 1)), t.constant<uint8_t>({2}, {0, 0}, ElementType::Bool)});
        t.set_int("axis", 1);
        t.go();
        CHECK(t.shape() == Shape{2, 0});
    }
}

TEST_CASE("Compress: bad input") {
    {
        OpTest t;   // a runtime condition: outputs bounded by its length (test_data_dependent.cpp runs it)
        t.op("Compress", {t.input<float>({2}, F32(2, 1)), t.input<uint8_t>({2}, {1, 0}, ElementType::Bool)});
        REQUIRE(t.prepare() == Status::Ok);
        CHECK(t.prepared.bounded_outputs);
        CHECK(t.output_descs[0].dims[0] == 2);
    }
    {
        OpTest t;
        t.op("Compress", {t.input<float>({2}, F32(2, 1)), t.constant<int64_t>({2}, {1, 0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // selects past the end
        t.op("Compress", {t.input<float>({2}, F32(2, 1)), t.constant<uint8_t>({3}, {0, 0, 1}, ElementType::Bool)});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // negative axis at opset 9
        t.opset = 9;
        t.op("Compress", {t.input<float>({2}, F32(2, 1)), t.constant<uint8_t>({1}, {1}, ElementType::Bool)});
        t.set_int("axis", -1);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("Compress", {t.input<float>({2}, F32(2, 1)), t.constant<uint8_t>({1}, {1}, ElementType::Bool)});
        t.set_int("axis", 1);
        t.fails(Status::InvalidArgument);
    }
}

TEST_CASE("BitCast: the same bytes as another type") {
    {
        OpTest t;
        t.opset = 26;
        t.op("BitCast", {t.input<float>({2}, {1.0f, -2.0f})});
        t.set_int("to", 6);
        t.go();
        CHECK(t.type() == ElementType::Int32);
        CHECK(t.out<int32_t>() == I32{0x3f800000, (int32_t)0xc0000000u});
    }
    {
        OpTest t;
        t.opset = 26;
        t.op("BitCast", {t.input<int8_t>({3}, {-1, 0, -128})});
        t.set_int("to", 2);
        t.go();
        CHECK(t.out<uint8_t>() == U8{255, 0, 128});
    }
    {
        OpTest t;   // before opset 26
        t.opset = 25;
        t.op("BitCast", {t.input<float>({1}, {1})});
        t.set_int("to", 6);
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // widths differ
        t.opset = 26;
        t.op("BitCast", {t.input<float>({1}, {1})});
        t.set_int("to", 7);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // float8 (out of Tessel's types)
        t.opset = 26;
        t.op("BitCast", {t.input<int8_t>({1}, {1})});
        t.set_int("to", 17);
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // 'to' missing
        t.opset = 26;
        t.op("BitCast", {t.input<float>({1}, {1})});
        t.fails(Status::InvalidArgument);
    }
}

// ---- Celu, CumProd, Det -----------------------------------------------------------------------

TEST_CASE("Celu: alpha, float16 at opset 28, bad input") {
    {
        OpTest t;
        t.opset = 12;
        t.op("Celu", {t.input<float>({4}, {-1.0f, 0.0f, 1.0f, NAN})});
        t.set_float("alpha", 2.0f);
        t.go();
        check_close(t.out<float>(), {2.0f * (std::exp(-0.5f) - 1.0f), 0.0f, 1.0f, NAN});
    }
    {
        OpTest t;
        t.opset = 28;
        t.op("Celu", {t.input<uint16_t>({2}, {kHalfOne, kHalfTwo})});
        t.go();
        CHECK(t.type() == ElementType::Float16);
        CHECK(t.out<uint16_t>() == U16{kHalfOne, kHalfTwo});
    }
    { OpTest t; t.opset = 27; t.op("Celu", {t.input<uint16_t>({1}, {kHalfOne})}); t.fails(Status::Unsupported); }
    { OpTest t; t.opset = 12; t.op("Celu", {t.input<int32_t>({1}, {1})}); t.fails(Status::Unsupported); }
    { OpTest t; t.opset = 11; t.op("Celu", {t.input<float>({1}, {1})}); t.fails(Status::Unsupported); }
}

TEST_CASE("CumProd: exclusive, reverse, axes, integer types") {
    struct Case { int exclusive, reverse; F32 want; };
    const Case cases[] = {{0, 0, {1, 2, 6, 24}}, {1, 0, {1, 1, 2, 6}}, {0, 1, {24, 24, 12, 4}}, {1, 1, {24, 12, 4, 1}}};
    for (const Case& k : cases) {
        OpTest t;
        t.opset = 26;
        t.op("CumProd", {t.input<float>({4}, {1, 2, 3, 4}), t.constant<int64_t>({}, {0})});
        t.set_int("exclusive", k.exclusive);
        t.set_int("reverse", k.reverse);
        t.go();
        CHECK(t.out<float>() == k.want);
    }
    {
        OpTest t;   // int32 along axis 1 (a runtime axis)
        t.opset = 26;
        t.op("CumProd", {t.input<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6}), t.input<int32_t>({}, {1})});
        t.go();
        CHECK(t.out<int32_t>() == I32{1, 2, 6, 4, 20, 120});
    }
    {
        OpTest t;   // int64 along axis -2
        t.opset = 26;
        t.op("CumProd", {t.input<int64_t>({2, 2}, {2, 3, 4, 5}), t.constant<int64_t>({}, {-2})});
        t.go();
        CHECK(t.out<int64_t>() == I64{2, 3, 8, 15});
    }
    { OpTest t; t.opset = 25; t.op("CumProd", {t.input<float>({2}, {1, 2}), t.constant<int64_t>({}, {0})}); t.fails(Status::Unsupported); }
    { OpTest t; t.opset = 26; t.op("CumProd", {t.input<float>({2}, {1, 2}), t.constant<int64_t>({}, {1})}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 26; t.op("CumProd", {t.input<uint8_t>({2}, {1, 2}), t.constant<int64_t>({}, {0})}); t.fails(Status::Unsupported); }
}

TEST_CASE("Det: 2x2, pivoting, singular, batches, bad input") {
    {
        OpTest t;
        t.opset = 11;
        t.op("Det", {t.input<float>({2, 2}, {1, 2, 3, 4})});
        t.go();
        CHECK(t.shape() == Shape{});
        check_close(t.out<float>(), {-2});
    }
    {
        OpTest t;   // a zero first pivot; a singular matrix; a scaled identity
        t.opset = 11;
        t.op("Det", {t.input<float>({3, 3, 3}, {0, 1, 0, 1, 0, 0, 0, 0, 1,  1, 2, 3, 2, 4, 6, 0, 1, 1,  2, 0, 0, 0, 3, 0, 0, 0, 4})});
        t.go();
        CHECK(t.shape() == Shape{3});
        check_close(t.out<float>(), {-1, 0, 24});
    }
    { OpTest t; t.opset = 11; t.op("Det", {t.input<float>({2, 3}, F32(6, 1))}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 11; t.op("Det", {t.input<float>({2}, F32(2, 1))}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 11; t.op("Det", {t.input<int32_t>({1, 1}, {1})}); t.fails(Status::Unsupported); }
}

// ---- Einsum -----------------------------------------------------------------------------------

TEST_CASE("Einsum: transpose, matmul, inner product, diagonal, trace, sums, ellipsis, implicit output") {
    auto einsum = [](OpTest& t, const char* equation) {
        t.opset = 12;
        t.set_string("equation", equation);
    };
    {
        OpTest t;
        t.op("Einsum", {t.input<float>({2, 3}, {1, 2, 3, 4, 5, 6})});
        einsum(t, "ij->ji");
        t.go();
        CHECK(t.shape() == Shape{3, 2});
        CHECK(t.out<float>() == F32{1, 4, 2, 5, 3, 6});
    }
    {
        OpTest t;   // implicit output: the letters in order, so "ba" transposes
        t.op("Einsum", {t.input<float>({2, 3}, {1, 2, 3, 4, 5, 6})});
        einsum(t, "ba");
        t.go();
        CHECK(t.shape() == Shape{3, 2});
        CHECK(t.out<float>() == F32{1, 4, 2, 5, 3, 6});
    }
    {
        OpTest t;   // batch matmul
        t.op("Einsum", {t.input<float>({2, 1, 2}, {1, 2, 3, 4}), t.input<float>({2, 2, 1}, {5, 6, 7, 8})});
        einsum(t, "bij, bjk -> bik");
        t.go();
        CHECK(t.shape() == Shape{2, 1, 1});
        CHECK(t.out<float>() == F32{17, 53});
    }
    {
        OpTest t;   // implicit inner product: a scalar
        t.op("Einsum", {t.input<int64_t>({3}, {1, 2, 3}), t.input<int64_t>({3}, {4, 5, 6})});
        einsum(t, "i,i");
        t.go();
        CHECK(t.shape() == Shape{});
        CHECK(t.out<int64_t>() == I64{32});
    }
    {
        OpTest t;   // diagonal and trace
        t.op("Einsum", {t.input<int32_t>({2, 2}, {1, 2, 3, 4})});
        einsum(t, "ii->i");
        t.go();
        CHECK(t.out<int32_t>() == I32{1, 4});
    }
    {
        OpTest t;
        t.op("Einsum", {t.input<int32_t>({2, 2}, {1, 2, 3, 4})});
        einsum(t, "ii");
        t.go();
        CHECK(t.out<int32_t>() == I32{5});
    }
    {
        OpTest t;   // a sum over everything
        t.op("Einsum", {t.input<float>({2, 2}, {1, 2, 3, 4})});
        einsum(t, "ij->");
        t.go();
        CHECK(t.out<float>() == F32{10});
    }
    {
        OpTest t;   // batch diagonal with "..."
        t.op("Einsum", {t.input<float>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})});
        einsum(t, "...ii->...i");
        t.go();
        CHECK(t.shape() == Shape{2, 2});
        CHECK(t.out<float>() == F32{1, 4, 5, 8});
    }
    {
        OpTest t;   // "..." broadcasts a size-1 dim; implicit output keeps "..." first
        t.op("Einsum", {t.input<float>({2, 1, 2}, {1, 2, 3, 4}), t.input<float>({3, 2}, {1, 0, 0, 1, 1, 1})});
        einsum(t, "...j,...j");
        t.go();
        CHECK(t.shape() == Shape{2, 3});
        CHECK(t.out<float>() == F32{1, 2, 3, 3, 4, 7});
    }
    {
        OpTest t;   // "..." left out of an explicit output is summed
        t.op("Einsum", {t.input<float>({2, 2}, {1, 2, 3, 4})});
        einsum(t, "...i->i");
        t.go();
        CHECK(t.out<float>() == F32{4, 6});
    }
}

TEST_CASE("Einsum: bad input") {
    auto node = [](OpTest& t, const char* equation, uint32_t inputs = 1, ElementType type = ElementType::Float32) {
        std::vector<unsigned char> bytes(64, 0);
        std::vector<InputRef> in;
        for (uint32_t i = 0; i < inputs; ++i) in.push_back(t.input<unsigned char>({2, 2}, bytes, i ? ElementType::Float32 : type));
        t.op("Einsum", in);
        t.opset = 12;
        t.set_string("equation", equation);
    };
    { OpTest t; node(t, "ij,jk->ik"); t.fails(Status::InvalidArgument); }          // fewer inputs than terms
    { OpTest t; node(t, "ij->ij", 2); t.fails(Status::InvalidArgument); }          // more inputs than terms
    { OpTest t; node(t, "ijk->i"); t.fails(Status::InvalidArgument); }             // 3 letters for rank 2
    { OpTest t; node(t, "ij->k"); t.fails(Status::InvalidArgument); }              // output label in no input
    { OpTest t; node(t, "ij->ii"); t.fails(Status::InvalidArgument); }             // repeated output label
    { OpTest t; node(t, "i1->i"); t.fails(Status::InvalidArgument); }              // not a letter
    { OpTest t; node(t, "..i->i"); t.fails(Status::InvalidArgument); }             // malformed ellipsis
    { OpTest t; node(t, "ij,jk", 2, ElementType::Int64); t.fails(Status::InvalidArgument); }   // types differ
    { OpTest t; node(t, "ij", 1, ElementType::UInt8); t.fails(Status::Unsupported); }
    {
        OpTest t;   // label sizes differ
        t.op("Einsum", {t.input<float>({2, 3}, F32(6, 1)), t.input<float>({2}, F32(2, 1))});
        t.opset = 12;
        t.set_string("equation", "ij,j->i");
        t.fails(Status::InvalidArgument);
    }
    { OpTest t; t.op("Einsum", {t.input<float>({2}, F32(2, 1))}); t.opset = 11; t.set_string("equation", "i"); t.fails(Status::Unsupported); }
}

// ---- TfIdfVectorizer --------------------------------------------------------------------------

namespace {
// Unigrams 1, 2 and the bigram (1, 2) unless counts and indexes say otherwise.
void tfidf(OpTest& t, const char* mode, int64_t min_length, int64_t max_length, int64_t skip, const I64& counts = {0, 2},
           const I64& indexes = {0, 1, 2}) {
    t.opset = 9;
    t.set_string("mode", mode);
    t.set_int("min_gram_length", min_length);
    t.set_int("max_gram_length", max_length);
    t.set_int("max_skip_count", skip);
    t.set_ints("ngram_counts", counts);
    t.set_ints("ngram_indexes", indexes);
    t.set_ints("pool_int64s", {1, 2, 1, 2});
}
}  // namespace

TEST_CASE("TfIdfVectorizer: TF, IDF, TFIDF, skips, batches") {
    {
        OpTest t;   // 1, 2 twice each, (1, 2) twice
        t.op("TfIdfVectorizer", {t.input<int64_t>({5}, {1, 2, 1, 2, 3})});
        tfidf(t, "TF", 1, 2, 0);
        t.go();
        CHECK(t.shape() == Shape{3});
        CHECK(t.out<float>() == F32{2, 2, 2});
    }
    {
        OpTest t;   // only bigrams; (1, 2) across one gap needs max_skip_count 1
        t.op("TfIdfVectorizer", {t.input<int32_t>({2, 3}, {1, 5, 2, 1, 2, 2})});
        tfidf(t, "TF", 2, 2, 1);
        t.go();
        CHECK(t.shape() == Shape{2, 3});
        CHECK(t.out<float>() == F32{0, 0, 1, 0, 0, 2});   // row 2: (1, 2) adjacent and across a gap
    }
    {
        OpTest t;   // unigrams count once whatever the skips
        t.op("TfIdfVectorizer", {t.input<int32_t>({3}, {1, 5, 2})});
        tfidf(t, "TF", 1, 2, 3);
        t.go();
        CHECK(t.out<float>() == F32{1, 1, 1});
    }
    {
        OpTest t;   // IDF with weights: the weight where a count is positive
        t.op("TfIdfVectorizer", {t.input<int64_t>({3}, {1, 1, 3})});
        tfidf(t, "IDF", 1, 2, 0);
        F32 w{0.5f, 2.0f, 4.0f};
        REQUIRE(t.model.set_floats(t.node, "weights", Span<const float>(w.data(), w.size())) == Status::Ok);
        t.go();
        CHECK(t.out<float>() == F32{0.5f, 0, 0});
    }
    {
        OpTest t;   // TFIDF: counts times weights
        t.op("TfIdfVectorizer", {t.input<int64_t>({3}, {1, 1, 2})});
        tfidf(t, "TFIDF", 1, 2, 0);
        F32 w{0.5f, 2.0f, 4.0f};
        REQUIRE(t.model.set_floats(t.node, "weights", Span<const float>(w.data(), w.size())) == Status::Ok);
        t.go();
        CHECK(t.out<float>() == F32{1, 2, 4});
    }
}

TEST_CASE("TfIdfVectorizer: bad input") {
    { OpTest t; t.op("TfIdfVectorizer", {t.input<float>({2}, {1, 2})}); tfidf(t, "TF", 1, 2, 0); t.fails(Status::Unsupported); }
    { OpTest t; t.op("TfIdfVectorizer", {t.input<int64_t>({1, 1, 2}, {1, 2})}); tfidf(t, "TF", 1, 2, 0); t.fails(Status::InvalidArgument); }
    { OpTest t; t.op("TfIdfVectorizer", {t.input<int64_t>({2}, {1, 2})}); tfidf(t, "BM25", 1, 2, 0); t.fails(Status::InvalidArgument); }
    { OpTest t; t.op("TfIdfVectorizer", {t.input<int64_t>({2}, {1, 2})}); tfidf(t, "TF", 2, 1, 0); t.fails(Status::InvalidArgument); }
    { OpTest t; t.op("TfIdfVectorizer", {t.input<int64_t>({2}, {1, 2})}); tfidf(t, "TF", 1, 2, -1); t.fails(Status::InvalidArgument); }
    {
        OpTest t;   // ngram_counts past the pool
        t.op("TfIdfVectorizer", {t.input<int64_t>({2}, {1, 2})});
        tfidf(t, "TF", 1, 2, 0, {0, 7});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // bigrams of an odd item count
        t.op("TfIdfVectorizer", {t.input<int64_t>({2}, {1, 2})});
        tfidf(t, "TF", 1, 2, 0, {0, 1});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // fewer ngram_indexes than n-grams
        t.op("TfIdfVectorizer", {t.input<int64_t>({2}, {1, 2})});
        tfidf(t, "TF", 1, 2, 0, {0, 2}, {0, 1});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // string n-grams
        t.op("TfIdfVectorizer", {t.input<int64_t>({2}, {1, 2})});
        tfidf(t, "TF", 1, 2, 0);
        t.set_string("pool_strings", "a");
        t.fails(Status::Unsupported);
    }
}

// ---- through a Core ---------------------------------------------------------------------------

TEST_CASE("quant ops: compiled on CPU and TEMPLATE, infer allocates nothing") {
    for (const char* device : {"CPU", "TEMPLATE"}) {
        INFO(device);
        {
            OpTest t;
            t.opset = 21;
            t.op("QuantizeLinear", {t.input<float>({2, 4}, {2, 4, 6, 8, 1, 2, 3, 5}), t.input<float>({2, 2}, {2, 4, 1, 2}),
                                    t.input<int8_t>({2, 2}, {0, 0, 0, 1})});
            t.set_int("block_size", 2);
            REQUIRE(t.infer(device) == Status::Ok);
            CHECK(t.out<int8_t>() == I8{1, 2, 2, 2, 1, 2, 3, 3});   // 6 / 4 = 1.5 -> 2; 3 / 2 -> 2 + 1, 5 / 2 -> 2 + 1
        }
        {
            OpTest t;
            t.opset = 12;
            t.op("Einsum", {t.input<float>({2, 2}, {1, 2, 3, 4}), t.input<float>({2, 2}, {1, 0, 0, 1})});
            t.set_string("equation", "ij,jk->ik");
            REQUIRE(t.infer(device, "2") == Status::Ok);
            CHECK(t.out<float>() == F32{1, 2, 3, 4});
        }
        {
            OpTest t;   // a model of opset 12 runs DequantizeLinear-10/13 (no output_dtype)
            t.opset = 12;
            t.op("DequantizeLinear", {t.input<uint8_t>({2}, {4, 6}), t.input<float>({}, {0.5f}), t.input<uint8_t>({}, {2})});
            REQUIRE(t.infer(device) == Status::Ok);
            CHECK(t.out<float>() == F32{1, 2});
        }
    }
}

TEST_CASE("quant ops: random malformed nodes fail with a Status, never crash") {
    const char* ops[] = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearMatMul",
                         "ConvInteger", "QLinearConv", "Compress", "BitCast", "Celu", "CumProd", "Det", "Einsum",
                         "TfIdfVectorizer"};
    const uint32_t arity[] = {3, 3, 1, 4, 8, 4, 9, 2, 1, 1, 2, 1, 2, 1};
    const char* int_names[] = {"axis", "block_size", "output_dtype", "precision", "group", "to", "exclusive", "reverse",
                               "min_gram_length", "max_gram_length", "max_skip_count"};
    const char* equations[] = {"ij,jk->ik", "ii", "...i,...i", "ij->", "i,i", "bij,bjk", "ab", "...->...", ",->", "a..b"};
    MalformedPicker picker(20261130);
    auto pick = [&](uint32_t n) { return picker.pick(n); };
    auto special = [&]() { return picker.special(); };
    uint32_t prepared = 0, ran = 0;
    for (int iteration = 0; iteration < 30000; ++iteration) {
        OpTest t;
        t.opset = pick(2) ? 26 : 7 + pick(22);
        uint32_t which = pick(sizeof ops / sizeof ops[0]);
        const char* op = ops[which];
        uint32_t num_inputs = pick(4) ? arity[which] : pick(10);
        Shape base(1 + pick(4));
        for (int64_t& d : base) d = 1 + pick(3);
        std::vector<InputRef> inputs;
        for (uint32_t i = 0; i < num_inputs; ++i) {
            if (pick(10) == 0) { inputs.push_back(t.model.absent()); continue; }
            ElementType type = pick(3) == 0 ? ElementType::UInt8 : pick(2) ? ElementType::Float32 : picker.any_type();
            Shape shape;
            switch (pick(5)) {
                case 0: case 1: shape = base; break;
                case 2: shape = {}; break;                                          // a scalar parameter
                case 3: shape = {base.size() > 1 ? base[1] : base[0]}; break;      // per axis
                default: shape.resize(pick(5)); for (int64_t& d : shape) d = pick(4); break;
            }
            size_t elements = 1;
            for (int64_t d : shape) elements *= (size_t)d;
            std::vector<unsigned char> bytes(elements * element_size(type));
            for (unsigned char& b : bytes) b = (unsigned char)picker.rng();
            if (type == ElementType::Float32 && pick(2))
                for (size_t k = 0; k < elements; ++k) {
                    float v = (float)pick(7) - 3.0f;
                    std::memcpy(&bytes[k * 4], &v, 4);
                }
            if (type == ElementType::Bool) for (unsigned char& b : bytes) b &= 1;
            inputs.push_back(pick(2) ? t.constant<unsigned char>(shape, bytes, type) : t.input<unsigned char>(shape, bytes, type));
        }
        uint32_t outputs = StringView(op) == StringView("DynamicQuantizeLinear") ? 3 : 1;
        t.op(op, inputs, pick(4) ? outputs : 1 + pick(3));
        for (const char* name : int_names) if (pick(5) == 0) t.set_int(name, pick(4) == 0 ? special() : (int64_t)pick(5) - 1);
        if (pick(2)) t.set_string("equation", equations[pick(sizeof equations / sizeof equations[0])]);
        if (pick(2)) {
            t.set_string("mode", pick(4) ? "TF" : "IDF");
            t.set_ints("ngram_counts", {0, (int64_t)pick(4)});
            t.set_ints("ngram_indexes", {0, 1, (int64_t)pick(3)});
            t.set_ints("pool_int64s", {1, 2, 1, 2});
        }
        if (pick(5) == 0) t.set_ints("pads", {1, 1, 1, 1});
        INFO(std::string(op) << " opset " << t.opset << " iteration " << iteration);
        t.prepare_and_run_any(&prepared, &ran);
    }
    MESSAGE("prepared " << prepared << ", ran " << ran);
    CHECK(prepared > 800);
    CHECK(ran > 600);
}
