// runtime.h element types float64, int16, uint16, uint32, uint64 and bfloat16: names, sizes and
// ONNX codes; Cast between every pair (rounding, NaN, infinities, saturation, wrapping); the
// typed ops (>>integer and logical ops, >>bitwise ops, Pow, Clip, Range, TopK) on every width
// against values worked out by hand; float16, bfloat16 and double through the float32 kernels
// (>>float32 compute) against the float32 results; the ONNX reader's typed fields and a model
// round trip; each kind of bad input against its exact Status.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>
#include "alloc_counter.h"
#include "runtime.h"
#include "test_helpers.h"
#include "op_test.h"
#include "protobuf_writer.h"

using namespace tessel;

namespace {

using test::OpTest;
using test::Shape;
using test::Pb;
using Bytes = std::vector<unsigned char>;
using test::kEveryType;
using test::MalformedPicker;

int onnx_code(ElementType type) {
    switch (type) {
        case ElementType::Float32: return 1;
        case ElementType::UInt8: return 2;
        case ElementType::Int8: return 3;
        case ElementType::UInt16: return 4;
        case ElementType::Int16: return 5;
        case ElementType::Int32: return 6;
        case ElementType::Int64: return 7;
        case ElementType::Bool: return 9;
        case ElementType::Float16: return 10;
        case ElementType::Float64: return 11;
        case ElementType::UInt32: return 12;
        case ElementType::UInt64: return 13;
        case ElementType::BFloat16: return 16;
        default: return 0;
    }
}

// float16 bits of a value float16 holds exactly (normal or zero).
uint16_t half_bits(double v) {
    if (v == 0) return std::signbit(v) ? 0x8000 : 0;
    int e = 0;
    double m = std::frexp(std::fabs(v), &e);   // v = m * 2^e, m in [0.5, 1)
    uint16_t bits = (uint16_t)(((e + 14) << 10) | ((uint32_t)std::ldexp(m, 11) & 0x3ff));
    return v < 0 ? (uint16_t)(bits | 0x8000) : bits;
}

// Values (exact in `type`) as bytes of `type`.
Bytes bytes_of(ElementType type, const std::vector<double>& values) {
    Bytes b(values.size() * element_size(type));
    for (size_t k = 0; k < values.size(); ++k) {
        double v = values[k];
        unsigned char* p = b.data() + k * element_size(type);
        auto put = [p](auto x) { std::memcpy(p, &x, sizeof x); };
        switch (type) {
            case ElementType::Float32: put((float)v); break;
            case ElementType::Float64: put(v); break;
            case ElementType::Float16: put(half_bits(v)); break;
            case ElementType::BFloat16: {
                float f = (float)v;
                uint32_t x;
                std::memcpy(&x, &f, 4);
                put((uint16_t)(x >> 16));
                break;
            }
            case ElementType::Int8: put((int8_t)v); break;
            case ElementType::Int16: put((int16_t)v); break;
            case ElementType::Int32: put((int32_t)v); break;
            case ElementType::Int64: put((int64_t)v); break;
            case ElementType::UInt8: put((uint8_t)v); break;
            case ElementType::UInt16: put((uint16_t)v); break;
            case ElementType::UInt32: put((uint32_t)v); break;
            case ElementType::UInt64: put((uint64_t)v); break;
            case ElementType::Bool: put((uint8_t)(v != 0)); break;
            default: break;
        }
    }
    return b;
}

double half_value(uint16_t bits) {
    Tensor t;
    int64_t shape[] = {1};
    REQUIRE(t.view(ElementType::Float16, shape, &bits) == Status::Ok);
    return element_value(t, 0);
}

template <class T>
Bytes raw(const std::vector<T>& v) {
    Bytes b(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
}

std::vector<double> values_of(const Tensor& t) {
    std::vector<double> v;
    for (uint64_t i = 0; i < t.elements(); ++i) v.push_back(element_value(t, i));
    return v;
}

// One Cast node on `bytes` (a runtime input of `from`), prepared and run through the kernel.
Tensor cast(ElementType from, const Bytes& bytes, ElementType to, const char* op = "Cast") {
    OpTest t;
    int64_t n = (int64_t)(bytes.size() / element_size(from));
    if (StringView(op) == StringView("Cast")) {
        t.op("Cast", {t.input<unsigned char>({n}, bytes, from)});
        t.set_int("to", onnx_code(to));
    } else {
        Bytes like(element_size(to), 0);
        t.op("CastLike", {t.input<unsigned char>({n}, bytes, from), t.input<unsigned char>({1}, like, to)});
    }
    t.go();
    CHECK(t.type() == to);
    return t.outputs.empty() ? Tensor() : static_cast<Tensor&&>(t.outputs[0]);
}

uint16_t bits16(const Tensor& t, uint64_t i) { return t.data_as<uint16_t>()[i]; }

float from_bits(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

// Compiles the one-node model of `t` (its node's outputs as graph outputs) and returns the
// Status, the message in *error.
Status compile_status(OpTest& t, std::string* error, const char* device = "CPU") {
    const Node& n = t.model.graph.node(t.node);
    for (uint32_t p = 0; p < n.num_outputs; ++p) {
        std::string name = t.fresh("out");
        REQUIRE(t.model.add_output(StringView(name.data(), name.size()), InputRef::by_id(t.node, p)) == Status::Ok);
    }
    REQUIRE(t.model.finalize() == Status::Ok);
    t.model.opset = t.opset;
    Core core;
    CompiledModel compiled;
    Status s = core.compile_model(t.model, device, Span<const ConfigEntry>(), &compiled);
    *error = core.last_error();
    return s;
}

}  // namespace

TEST_CASE("element types: names, sizes, ONNX codes, valid range") {
    const char* names[] = {"f32", "f16", "i64", "i32", "i8", "u8", "bool", "f64", "i16", "u16", "u32", "u64", "bf16"};
    const size_t sizes[] = {4, 2, 8, 4, 1, 1, 1, 8, 2, 2, 4, 8, 2};
    const int codes[] = {1, 10, 7, 6, 3, 2, 9, 11, 5, 4, 12, 13, 16};
    for (size_t i = 0; i < sizeof kEveryType / sizeof kEveryType[0]; ++i) {
        ElementType type = kEveryType[i];
        CAPTURE(names[i]);
        CHECK(std::string(element_type_name(type)) == names[i]);
        CHECK(element_size(type) == sizes[i]);
        CHECK(onnx_code(type) == codes[i]);
        Pb proto = test::tensor_raw("t", codes[i], {1}, std::string(sizes[i], '\0'));   // the reader's mapping
        Tensor read;
        REQUIRE(read_tensor_proto(proto.b.data(), proto.b.size(), &read) == Status::Ok);
        CHECK(read.type() == type);
        CHECK(element_type_valid(type));
    }
    // the stored numbers of the types that blobs of the first release hold do not move
    CHECK((int)ElementType::Bool == 7);
    CHECK((int)ElementType::Float64 == 8);
    CHECK((int)kLastElementType == 13);
    CHECK_FALSE(element_type_valid(ElementType::Undefined));
    CHECK_FALSE(element_type_valid((ElementType)14));
    Tensor t;
    int64_t shape[] = {2};
    CHECK(t.allocate((ElementType)14, shape) == Status::InvalidArgument);
    CHECK(t.allocate(ElementType::UInt64, shape) == Status::Ok);
    CHECK(t.bytes() == 16);
    t.data_as<uint64_t>()[1] = 1ull << 40;
    CHECK(element_value(t, 1) == std::ldexp(1.0, 40));
}

TEST_CASE("Cast and CastLike: every pair of types on values all of them hold") {
    const std::vector<double> values = {0, 1, 2, 7, 100, 0};
    for (ElementType from : kEveryType) {
        for (ElementType to : kEveryType) {
            CAPTURE(element_type_name(from));
            CAPTURE(element_type_name(to));
            bool boolean = from == ElementType::Bool || to == ElementType::Bool;
            Tensor y = cast(from, bytes_of(from, values), to, (int)from % 2 ? "Cast" : "CastLike");
            std::vector<double> want = values;
            if (boolean) for (double& v : want) v = v != 0;
            CHECK(values_of(y) == want);
        }
    }
    // negative values through every signed and floating type
    const ElementType signed_types[] = {ElementType::Float32, ElementType::Float16, ElementType::Int64, ElementType::Int32,
                                        ElementType::Int8, ElementType::Float64, ElementType::Int16, ElementType::BFloat16};
    for (ElementType from : signed_types)
        for (ElementType to : signed_types) {
            CAPTURE(element_type_name(from));
            CAPTURE(element_type_name(to));
            CHECK(values_of(cast(from, bytes_of(from, {-1, -100, 3}), to)) == std::vector<double>{-1, -100, 3});
        }
}

TEST_CASE("Cast: float to bfloat16 rounds to nearest even; NaN, infinities, overflow; bfloat16 to float is exact") {
    // 1 + 2^-8 is halfway between bfloat16 1 and 1 + 2^-7: to the even one, 1; 1 + 3*2^-8 to 1 + 2^-6
    std::vector<uint32_t> in = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                                0x7fc00001u, 0x80000000u, 0x00000001u, 0xbf7fffffu};
    std::vector<uint16_t> want = {0x3f80, 0x3f82, 0x3f81, 0x7f80, 0x7f80, 0xff80, 0, 0x8000, 0x0000, 0xbf80};
    Tensor y = cast(ElementType::Float32, raw(in), ElementType::BFloat16);
    for (size_t i = 0; i < in.size(); ++i) {
        CAPTURE(i);
        if (i == 6) CHECK(std::isnan(element_value(y, i)));
        else CHECK(bits16(y, i) == want[i]);
    }
    std::vector<uint16_t> b = {0x3f80, 0x4049, 0xff80, 0x7fc0, 0x0001, 0x8000};
    Tensor f = cast(ElementType::BFloat16, raw(b), ElementType::Float32);
    for (size_t i = 0; i < b.size(); ++i) {
        CAPTURE(i);
        float got = f.data_as<float>()[i];
        if (i == 3) CHECK(std::isnan(got));
        else CHECK(got == from_bits((uint32_t)b[i] << 16));
    }
    // double to bfloat16 and bfloat16 to double
    Tensor d = cast(ElementType::Float64, raw(std::vector<double>{3.140625, -1e300, 1.0 + 1.0 / 256 + 1e-12}), ElementType::BFloat16);
    CHECK(bits16(d, 0) == 0x4049);
    CHECK(bits16(d, 1) == 0xff80);
    CHECK(bits16(d, 2) == 0x3f81);   // just above the tie: up (a float rounding first would tie to 1)
    Tensor back = cast(ElementType::BFloat16, raw(std::vector<uint16_t>{0x4049}), ElementType::Float64);
    CHECK(back.data_as<double>()[0] == 3.140625);
}

TEST_CASE("Cast: double to float16 and float rounds once; float16 to double is exact") {
    // 1 + 2^-11 + 2^-40 lies just above the tie between float16 1 and 1 + 2^-10: it rounds up.
    // Rounding to float first gives exactly the tie, which would go to the even 1.
    std::vector<double> in = {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), 1.0 + std::ldexp(1.0, -11), 65520.0,
                              65519.99, -std::numeric_limits<double>::infinity(), std::nan(""), std::ldexp(1.0, -25),
                              std::ldexp(1.0, -25) * 1.0000001};
    std::vector<uint16_t> want = {0x3c01, 0x3c00, 0x7c00, 0x7bff, 0xfc00, 0, 0x0000, 0x0001};
    Tensor h = cast(ElementType::Float64, raw(in), ElementType::Float16);
    for (size_t i = 0; i < in.size(); ++i) {
        CAPTURE(i);
        if (i == 5) CHECK(std::isnan(element_value(h, i)));
        else CHECK(bits16(h, i) == want[i]);
    }
    Tensor f = cast(ElementType::Float64, raw(std::vector<double>{1e300, -1e-300, 0.1}), ElementType::Float32);
    CHECK(std::isinf(f.data_as<float>()[0]));
    CHECK(f.data_as<float>()[1] == 0.0f);
    CHECK(std::signbit(f.data_as<float>()[1]));
    CHECK(f.data_as<float>()[2] == 0.1f);
    Tensor d = cast(ElementType::Float16, raw(std::vector<uint16_t>{0x3555, 0x0001, 0x7c00, 0x7e00}), ElementType::Float64);
    CHECK(d.data_as<double>()[0] == 0.333251953125);
    CHECK(half_value(0x3555) == 0.333251953125);
    CHECK(d.data_as<double>()[1] == std::ldexp(1.0, -24));
    CHECK(std::isinf(d.data_as<double>()[2]));
    CHECK(std::isnan(d.data_as<double>()[3]));
}

