// A protobuf wire-format writer for the tests that build ONNX models byte by byte
// (test_onnx.cpp, test_reliability.cpp): enough of ModelProto's encoding to write valid
// models and precisely broken ones. Field numbers come from onnx.proto.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace test {

struct Pb {
    std::string b;
    Pb& raw_varint(uint64_t v) {
        while (v >= 0x80) { b.push_back((char)(v | 0x80)); v >>= 7; }
        b.push_back((char)v);
        return *this;
    }
    Pb& tag(uint32_t field, uint32_t wire) { return raw_varint((uint64_t)field << 3 | wire); }
    Pb& u(uint32_t field, uint64_t v) { return tag(field, 0).raw_varint(v); }
    Pb& i(uint32_t field, int64_t v) { return u(field, (uint64_t)v); }
    Pb& bytes(uint32_t field, const std::string& s) { tag(field, 2).raw_varint(s.size()); b += s; return *this; }
    Pb& msg(uint32_t field, const Pb& m) { return bytes(field, m.b); }
    Pb& f32(uint32_t field, float v) {
        tag(field, 5);
        char c[4];
        std::memcpy(c, &v, 4);
        b.append(c, 4);
        return *this;
    }
    Pb& packed(uint32_t field, const std::vector<int64_t>& values) {
        Pb p;
        for (int64_t v : values) p.raw_varint((uint64_t)v);
        return bytes(field, p.b);
    }
    Pb& packed_floats(uint32_t field, const std::vector<float>& values) {
        std::string s(values.size() * 4, '\0');
        if (!values.empty()) std::memcpy(&s[0], values.data(), s.size());
        return bytes(field, s);
    }
};

// TensorProto.DataType values (`using namespace test::onnx_type;` brings them in).
namespace onnx_type {
enum OnnxType { FLOAT = 1, UINT8 = 2, INT8 = 3, INT32 = 6, INT64 = 7, BOOL = 9, FLOAT16 = 10, DOUBLE = 11 };
}

template <class T>
std::string raw_of(const std::vector<T>& v) {
    std::string s(v.size() * sizeof(T), '\0');
    if (!v.empty()) std::memcpy(&s[0], v.data(), s.size());
    return s;
}

// TensorProto: dims = 1, data_type = 2, float_data = 4, int32_data = 5, int64_data = 7,
// name = 8, raw_data = 9, external_data = 13, data_location = 14.
inline Pb tensor_raw(const std::string& name, int type, const std::vector<int64_t>& dims, const std::string& raw) {
    Pb t;
    t.packed(1, dims).u(2, (uint64_t)type);
    if (!name.empty()) t.bytes(8, name);
    return t.bytes(9, raw);
}

}  // namespace test
