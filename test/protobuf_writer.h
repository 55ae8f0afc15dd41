// A protobuf wire-format writer for the tests that build ONNX models byte by byte
// (test_onnx.cpp, test_reliability.cpp): enough of ModelProto's encoding to write valid
// models and precisely broken ones. Field numbers come from onnx.proto.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
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
enum OnnxType {
    FLOAT = 1, UINT8 = 2, INT8 = 3, UINT16 = 4, INT16 = 5, INT32 = 6, INT64 = 7, BOOL = 9, FLOAT16 = 10, DOUBLE = 11,
    UINT32 = 12, UINT64 = 13, COMPLEX64 = 14, BFLOAT16 = 16
};
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

// ValueInfoProto: name = 1, type = 2; TypeProto.tensor_type = 1 with elem_type = 1, shape = 2;
// a dim is dim_value = 1 or (negative here) the symbolic dim_param = 2 "N". `with_shape`
// false leaves the shape out, as for an output whose shape the reader infers.
inline Pb value_info(const std::string& name, int type, const std::vector<int64_t>& dims, bool with_shape = true) {
    Pb shape;
    for (int64_t d : dims) {
        Pb dim;
        if (d >= 0) dim.i(1, d);
        else dim.bytes(2, "N");
        shape.msg(1, dim);
    }
    Pb tensor;
    tensor.u(1, (uint64_t)type);
    if (with_shape) tensor.msg(2, shape);
    Pb typ;
    typ.msg(1, tensor);
    Pb v;
    v.bytes(1, name).msg(2, typ);
    return v;
}

// A graph output of `type` without a shape.
inline Pb output(const std::string& name, int type = onnx_type::FLOAT) { return value_info(name, type, {}, false); }

// NodeProto: input = 1, output = 2, name = 3, op_type = 4, attribute = 5, domain = 7. An empty
// name or domain is left out.
inline Pb named_node(const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                     const std::vector<std::string>& outputs, const std::vector<Pb>& attributes = {},
                     const std::string& domain = "") {
    Pb n;
    for (const std::string& s : inputs) n.bytes(1, s);
    for (const std::string& s : outputs) n.bytes(2, s);
    if (!name.empty()) n.bytes(3, name);
    n.bytes(4, op);
    for (const Pb& a : attributes) n.msg(5, a);
    if (!domain.empty()) n.bytes(7, domain);
    return n;
}

// A node without a name (the reader generates one).
inline Pb node(const std::string& op, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
               const std::vector<Pb>& attributes = {}) {
    return named_node(op, "", inputs, outputs, attributes);
}

// AttributeProto: name = 1, f = 2, i = 3, s = 4, t = 5, floats = 7, ints = 8, type = 20
// (FLOAT 1, INT 2, STRING 3, TENSOR 4, FLOATS 6, INTS 7).
inline Pb attr_int(const std::string& name, int64_t v) { Pb a; a.bytes(1, name).i(3, v).u(20, 2); return a; }
inline Pb attr_float(const std::string& name, float v) { Pb a; a.bytes(1, name).f32(2, v).u(20, 1); return a; }
inline Pb attr_string(const std::string& name, const std::string& v) { Pb a; a.bytes(1, name).bytes(4, v).u(20, 3); return a; }
inline Pb attr_ints(const std::string& name, const std::vector<int64_t>& v) { Pb a; a.bytes(1, name).packed(8, v).u(20, 7); return a; }
inline Pb attr_floats_unpacked(const std::string& name, const std::vector<float>& v) {
    Pb a;
    a.bytes(1, name);
    for (float f : v) a.f32(7, f);
    return a.u(20, 6);
}
inline Pb attr_tensor(const std::string& name, const Pb& t) { Pb a; a.bytes(1, name).msg(5, t).u(20, 4); return a; }

struct GraphSpec {
    std::vector<Pb> nodes, initializers, inputs, outputs;
};

// GraphProto: node = 1, name = 2, initializer = 5, input = 11, output = 12.
inline Pb graph(const GraphSpec& g, const std::string& name = "test") {
    Pb p;
    for (const Pb& n : g.nodes) p.msg(1, n);
    p.bytes(2, name);
    for (const Pb& t : g.initializers) p.msg(5, t);
    for (const Pb& v : g.inputs) p.msg(11, v);
    for (const Pb& v : g.outputs) p.msg(12, v);
    return p;
}

// ModelProto: ir_version = 1 (8), producer_name = 2, graph = 7, opset_import = 8 (domain = 1,
// version = 2): the default domain at `opset`, then the `extra` domains.
inline Pb model_proto(const Pb& graph_proto, int64_t opset = 13,
                      const std::vector<std::pair<std::string, int64_t>>& extra = {}) {
    Pb m;
    m.u(1, 8).bytes(2, "tessel-test");
    Pb o;
    o.bytes(1, "").i(2, opset);
    m.msg(8, o);
    for (const auto& e : extra) {
        Pb x;
        x.bytes(1, e.first).i(2, e.second);
        m.msg(8, x);
    }
    return m.msg(7, graph_proto);
}

}  // namespace test