TEST_CASE("Cast: floats to integers truncate toward zero and saturate (NaN 0); integers wrap; 64-bit values") {
    std::vector<double> in = {2.9, -2.9, 300.7, -1e10, std::nan(""), 1e20, -0.5,
                              std::numeric_limits<double>::infinity()};
    CHECK(values_of(cast(ElementType::Float64, raw(in), ElementType::Int8)) == std::vector<double>{2, -2, 127, -128, 0, 127, 0, 127});
    CHECK(values_of(cast(ElementType::Float64, raw(in), ElementType::UInt8)) == std::vector<double>{2, 0, 255, 0, 0, 255, 0, 255});
    CHECK(values_of(cast(ElementType::Float64, raw(in), ElementType::Int16)) ==
          std::vector<double>{2, -2, 300, -32768, 0, 32767, 0, 32767});
    CHECK(values_of(cast(ElementType::Float64, raw(in), ElementType::UInt16)) ==
          std::vector<double>{2, 0, 300, 0, 0, 65535, 0, 65535});
    CHECK(values_of(cast(ElementType::Float64, raw(in), ElementType::UInt32)) ==
          std::vector<double>{2, 0, 300, 0, 0, 4294967295.0, 0, 4294967295.0});
    Tensor u64 = cast(ElementType::Float64, raw(in), ElementType::UInt64);
    CHECK(u64.data_as<uint64_t>()[2] == 300);
    CHECK(u64.data_as<uint64_t>()[5] == UINT64_MAX);
    CHECK(u64.data_as<uint64_t>()[1] == 0);
    Tensor i64 = cast(ElementType::Float32, raw(std::vector<float>{1e19f, -1e19f, 4e9f}), ElementType::Int64);
    CHECK(i64.data_as<int64_t>()[0] == INT64_MAX);
    CHECK(i64.data_as<int64_t>()[1] == INT64_MIN);
    CHECK(i64.data_as<int64_t>()[2] == 4000000000);
    // integer to integer keeps the low bits
    Tensor w = cast(ElementType::Int64, raw(std::vector<int64_t>{-1, 300, 65537, -32769}), ElementType::UInt16);
    CHECK(values_of(w) == std::vector<double>{65535, 300, 1, 32767});
    Tensor n = cast(ElementType::UInt64, raw(std::vector<uint64_t>{UINT64_MAX, 1ull << 63, 200}), ElementType::Int8);
    CHECK(values_of(n) == std::vector<double>{-1, 0, -56});
    Tensor s = cast(ElementType::UInt64, raw(std::vector<uint64_t>{UINT64_MAX}), ElementType::Int64);
    CHECK(s.data_as<int64_t>()[0] == -1);
    Tensor u = cast(ElementType::Int32, raw(std::vector<int32_t>{-2}), ElementType::UInt64);
    CHECK(u.data_as<uint64_t>()[0] == UINT64_MAX - 1);
    // the largest uint64 and int64 to float and double
    Tensor f = cast(ElementType::UInt64, raw(std::vector<uint64_t>{UINT64_MAX, (1ull << 53) + 1}), ElementType::Float64);
    CHECK(f.data_as<double>()[0] == 18446744073709551616.0);
    CHECK(f.data_as<double>()[1] == 9007199254740992.0);
    Tensor g = cast(ElementType::UInt64, raw(std::vector<uint64_t>{UINT64_MAX}), ElementType::Float32);
    CHECK(g.data_as<float>()[0] == 18446744073709551616.0f);
    Tensor b = cast(ElementType::Float64, raw(std::vector<double>{0.5, -0.0, std::nan("")}), ElementType::Bool);
    CHECK(values_of(b) == std::vector<double>{1, 0, 1});
    Tensor big = cast(ElementType::UInt32, raw(std::vector<uint32_t>{70000, 4294967295u}), ElementType::Float16);
    CHECK(bits16(big, 0) == 0x7c00);
    Tensor bf = cast(ElementType::Int64, raw(std::vector<int64_t>{257, -65}), ElementType::BFloat16);
    CHECK(values_of(bf) == std::vector<double>{256, -65});   // 257 ties to the even 256
}

TEST_CASE("Cast, EyeLike, ConstantOfShape, Where, Concat, Transpose, Gather carry the new types") {
    {
        OpTest t;   // EyeLike dtype double from a float input; uint16 without dtype
        t.op("EyeLike", {t.input<float>({2, 3}, std::vector<float>(6, 0))});
        t.set_int("dtype", 11);
        t.go();
        CHECK(t.type() == ElementType::Float64);
        CHECK(t.out<double>() == std::vector<double>{1, 0, 0, 0, 1, 0});
        OpTest u;
        u.op("EyeLike", {u.input<unsigned char>({2, 2}, Bytes(8, 0), ElementType::UInt16)});
        u.set_int("k", 1);
        u.go();
        CHECK(u.type() == ElementType::UInt16);
        CHECK(values_of(u.outputs[0]) == std::vector<double>{0, 1, 0, 0});
    }
    {
        OpTest t;   // ConstantOfShape with a uint64 value
        t.op("ConstantOfShape", {t.constant<int64_t>({1}, {3})});
        t.set_tensor<uint64_t>("value", {1}, {UINT64_MAX - 1});
        t.go();
        CHECK(t.type() == ElementType::UInt64);
        CHECK(t.out<uint64_t>() == std::vector<uint64_t>(3, UINT64_MAX - 1));
    }
    {
        OpTest t;   // Where on double branches
        t.op("Where", {t.input<uint8_t>({3}, {1, 0, 1}, ElementType::Bool), t.input<double>({3}, {1.5, 2.5, 3.5}),
                       t.input<double>({1}, {-1})});
        t.go();
        CHECK(t.out<double>() == std::vector<double>{1.5, -1, 3.5});
    }
    {
        OpTest t;   // Concat of int16
        t.op("Concat", {t.input<int16_t>({2}, {-3, 4}), t.input<int16_t>({1}, {32767})});
        t.set_int("axis", 0);
        t.go();
        CHECK(t.out<int16_t>() == std::vector<int16_t>{-3, 4, 32767});
    }
    {
        OpTest t;   // Transpose of uint64
        t.op("Transpose", {t.input<uint64_t>({2, 2}, {1, 2, 3, UINT64_MAX})});
        t.go();
        CHECK(t.out<uint64_t>() == std::vector<uint64_t>{1, 3, 2, UINT64_MAX});
    }
    {
        OpTest t;   // Gather of bfloat16 rows
        t.op("Gather", {t.input<unsigned char>({3}, raw(std::vector<uint16_t>{0x3f80, 0x4000, 0x4040}), ElementType::BFloat16),
                        t.input<int64_t>({2}, {2, -3})});
        t.go();
        CHECK(t.type() == ElementType::BFloat16);
        CHECK(t.out<uint16_t>() == std::vector<uint16_t>{0x4040, 0x3f80});
    }
}

namespace {

template <class T>
std::vector<T> binary(const char* op, const std::vector<T>& a, const std::vector<T>& b, int64_t fmod = -1) {
    OpTest t;
    t.op(op, {t.input<T>({(int64_t)a.size()}, a), t.input<T>({(int64_t)b.size()}, b)});
    if (fmod >= 0) t.set_int("fmod", fmod);
    t.go();
    CHECK(t.type() == test::type_of<T>());
    return t.out<T>();
}

template <class T>
std::vector<T> unary(const char* op, const std::vector<T>& a) {
    OpTest t;
    t.op(op, {t.input<T>({(int64_t)a.size()}, a)});
    t.go();
    return t.out<T>();
}

template <class T>
std::vector<uint8_t> compare(const char* op, const std::vector<T>& a, const std::vector<T>& b) {
    OpTest t;
    t.op(op, {t.input<T>({(int64_t)a.size()}, a), t.input<T>({(int64_t)b.size()}, b)});
    t.go();
    CHECK(t.type() == ElementType::Bool);
    return t.out<uint8_t>();
}

template <class T>
void check_integer_width() {
    using L = std::numeric_limits<T>;
    const T lo = L::min(), hi = L::max();
    CAPTURE(element_type_name(test::type_of<T>()));
    CHECK(binary<T>("Add", {hi, 3}, {1, 4}) == std::vector<T>{lo, 7});                       // wraps
    CHECK(binary<T>("Sub", {lo, 9}, {1, 4}) == std::vector<T>{hi, 5});
    CHECK(binary<T>("Mul", {hi, 6}, {hi, 7}) == std::vector<T>{(T)1, 42});                 // hi * hi wraps to 1
    CHECK(binary<T>("Div", {7, hi, 0}, {2, hi, 5}) == std::vector<T>{3, 1, 0});
    CHECK(binary<T>("Mod", {7, hi}, {3, 10}) == std::vector<T>{1, (T)(hi % 10)});
    CHECK(binary<T>("Max", {lo, hi, 5}, {hi, lo, 5}) == std::vector<T>{hi, hi, 5});
    CHECK(binary<T>("Min", {lo, hi, 5}, {hi, lo, 5}) == std::vector<T>{lo, lo, 5});
    CHECK(binary<T>("Sum", {hi, 1}, {1, 1}) == std::vector<T>{lo, 2});
    CHECK(unary<T>("Abs", {5, 0}) == std::vector<T>{5, 0});
    CHECK(compare<T>("Less", {lo, hi, 3}, {hi, lo, 3}) == std::vector<uint8_t>{1, 0, 0});
    CHECK(compare<T>("GreaterOrEqual", {lo, hi, 3}, {hi, lo, 3}) == std::vector<uint8_t>{0, 1, 1});
    CHECK(compare<T>("Equal", {lo, hi, 3}, {lo, lo, 3}) == std::vector<uint8_t>{1, 0, 1});
    CHECK(binary<T>("BitwiseAnd", {hi, 6}, {(T)5, 3}) == std::vector<T>{(T)(hi & 5), 2});
    CHECK(binary<T>("BitwiseXor", {lo, 6}, {lo, 3}) == std::vector<T>{0, 5});
    CHECK(unary<T>("BitwiseNot", {0}) == std::vector<T>{(T)~(T)0});
    if (L::is_signed) {
        CHECK(binary<T>("Div", {(T)-7, lo, (T)7}, {2, (T)-1, (T)-2}) == std::vector<T>{(T)-3, lo, (T)-3});   // lo / -1 wraps
        CHECK(binary<T>("Mod", {(T)-7, (T)7, lo}, {2, (T)-2, (T)-1}, 0) == std::vector<T>{1, (T)-1, 0});     // divisor's sign
        CHECK(binary<T>("Mod", {(T)-7, (T)7}, {2, (T)-2}, 1) == std::vector<T>{(T)-1, 1});                  // dividend's sign
        CHECK(unary<T>("Neg", {lo, (T)-5, 5}) == std::vector<T>{lo, 5, (T)-5});
        CHECK(unary<T>("Abs", {lo, (T)-5}) == std::vector<T>{lo, 5});
    } else {
        CHECK(binary<T>("Mod", {hi, 7}, {2, 7}, 0) == std::vector<T>{1, 0});
    }
}

template <class T>
void check_division_by_zero() {
    for (const char* op : {"Div", "Mod"}) {
        OpTest t;
        t.op(op, {t.input<T>({2}, {4, 5}), t.input<T>({2}, {1, 0})});
        t.run_fails("integer division by zero");
    }
}

template <class T>
void check_shift() {
    CAPTURE(element_type_name(test::type_of<T>()));
    const T hi = std::numeric_limits<T>::max();
    const T width = (T)(sizeof(T) * 8);
    OpTest t;
    t.op("BitShift", {t.input<T>({4}, {1, hi, 3, 1}), t.input<T>({4}, {(T)(width - 1), 1, width, (T)(width + 1)})});
    t.set_string("direction", "LEFT");
    t.go();
    CHECK(t.out<T>() == std::vector<T>{(T)((T)1 << (width - 1)), (T)(hi - 1), 0, 0});
    OpTest r;
    r.op("BitShift", {r.input<T>({3}, {hi, 16, 1}), r.input<T>({1}, {(T)(width - 1)})});
    r.set_string("direction", "RIGHT");
    r.go();
    CHECK(r.out<T>() == std::vector<T>{1, 0, 0});
}

}  // namespace

TEST_CASE("typed ops: every integer width wraps, divides toward zero, takes Mod's sign per fmod") {
    check_integer_width<int8_t>();
    check_integer_width<int16_t>();
    check_integer_width<int32_t>();
    check_integer_width<int64_t>();
    check_integer_width<uint8_t>();
    check_integer_width<uint32_t>();
    check_integer_width<uint64_t>();
    {
        // uint16 through explicit types (uint16_t is float16 in type_of)
        OpTest t;
        t.op("Mul", {t.input<uint16_t>({2}, {65535, 300}, ElementType::UInt16), t.input<uint16_t>({2}, {65535, 300}, ElementType::UInt16)});
        t.go();
        CHECK(t.type() == ElementType::UInt16);
        CHECK(t.out<uint16_t>() == std::vector<uint16_t>{1, (uint16_t)(90000 % 65536)});
        OpTest d;
        d.op("Div", {d.input<uint16_t>({2}, {65535, 7}, ElementType::UInt16), d.input<uint16_t>({2}, {2, 0}, ElementType::UInt16)});
        d.run_fails("integer division by zero");
    }
}

TEST_CASE("typed ops: integer division by zero fails at run time on every width") {
    check_division_by_zero<int8_t>();
    check_division_by_zero<int16_t>();
    check_division_by_zero<int32_t>();
    check_division_by_zero<int64_t>();
    check_division_by_zero<uint8_t>();
    check_division_by_zero<uint32_t>();
    check_division_by_zero<uint64_t>();
    OpTest t;   // through infer: the request's Status, nothing allocated
    t.op("Mod", {t.input<uint64_t>({1}, {3}), t.input<uint64_t>({1}, {0})});
    CHECK(t.infer() == Status::InvalidArgument);
    CHECK(t.infer_error.find("integer division by zero") != std::string::npos);
}

TEST_CASE("typed ops: double is computed in double") {
    const double third = 1.0 / 3.0;
    CHECK(binary<double>("Div", {1, 1}, {3, 0}) == std::vector<double>{third, INFINITY});
    CHECK(binary<double>("Add", {1e300, 0.1}, {1e300, 0.2}) == std::vector<double>{2e300, 0.1 + 0.2});
    CHECK(binary<double>("Sub", {1, 1e-300}, {1e-17, 0}) == std::vector<double>{1 - 1e-17, 1e-300});
    const double big = 1e200, factor = 1e100;
    CHECK(binary<double>("Mul", {big}, {factor}) == std::vector<double>{big * factor});
    CHECK(binary<double>("Mod", {-7.5, 7.5}, {2, -2}, 1) == std::vector<double>{-1.5, 1.5});
    std::vector<double> m = binary<double>("Max", {1, std::nan(""), 2}, {std::nan(""), 1, 3});
    CHECK(std::isnan(m[0]));
    CHECK(std::isnan(m[1]));
    CHECK(m[2] == 3);
    CHECK(unary<double>("Neg", {1e-300}) == std::vector<double>{-1e-300});
    CHECK(unary<double>("Abs", {-1e300}) == std::vector<double>{1e300});
    CHECK(compare<double>("Less", {1.0, 1.0 + 1e-15}, {1.0 + 1e-15, 1.0}) == std::vector<uint8_t>{1, 0});
    {
        OpTest t;   // variadic Mean of three
        t.op("Mean", {t.input<double>({1}, {1}), t.input<double>({1}, {2}), t.input<double>({1}, {1e-16})});
        t.go();
        CHECK(t.out<double>() == std::vector<double>{(1 + 2 + 1e-16) / 3});
    }
    {
        OpTest t;   // float Mod without fmod stays refused
        t.op("Mod", {t.input<double>({1}, {1}), t.input<double>({1}, {2})});
        t.fails(Status::InvalidArgument);
    }
}

TEST_CASE("bitwise ops on every width, BitShift on every unsigned width") {
    check_shift<uint8_t>();
    check_shift<uint32_t>();
    check_shift<uint64_t>();
    {
        OpTest t;
        t.op("BitShift", {t.input<uint16_t>({2}, {1, 0x8001}, ElementType::UInt16), t.input<uint16_t>({2}, {15, 1}, ElementType::UInt16)});
        t.set_string("direction", "LEFT");
        t.go();
        CHECK(t.out<uint16_t>() == std::vector<uint16_t>{0x8000, 0x0002});
    }
    {
        OpTest t;   // broadcast uint64 against one value
        t.op("BitwiseOr", {t.input<uint64_t>({2, 2}, {1, 2, 4, 8}), t.input<uint64_t>({1}, {1ull << 63})});
        t.go();
        CHECK(t.out<uint64_t>() == std::vector<uint64_t>{(1ull << 63) | 1, (1ull << 63) | 2, (1ull << 63) | 4, (1ull << 63) | 8});
    }
    {
        OpTest t;   // BitShift on a signed type: InvalidArgument
        t.op("BitShift", {t.input<int16_t>({1}, {1}), t.input<int16_t>({1}, {1})});
        t.set_string("direction", "LEFT");
        t.fails(Status::InvalidArgument);
        OpTest d;   // bitwise ops on double
        d.op("BitwiseAnd", {d.input<double>({1}, {1}), d.input<double>({1}, {1})});
        d.fails(Status::InvalidArgument);
    }
}

TEST_CASE("Pow: the ONNX Pow-15 type mixes, result of the base's type") {
    {
        OpTest t;   // int32 ** int32: exact, wrapping; negative exponents as 1/x truncated
        t.op("Pow", {t.input<int32_t>({6}, {2, 3, -2, 1, -1, 5}), t.input<int32_t>({6}, {10, 21, 3, -4, -3, -1})});
        t.go();
        CHECK(t.type() == ElementType::Int32);
        CHECK(t.out<int32_t>() == std::vector<int32_t>{1024, (int32_t)(uint32_t)10460353203ull, -8, 1, -1, 0});
    }
    {
        OpTest t;   // int64 ** float32: the double pow truncated
        t.op("Pow", {t.input<int64_t>({3}, {2, 10, 3}), t.input<float>({3}, {0.5f, 2.0f, -1.0f})});
        t.go();
        CHECK(t.out<int64_t>() == std::vector<int64_t>{1, 100, 0});
    }
    {
        OpTest t;   // float32 ** uint64 and ** int64
        t.op("Pow", {t.input<float>({3}, {2, 1.5f, -2}), t.input<uint64_t>({3}, {3, 2, 3})});
        t.go();
        CHECK(t.type() == ElementType::Float32);
        CHECK(t.out<float>() == std::vector<float>{8, 2.25f, -8});
        OpTest u;
        u.op("Pow", {u.input<float>({2}, {2, 4}), u.input<int64_t>({2}, {-1, 0})});
        u.go();
        CHECK(u.out<float>() == std::vector<float>{0.5f, 1});
    }
    {
        OpTest t;   // double ** double and float32 ** float32 (the elementwise kernel)
        t.op("Pow", {t.input<double>({2}, {2, 10}), t.input<double>({2}, {0.5, -300})});
        t.go();
        CHECK(t.out<double>() == std::vector<double>{std::pow(2.0, 0.5), std::pow(10.0, -300.0)});
        OpTest f;
        f.op("Pow", {f.input<float>({1}, {3}), f.input<float>({1}, {2})});
        f.go();
        CHECK(f.out<float>() == std::vector<float>{9});
    }
    {
        OpTest t;   // a bool base: Unsupported (float16 and bfloat16 go through float32)
        t.op("Pow", {t.input<uint8_t>({1}, {1}, ElementType::Bool), t.input<float>({1}, {2})});
        t.fails(Status::Unsupported);
        OpTest s;   // shapes that do not broadcast
        s.op("Pow", {s.input<int32_t>({2}, {1, 2}), s.input<int32_t>({3}, {1, 2, 3})});
        s.fails(Status::InvalidArgument);
    }
}

TEST_CASE("Clip on integers and double: min, max, either absent") {
    {
        OpTest t;
        t.op("Clip", {t.input<int8_t>({5}, {-128, -5, 0, 5, 127}), t.input<int8_t>({}, {-4}), t.input<int8_t>({}, {4})});
        t.go();
        CHECK(t.type() == ElementType::Int8);
        CHECK(t.out<int8_t>() == std::vector<int8_t>{-4, -4, 0, 4, 4});
    }
    {
        OpTest t;   // max only
        t.op("Clip", {t.input<uint64_t>({3}, {0, 7, UINT64_MAX}), t.absent(), t.input<uint64_t>({}, {7})});
        t.go();
        CHECK(t.out<uint64_t>() == std::vector<uint64_t>{0, 7, 7});
        OpTest n;   // neither: a copy
        n.op("Clip", {n.input<int16_t>({2}, {-32768, 32767})});
        n.go();
        CHECK(n.out<int16_t>() == std::vector<int16_t>{-32768, 32767});
    }
    {
        OpTest t;   // double keeps NaN
        t.op("Clip", {t.input<double>({3}, {-1e300, std::nan(""), 0.5}), t.input<double>({}, {0}), t.input<double>({}, {1})});
        t.go();
        std::vector<double> y = t.out<double>();
        CHECK(y[0] == 0);
        CHECK(std::isnan(y[1]));
        CHECK(y[2] == 0.5);
    }
    {
        OpTest t;   // min of another type
        t.op("Clip", {t.input<int32_t>({1}, {1}), t.input<int64_t>({}, {0})});
        t.fails(Status::InvalidArgument);
        OpTest s;   // min not a scalar
        s.op("Clip", {s.input<int32_t>({2}, {1, 2}), s.input<int32_t>({2}, {0, 0})});
        s.fails(Status::InvalidArgument);
        OpTest a;   // Clip-6's float attributes on an integer tensor
        a.opset = 6;
        a.op("Clip", {a.input<int32_t>({1}, {1})});
        a.set_float("min", 0);
        a.fails(Status::Unsupported);
    }
}

TEST_CASE("Range on double and int16; TopK on uint64, int8 and double") {
    {
        OpTest t;
        t.op("Range", {t.constant<double>({}, {0.5}), t.constant<double>({}, {1.75}), t.constant<double>({}, {0.25})});
        t.go();
        CHECK(t.out<double>() == std::vector<double>{0.5, 0.75, 1.0, 1.25, 1.5});
        OpTest s;
        s.op("Range", {s.constant<int16_t>({}, {10}), s.constant<int16_t>({}, {-2}), s.constant<int16_t>({}, {-4})});
        s.go();
        CHECK(s.out<int16_t>() == std::vector<int16_t>{10, 6, 2});
        OpTest z;   // delta 0
        z.op("Range", {z.constant<int16_t>({}, {1}), z.constant<int16_t>({}, {2}), z.constant<int16_t>({}, {0})});
        z.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("TopK", {t.input<uint64_t>({4}, {3, UINT64_MAX, 1ull << 63, 7}), t.constant<int64_t>({1}, {2})}, 2);
        t.go();
        CHECK(t.out<uint64_t>(0) == std::vector<uint64_t>{UINT64_MAX, 1ull << 63});
        CHECK(t.out<int64_t>(1) == std::vector<int64_t>{1, 2});
        OpTest s;
        s.op("TopK", {s.input<int8_t>({4}, {3, -128, 127, 0}), s.constant<int64_t>({1}, {3})}, 2);
        s.set_int("largest", 0);
        s.go();
        CHECK(s.out<int8_t>(0) == std::vector<int8_t>{-128, 0, 3});
        OpTest d;
        d.op("TopK", {d.input<double>({3}, {1e-300, 2e-300, 0}), d.constant<int64_t>({1}, {1})}, 2);
        d.go();
        CHECK(d.out<double>(0) == std::vector<double>{2e-300});
    }
}

namespace {

// The node's float32 result on `values`, and its result on the same values stored as `type`
// (computed through float32), converted back to double.
struct Compared {
    std::vector<double> float32, typed;
};

Compared compare_with_float32(const char* op, ElementType type, const std::vector<double>& values, const Shape& shape,
                              void (*attributes)(OpTest&), const char* device) {
    Compared r;
    for (int pass = 0; pass < 2; ++pass) {
        ElementType t_type = pass == 0 ? ElementType::Float32 : type;
        OpTest t;
        t.op(op, {t.input<unsigned char>(shape, bytes_of(t_type, values), t_type)});
        if (attributes) attributes(t);
        REQUIRE(t.infer(device) == Status::Ok);
        if (t.outputs.empty()) return r;
        CHECK(t.outputs[0].type() == t_type);
        (pass == 0 ? r.float32 : r.typed) = values_of(t.outputs[0]);
    }
    return r;
}

void check_within(const std::vector<double>& got, const std::vector<double>& want, double rtol) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i << ": " << got[i] << ", expected " << want[i]);
        CHECK(std::fabs(got[i] - want[i]) <= 1e-6 + rtol * std::fabs(want[i]));
    }
}

}  // namespace

TEST_CASE("float16, bfloat16 and double through the float32 kernels match the float32 results") {
    // values float16 and bfloat16 hold exactly, so the inputs agree; the results are the float32
    // ones rounded to the type (double: exactly the float32 ones)
    std::vector<double> values;
    for (int i = 0; i < 24; ++i) values.push_back((i % 7 - 3) * 0.25);
    const ElementType types[] = {ElementType::Float16, ElementType::BFloat16, ElementType::Float64};
    struct Case {
        const char* op;
        Shape shape;
        void (*attributes)(OpTest&);
    };
    const Case cases[] = {
        {"Softmax", {4, 6}, nullptr},
        {"Sigmoid", {24}, nullptr},
        {"Swish", {24}, [](OpTest& t) { t.opset = 24; }},
        {"Sin", {2, 12}, nullptr},
        {"ReduceMean", {2, 3, 4}, [](OpTest& t) { t.set_ints("axes", {1}); }},
        {"ReduceLogSumExp", {2, 3, 4}, [](OpTest& t) { t.set_ints("axes", {2}); }},
        {"GlobalAveragePool", {1, 2, 3, 4}, nullptr},
        {"MaxPool", {1, 2, 3, 4}, [](OpTest& t) { t.set_ints("kernel_shape", {2, 2}); }},
        {"LpNormalization", {4, 6}, nullptr},
    };
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"})
        for (const Case& c : cases)
            for (ElementType type : types) {
                CAPTURE(device);
                CAPTURE(c.op);
                CAPTURE(element_type_name(type));
                Compared r = compare_with_float32(c.op, type, values, c.shape, c.attributes, device);
                // double: the float32 kernel's own result, up to the fused float32 snippets' ULPs on CPU
                double rtol = type == ElementType::Float16 ? 1.0 / 1024 : type == ElementType::BFloat16 ? 1.0 / 128 : 1e-6;
                check_within(r.typed, r.float32, rtol);
            }
}

TEST_CASE("float32 compute: constant inputs, mixed inputs, Conv, and what it still refuses") {
    {
        OpTest t;   // float16 Add with a constant float16 input (converted once at prepare)
        t.op("Add", {t.input<unsigned char>({3}, bytes_of(ElementType::Float16, {1, 2, 65504}), ElementType::Float16),
                     t.constant<unsigned char>({1}, bytes_of(ElementType::Float16, {0.5}), ElementType::Float16)});
        REQUIRE(t.infer() == Status::Ok);
        CHECK(t.outputs[0].type() == ElementType::Float16);
        CHECK(values_of(t.outputs[0]) == std::vector<double>{1.5, 2.5, 65504});
    }
    {
        OpTest t;   // bfloat16 Conv, 1x1 kernel: the float32 Conv on the same values
        t.op("Conv", {t.input<unsigned char>({1, 2, 2, 2}, bytes_of(ElementType::BFloat16, {1, 2, 3, 4, 5, 6, 7, 8}), ElementType::BFloat16),
                      t.input<unsigned char>({1, 2, 1, 1}, bytes_of(ElementType::BFloat16, {0.5, -1}), ElementType::BFloat16)});
        REQUIRE(t.infer("HETERO:TEMPLATE,CPU") == Status::Ok);
        CHECK(t.outputs[0].type() == ElementType::BFloat16);
        CHECK(values_of(t.outputs[0]) == std::vector<double>{-4.5, -5, -5.5, -6});
    }
    {
        OpTest t;   // double MatMul: float32 arithmetic, double storage
        t.op("MatMul", {t.input<double>({1, 2}, {1.0 / 3, 1}), t.input<double>({2, 1}, {3, 1})});
        REQUIRE(t.infer() == Status::Ok);
        CHECK(t.outputs[0].type() == ElementType::Float64);
        CHECK(values_of(t.outputs[0])[0] == (double)((float)(1.0 / 3) * 3.0f + 1.0f));
    }
    {
        OpTest t;   // float16 Equal: a bool result, not converted
        t.op("Equal", {t.input<unsigned char>({2}, bytes_of(ElementType::Float16, {1, 2}), ElementType::Float16),
                       t.input<unsigned char>({2}, bytes_of(ElementType::Float16, {1, 3}), ElementType::Float16)});
        REQUIRE(t.infer() == Status::Ok);
        CHECK(t.outputs[0].type() == ElementType::Bool);
        CHECK(values_of(t.outputs[0]) == std::vector<double>{1, 0});
    }
    {
        OpTest t;   // a float16 Softmax with a bad axis: the float32 kernel's InvalidArgument
        t.op("Softmax", {t.input<unsigned char>({2}, bytes_of(ElementType::Float16, {1, 2}), ElementType::Float16)});
        t.set_int("axis", 5);
        std::string error;
        CHECK(compile_status(t, &error) == Status::InvalidArgument);
        CHECK(error.find("Softmax '") != std::string::npos);
    }
    {
        OpTest t;   // float16 indices stay refused: Unsupported, naming the node
        t.op("Gather", {t.input<float>({2}, {1, 2}), t.input<unsigned char>({1}, bytes_of(ElementType::Float16, {0}), ElementType::Float16)});
        std::string error;
        CHECK(compile_status(t, &error, "HETERO:TEMPLATE,CPU") == Status::Unsupported);
        CHECK(error.find("Gather '") != std::string::npos);
        CHECK(error.find("f16 inputs as float32") != std::string::npos);
    }
    {
        OpTest t;   // int32 into a float-only kernel is not converted (not exact): still refused
        t.op("Softmax", {t.input<int32_t>({2}, {1, 2})});
        std::string error;
        CHECK(compile_status(t, &error) == Status::Unsupported);
        CHECK(error.find("i32") != std::string::npos);
    }
}

TEST_CASE("selection ops on bool and 8/16-bit integers are exact through float32") {
    {
        OpTest t;
        t.op("ReduceMax", {t.input<uint8_t>({2, 3}, {0, 0, 1, 0, 0, 0}, ElementType::Bool), t.constant<int64_t>({1}, {1})});
        t.opset = 20;
        t.set_int("keepdims", 0);
        REQUIRE(t.infer() == Status::Ok);
        CHECK(t.outputs[0].type() == ElementType::Bool);
        CHECK(values_of(t.outputs[0]) == std::vector<double>{1, 0});
    }
    {
        OpTest t;
        t.op("ReduceMin", {t.input<int16_t>({4}, {-32768, 32767, 5, -1})});
        t.set_int("keepdims", 0);
        REQUIRE(t.infer("HETERO:TEMPLATE,CPU") == Status::Ok);
        CHECK(values_of(t.outputs[0]) == std::vector<double>{-32768});
    }
    {
        OpTest t;
        t.op("MaxPool", {t.input<uint8_t>({1, 1, 2, 3}, {255, 1, 7, 254, 2, 8})});
        t.set_ints("kernel_shape", {2, 2});
        REQUIRE(t.infer() == Status::Ok);
        CHECK(t.outputs[0].type() == ElementType::UInt8);
        CHECK(values_of(t.outputs[0]) == std::vector<double>{255, 8});
    }
}

TEST_CASE("ONNX reader: typed fields of each new type, raw data, a model written and read back") {
    using namespace test::onnx_type;
    auto read = [](const Pb& t, Tensor* tensor) { return read_tensor_proto(t.b.data(), t.b.size(), tensor); };
    {
        Pb t;   // double_data packed and unpacked
        double a = -1.5, b = 1e300;
        std::string packed(16, '\0');
        std::memcpy(&packed[0], &a, 8);
        std::memcpy(&packed[8], &b, 8);
        t.packed(1, {3}).u(2, DOUBLE).bytes(10, packed);
        uint64_t bits;
        double c = 0.1;
        std::memcpy(&bits, &c, 8);
        t.tag(10, 1);
        for (int i = 0; i < 8; ++i) t.b.push_back((char)(bits >> (8 * i)));
        Tensor tensor;
        REQUIRE(read(t, &tensor) == Status::Ok);
        CHECK(tensor.type() == ElementType::Float64);
        CHECK(values_of(tensor) == std::vector<double>{-1.5, 1e300, 0.1});
    }
    {
        Pb t;   // uint64_data for uint64 and uint32
        t.packed(1, {2}).u(2, UINT64).packed(11, {-1, 5});
        Tensor tensor;
        REQUIRE(read(t, &tensor) == Status::Ok);
        CHECK(tensor.type() == ElementType::UInt64);
        CHECK(tensor.data_as<uint64_t>()[0] == UINT64_MAX);
        CHECK(tensor.data_as<uint64_t>()[1] == 5);
        Pb u;
        u.packed(1, {2}).u(2, UINT32).packed(11, {4294967295ll, 7});
        REQUIRE(read(u, &tensor) == Status::Ok);
        CHECK(tensor.type() == ElementType::UInt32);
        CHECK(tensor.data_as<uint32_t>()[0] == 4294967295u);
        CHECK(tensor.data_as<uint32_t>()[1] == 7);
    }
    {
        Pb t;   // int32_data for int16, uint16 and bfloat16
        t.packed(1, {2}).u(2, INT16).packed(5, {-32768, 32767});
        Tensor tensor;
        REQUIRE(read(t, &tensor) == Status::Ok);
        CHECK(values_of(tensor) == std::vector<double>{-32768, 32767});
        Pb u;
        u.packed(1, {1}).u(2, UINT16).i(5, 65535);
        REQUIRE(read(u, &tensor) == Status::Ok);
        CHECK(values_of(tensor) == std::vector<double>{65535});
        Pb b;
        b.packed(1, {1}).u(2, BFLOAT16).i(5, 0x4049);
        REQUIRE(read(b, &tensor) == Status::Ok);
        CHECK(tensor.type() == ElementType::BFloat16);
        CHECK(values_of(tensor) == std::vector<double>{3.140625});
    }
    {
        Pb t;   // raw_data of a uint16
        t.packed(1, {2}).u(2, UINT16).bytes(9, std::string("\x01\x02\xff\xff", 4));
        Tensor tensor;
        REQUIRE(read(t, &tensor) == Status::Ok);
        CHECK(values_of(tensor) == std::vector<double>{0x0201, 65535});
    }
    {
        // bad typed fields: a count that disagrees, a packed double field not of 8-byte values,
        // double_data with the wrong wire type, a type Tessel does not have
        Tensor tensor;
        Pb a;
        a.packed(1, {3}).u(2, DOUBLE).bytes(10, std::string(16, '\0'));
        CHECK(read(a, &tensor) == Status::ParseError);
        Pb b;
        b.packed(1, {1}).u(2, DOUBLE).bytes(10, std::string(12, '\0'));
        CHECK(read(b, &tensor) == Status::ParseError);
        Pb c;
        c.packed(1, {1}).u(2, DOUBLE).u(10, 3);
        CHECK(read(c, &tensor) == Status::ParseError);
        Pb d;
        d.packed(1, {2}).u(2, UINT64).packed(5, {1, 2}).bytes(8, "d");   // int32_data is not UINT64's field
        CHECK(read(d, &tensor) == Status::ParseError);
        Pb e = test::tensor_raw("c", COMPLEX64, {1}, "12345678");
        CHECK(read(e, &tensor) == Status::Unsupported);
    }
    // a model with an input and a constant of each new type, written and read back
    const ElementType types[] = {ElementType::Float64, ElementType::Int16, ElementType::UInt16, ElementType::UInt32,
                                 ElementType::UInt64, ElementType::BFloat16};
    for (ElementType type : types) {
        CAPTURE(element_type_name(type));
        Model m;
        NodeId x = kNoNode, k = kNoNode, n = kNoNode;
        Bytes constant = bytes_of(type, {1, 2, 3});
        REQUIRE(m.add_input("x", test::make_desc(type, {3}), &x) == Status::Ok);
        REQUIRE(m.add_constant("k", test::make_desc(type, {3}), constant.data(), &k) == Status::Ok);
        InputRef in[] = {InputRef::by_id(x), InputRef::by_id(k)};
        REQUIRE(m.add_node("Max", "max", Span<const InputRef>(in, 2), 1, &n) == Status::Ok);
        REQUIRE(m.add_output("y", InputRef::by_id(n)) == Status::Ok);
        REQUIRE(m.finalize() == Status::Ok);
        std::string bytes;
        REQUIRE(write_onnx(m, test::append_to_string, &bytes) == Status::Ok);
        Model back;
        REQUIRE(back.read_onnx(bytes.data(), bytes.size()) == Status::Ok);
        NodeId bx = back.graph.find("x"), bk = back.graph.find("k");
        REQUIRE(bx != kNoNode);
        REQUIRE(bk != kNoNode);
        CHECK(back.graph.node(bx).outputs[0].type == type);
        const Attribute* value = back.graph.find_attribute(bk, "value");
        REQUIRE(value);
        REQUIRE(value->tensor);
        CHECK(value->tensor->desc.type == type);
        REQUIRE(value->tensor->bytes == constant.size());
        CHECK(std::memcmp(value->tensor->data, constant.data(), constant.size()) == 0);
    }
}

TEST_CASE("Cast: bad input") {
    {
        OpTest t;   // float8: not a type Tessel has
        t.op("Cast", {t.input<float>({1}, {1})});
        t.set_int("to", 17);
        t.fails(Status::Unsupported);
        CHECK(t.error().find("cast to ONNX data type 17") != std::string::npos);
    }
    {
        OpTest t;   // no 'to'
        t.op("Cast", {t.input<double>({1}, {1})});
        t.fails(Status::InvalidArgument);
        OpTest u;   // two inputs
        u.op("Cast", {u.input<double>({1}, {1}), u.input<double>({1}, {1})});
        u.set_int("to", 1);
        u.fails(Status::InvalidArgument);
    }
}

TEST_CASE("types ops: random malformed nodes with the new types fail with a Status, never crash") {
    const char* ops[] = {"Cast", "CastLike", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Max", "Min", "Sum", "Mean",
                         "Equal", "Less", "Where", "BitwiseAnd", "BitwiseNot", "BitShift", "Pow", "Clip", "TopK",
                         "EyeLike"};
    // "to" and "dtype" values: type codes valid and not, and extremes
    const int64_t type_codes[] = {INT64_MIN, -9, -1, 0, 1, 2, 3, 11, 13, 16, 17, INT64_MAX};
    MalformedPicker picker(20261129);
    auto pick = [&](uint32_t n) { return picker.pick(n); };
    uint32_t prepared = 0, ran = 0;
    for (int iteration = 0; iteration < 20000; ++iteration) {
        OpTest t;
        t.opset = pick(2) ? 21 : 6 + pick(17);
        const char* op = ops[pick(sizeof ops / sizeof ops[0])];
        uint32_t num_inputs = pick(4);
        ElementType common = picker.any_type();
        std::vector<InputRef> inputs;
        for (uint32_t i = 0; i < num_inputs; ++i) {
            if (pick(10) == 0) { inputs.push_back(t.model.absent()); continue; }
            ElementType type = pick(3) ? common : picker.any_type();
            Shape shape(pick(3));
            for (int64_t& d : shape) d = pick(4);
            size_t elements = 1;
            for (int64_t d : shape) elements *= (size_t)d;
            Bytes bytes(elements * element_size(type));
            for (unsigned char& b : bytes) b = (unsigned char)(pick(3) ? picker.rng() : 0);
            if (type == ElementType::Bool) for (unsigned char& b : bytes) b &= 1;
            inputs.push_back(pick(2) ? t.constant<unsigned char>(shape, bytes, type) : t.input<unsigned char>(shape, bytes, type));
        }
        t.op(op, inputs, StringView(op) == StringView("TopK") && pick(4) ? 2 : 1);
        if (pick(2)) t.set_int("to", type_codes[pick(sizeof type_codes / sizeof type_codes[0])]);
        if (pick(4) == 0) t.set_int("fmod", pick(2));
        if (pick(4) == 0) t.set_string("direction", pick(2) ? "LEFT" : "RIGHT");
        if (pick(4) == 0) t.set_int("dtype", type_codes[pick(sizeof type_codes / sizeof type_codes[0])]);
        INFO(std::string(op) << " opset " << t.opset << " iteration " << iteration);
        t.prepare_and_run_any(&prepared, &ran);
    }
    MESSAGE("prepared " << prepared << ", ran " << ran);
    CHECK(prepared > 1000);
    CHECK(ran > 1000);
}

TEST_CASE("compiled-model blobs hold the new types and the float32-wrapped nodes") {
    // x (double) -> Softmax (through float32) -> Mul by 4 (double) -> Cast to uint64 -> y;
    // exported, imported, run
    double four_value = 4;
    NodeId cast = kNoNode;
    Model model;
    NodeId mx = kNoNode, msoft = kNoNode, mfour = kNoNode, mmul = kNoNode;
    REQUIRE(model.add_input("x", test::make_desc(ElementType::Float64, {2}), &mx) == Status::Ok);
    REQUIRE(model.add_constant("four", test::make_desc(ElementType::Float64, {}), &four_value, &mfour) == Status::Ok);
    InputRef a[] = {InputRef::by_id(mx)};
    REQUIRE(model.add_node("Softmax", "softmax", Span<const InputRef>(a, 1), 1, &msoft) == Status::Ok);
    InputRef b[] = {InputRef::by_id(msoft), InputRef::by_id(mfour)};
    REQUIRE(model.add_node("Mul", "scale", Span<const InputRef>(b, 2), 1, &mmul) == Status::Ok);
    InputRef c[] = {InputRef::by_id(mmul)};
    REQUIRE(model.add_node("Cast", "cast", Span<const InputRef>(c, 1), 1, &cast) == Status::Ok);
    REQUIRE(model.set_int(cast, "to", 13) == Status::Ok);
    REQUIRE(model.add_output("y", InputRef::by_id(cast)) == Status::Ok);
    REQUIRE(model.finalize() == Status::Ok);
    Core core;
    CompiledModel compiled;
    REQUIRE(core.compile_model(model, "HETERO:TEMPLATE,CPU", Span<const ConfigEntry>(), &compiled) == Status::Ok);
    std::vector<char> blob;
    REQUIRE(compiled.export_model([](void* u, const char* d, size_t n) {
        static_cast<std::vector<char>*>(u)->insert(static_cast<std::vector<char>*>(u)->end(), d, d + n);
    }, &blob) == Status::Ok);
    CompiledModel imported;
    REQUIRE(core.import_model(blob.data(), blob.size(), &imported) == Status::Ok);
    InferRequest request;
    REQUIRE(imported.create_request(&request) == Status::Ok);
    request.input(0).data_as<double>()[0] = 3;
    request.input(0).data_as<double>()[1] = 3;   // softmax: 0.5, 0.5 exactly
    REQUIRE(request.infer() == Status::Ok);
    CHECK(request.output(0).type() == ElementType::UInt64);
    CHECK(request.output(0).data_as<uint64_t>()[0] == 2);
    CHECK(request.output(0).data_as<uint64_t>()[1] == 2);
}

TEST_CASE("BitCast: the same bytes as another type of the width; bad input") {
    {
        OpTest t;
        t.opset = 26;
        t.op("BitCast", {t.input<double>({2}, {1.0, -0.0})});
        t.set_int("to", 7);   // int64
        t.go();
        CHECK(t.type() == ElementType::Int64);
        CHECK(t.out<int64_t>() == std::vector<int64_t>{0x3ff0000000000000ll, INT64_MIN});
        CHECK(t.prepared.in_place);
    }
    {
        OpTest t;   // bfloat16 to uint16 and through infer on both devices
        t.opset = 26;
        t.op("BitCast", {t.input<uint16_t>({2}, {0x3f80, 0xff80}, ElementType::BFloat16)});
        t.set_int("to", 4);
        REQUIRE(t.infer("HETERO:TEMPLATE,CPU") == Status::Ok);
        CHECK(t.outputs[0].type() == ElementType::UInt16);
        CHECK(values_of(t.outputs[0]) == std::vector<double>{0x3f80, 0xff80});
    }
    {
        OpTest t;   // widths differ
        t.opset = 26;
        t.op("BitCast", {t.input<float>({1}, {1})});
        t.set_int("to", 11);
        t.fails(Status::InvalidArgument);
        OpTest u;   // a type Tessel does not have
        u.opset = 26;
        u.op("BitCast", {u.input<uint8_t>({1}, {1})});
        u.set_int("to", 17);
        u.fails(Status::Unsupported);
        OpTest m;   // no 'to'
        m.opset = 26;
        m.op("BitCast", {m.input<uint8_t>({1}, {1})});
        m.fails(Status::InvalidArgument);
    }
}
