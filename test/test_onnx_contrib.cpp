// onnxruntime's quantized ops of domain com.microsoft (its QOperator quantizer's output) read as
// DequantizeLinear -> float op -> QuantizeLinear: the nodes the reader makes, results against
// the float formulas computed here (QLinearAdd, QLinearMul, QLinearConcat, QLinearLeakyRelu,
// QGemm within one step of its integer sum), bit for bit against the same model written with
// standard ops (the pools, QLinearSigmoid, QLinearSoftmax, QGemm), on the int8 kernels and the
// reference's (FUSION=NO), and one case per kind of bad node with its Status.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "protobuf_writer.h"
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {
using test::attr_float;
using test::attr_int;
using test::attr_ints;
using test::graph;
using test::GraphSpec;
using test::model_proto;
using test::named_node;
using test::Pb;
using test::raw_of;
using test::tensor_raw;
using test::value_info;
using namespace test::onnx_type;
using Shape = std::vector<int64_t>;

const char* kMs = "com.microsoft";

Status read(Model& model, const std::string& bytes) { return model.read_onnx(bytes.data(), bytes.size()); }

std::string name_of(const Model& m, NodeId n) { return test::to_string(m.graph.node(n).name); }
std::string op_of(const Model& m, NodeId n) { return test::to_string(m.graph.node(n).op); }
std::string producer(const Model& m, NodeId n, uint32_t input) { return name_of(m, m.graph.node(n).inputs[input].producer); }

Pb scalar(const std::string& name, float v) { return tensor_raw(name, FLOAT, {}, raw_of(std::vector<float>{v})); }
Pb scalar_u8(const std::string& name, uint8_t v) { return tensor_raw(name, UINT8, {}, raw_of(std::vector<uint8_t>{v})); }
Pb scalar_s8(const std::string& name, int8_t v) { return tensor_raw(name, INT8, {}, raw_of(std::vector<int8_t>{v})); }

// A model of `nodes` with the given graph inputs (int8 or uint8 tensors), initializers and
// one output y of `y_type`.
std::string model_of(const std::vector<Pb>& nodes, const std::vector<Pb>& inputs, const std::vector<Pb>& initializers,
                     int y_type, int64_t opset = 13) {
    GraphSpec g;
    g.nodes = nodes;
    g.inputs = inputs;
    g.initializers = initializers;
    g.outputs = {test::output("y", y_type)};
    return model_proto(graph(g), opset, {{kMs, 1}}).b;
}

struct Out {
    std::vector<unsigned char> y;
    ElementType type = ElementType::Undefined;
    std::string kernels;
};

// The model read from `bytes`, compiled on CPU (FUSION as given, PERF_COUNT=YES) and run once
// on the inputs' bytes, allocating nothing.
Out run(const std::string& bytes, const std::vector<std::vector<unsigned char>>& inputs, bool fusion = true) {
    Model m;
    Status s = read(m, bytes);
    INFO(m.last_error());
    REQUIRE(s == Status::Ok);
    Core core;
    CompiledModel compiled;
    ConfigEntry config[] = {{"PERF_COUNT", "YES"}, {"FUSION", fusion ? "YES" : "NO"}};
    s = core.compile_model(m, "CPU", Span<const ConfigEntry>(config, 2), &compiled);
    INFO(core.last_error());
    REQUIRE(s == Status::Ok);
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    for (size_t i = 0; i < inputs.size(); ++i) {
        REQUIRE(request.input((uint32_t)i).bytes() == inputs[i].size());
        std::memcpy(request.input((uint32_t)i).data(), inputs[i].data(), inputs[i].size());
    }
    uint64_t before = tessel_test::allocation_count();
    s = request.infer();
    CHECK(tessel_test::allocation_count() == before);
    INFO(request.last_error());
    REQUIRE(s == Status::Ok);
    Out o;
    const Tensor& y = request.output(0);
    const unsigned char* p = static_cast<const unsigned char*>(y.data());
    o.y.assign(p, p + y.bytes());
    o.type = y.desc().type;
    for (const ProfileEntry& e : request.profiling_info()) o.kernels += std::string(e.kernel) + " ";
    return o;
}

// Every byte value, spread differently per tensor.
std::vector<unsigned char> bytes_of(int64_t n, uint32_t mul, uint32_t add) { return test::every_byte({n}, mul, add); }

// QuantizeLinear's rounding: x / scale in float32, ties to even, plus the zero point, saturated.
int quantize(float x, float scale, int zero, bool is_signed) {
    float q = std::nearbyint(x / scale) + (float)zero;
    const float low = is_signed ? -128.0f : 0.0f, high = is_signed ? 127.0f : 255.0f;
    return (int)(q < low ? low : q > high ? high : q);
}
float dequantize(int x, float scale, int zero) { return (float)(x - zero) * scale; }
int value_at(const std::vector<unsigned char>& v, size_t i, bool is_signed) { return is_signed ? (int)(int8_t)v[i] : (int)v[i]; }

// Runs `bytes` fused and on the reference kernels: both give `want` exactly.
void check_both(const std::string& bytes, const std::vector<std::vector<unsigned char>>& inputs, const std::vector<int>& want,
                bool is_signed, const char* int8_step = nullptr) {
    for (bool fusion : {true, false}) {
        CAPTURE(fusion);
        Out o = run(bytes, inputs, fusion);
        INFO(o.kernels);
        CHECK(o.type == (is_signed ? ElementType::Int8 : ElementType::UInt8));
        if (fusion && int8_step) CHECK(o.kernels.find(int8_step) != std::string::npos);
        REQUIRE(o.y.size() == want.size());
        int64_t bad = 0;
        for (size_t i = 0; i < want.size(); ++i)
            if (value_at(o.y, i, is_signed) != want[i] && bad++ < 4)
                MESSAGE("y[" << i << "] = " << value_at(o.y, i, is_signed) << ", want " << want[i]);
        CHECK(bad == 0);
    }
}

// Both models give the same bytes, fused and on the reference kernels.
void check_same(const std::string& contrib, const std::string& standard, const std::vector<std::vector<unsigned char>>& inputs) {
    for (bool fusion : {true, false}) {
        CAPTURE(fusion);
        Out a = run(contrib, inputs, fusion), b = run(standard, inputs, fusion);
        INFO(a.kernels);
        CHECK(a.type == b.type);
        CHECK(a.y == b.y);
        CHECK(a.kernels == b.kernels);
    }
}

Pb quantized_input(const std::string& name, bool is_signed, const Shape& dims) { return value_info(name, is_signed ? INT8 : UINT8, dims); }
Pb zero(const std::string& name, int v, bool is_signed) { return is_signed ? scalar_s8(name, (int8_t)(v - 128)) : scalar_u8(name, (uint8_t)v); }

}  // namespace

TEST_SUITE("onnx contrib ops") {

TEST_CASE("com.microsoft nodes become DequantizeLinear, the float op and QuantizeLinear") {
    GraphSpec g;
    g.inputs = {value_info("a", UINT8, {2, 3}), value_info("b", UINT8, {2, 3}), value_info("x", UINT8, {1, 2, 4, 4})};
    g.initializers = {scalar("s", 0.5f), scalar_u8("z", 3)};
    g.nodes = {named_node("QLinearAdd", "add", {"a", "s", "z", "b", "s", "", "s", "z"}, {"sum"}, {}, kMs),
               named_node("Relu", "add#Add", {"a"}, {"r"}),   // an ONNX node's name stays its own
               named_node("QLinearAveragePool", "pool", {"x", "s", "z", "s", "z"}, {"p"},
                          {attr_ints("kernel_shape", {2, 2}), attr_int("channels_last", 0)}, kMs),
               named_node("QLinearSoftmax", "softmax", {"a", "s", "z", "s", "z"}, {"sm"}, {attr_int("opset", 13)}, kMs),
               named_node("QLinearSigmoid", "", {"a", "s", "z", "s"}, {"sg"}, {}, kMs),
               named_node("DequantizeLinear", "dq", {"a", "s", "z"}, {"d"}, {attr_int("axis", 1)}, kMs)};
    g.outputs = {test::output("sum", UINT8), test::output("r", UINT8), test::output("p", UINT8), test::output("sm", UINT8),
                 test::output("sg", UINT8), test::output("d")};
    Model m;
    REQUIRE(read(m, model_proto(graph(g), 13, {{kMs, 1}}).b) == Status::Ok);
    const NodeId add = m.graph.find("add");
    REQUIRE(add != kNoNode);
    CHECK(op_of(m, add) == "QuantizeLinear");
    REQUIRE(m.graph.node(add).num_inputs == 3);
    CHECK(producer(m, add, 0) == "add#Add_2");
    CHECK(producer(m, add, 1) == "s");
    CHECK(producer(m, add, 2) == "z");
    CHECK(op_of(m, m.graph.find("add#Add")) == "Relu");
    const NodeId sum = m.graph.find("add#Add_2");
    CHECK(op_of(m, sum) == "Add");
    CHECK(producer(m, sum, 0) == "add#dequantize0");
    CHECK(producer(m, sum, 1) == "add#dequantize1");
    const NodeId dq0 = m.graph.find("add#dequantize0"), dq1 = m.graph.find("add#dequantize1");
    CHECK(op_of(m, dq0) == "DequantizeLinear");
    REQUIRE(m.graph.node(dq0).num_inputs == 3);
    CHECK(producer(m, dq0, 0) == "a");
    CHECK(producer(m, dq0, 2) == "z");
    REQUIRE(m.graph.node(dq1).num_inputs == 2);   // B's zero point absent: the default
    CHECK(producer(m, dq1, 0) == "b");
    // the float op takes the attributes but channels_last
    const NodeId pool = m.graph.find("pool#AveragePool");
    CHECK(op_of(m, pool) == "AveragePool");
    CHECK(m.graph.find_attribute(pool, "kernel_shape") != nullptr);
    CHECK(m.graph.find_attribute(pool, "channels_last") == nullptr);
    CHECK(m.graph.find_attribute(m.graph.find("pool"), "kernel_shape") == nullptr);
    // QLinearSoftmax's axis defaults to -1, opset read and dropped
    const tessel::Attribute* axis = m.graph.find_attribute(m.graph.find("softmax#Softmax"), "axis");
    REQUIRE(axis);
    CHECK(axis->i == -1);
    CHECK(m.graph.find_attribute(m.graph.find("softmax#Softmax"), "opset") == nullptr);
    // y's zero point absent: a zero of x's type (CastLike), the node named <op>_<index>
    const NodeId sigmoid = m.graph.find("QLinearSigmoid_4");
    REQUIRE(sigmoid != kNoNode);
    REQUIRE(m.graph.node(sigmoid).num_inputs == 3);
    CHECK(producer(m, sigmoid, 2) == "QLinearSigmoid_4#zero_point");
    CHECK(op_of(m, m.graph.find("QLinearSigmoid_4#zero_point")) == "CastLike");
    CHECK(op_of(m, m.graph.find("QLinearSigmoid_4#zero")) == "Constant");
    // com.microsoft's DequantizeLinear is the standard one, its attributes kept
    CHECK(op_of(m, m.graph.find("dq")) == "DequantizeLinear");
    CHECK(m.graph.find_attribute(m.graph.find("dq"), "axis") != nullptr);
}

TEST_CASE("QLinearAdd and QLinearMul, broadcast, uint8 and int8: the float formula's bits") {
    for (bool is_signed : {false, true})
        for (const char* op : {"QLinearAdd", "QLinearMul"}) {
            CAPTURE(is_signed);
            CAPTURE(op);
            const Shape a_dims = {2, 8, 5, 7}, b_dims = {8, 1, 7};
            const float sa = 0.031f, sb = 0.017f, sc = std::strcmp(op, "QLinearAdd") == 0 ? 0.043f : 0.09f;
            const int za = 120, zb = 133, zc = 127, shift = is_signed ? 128 : 0;
            std::string bytes = model_of({named_node(op, "q", {"a", "sa", "za", "b", "sb", "zb", "sc", "zc"}, {"y"}, {}, kMs)},
                                         {quantized_input("a", is_signed, a_dims), quantized_input("b", is_signed, b_dims)},
                                         {scalar("sa", sa), zero("za", za, is_signed), scalar("sb", sb), zero("zb", zb, is_signed),
                                          scalar("sc", sc), zero("zc", zc, is_signed)},
                                         is_signed ? INT8 : UINT8);
            std::vector<unsigned char> a = bytes_of(560, 7, 3), b = bytes_of(56, 13, 91);
            std::vector<int> want(560);
            for (int64_t i = 0; i < 560; ++i) {
                const int64_t c = i / 35 % 8, w = i % 7;
                float va = dequantize(value_at(a, (size_t)i, is_signed), sa, za - shift);
                float vb = dequantize(value_at(b, (size_t)(c * 7 + w), is_signed), sb, zb - shift);
                want[(size_t)i] = quantize(std::strcmp(op, "QLinearAdd") == 0 ? va + vb : va * vb, sc, zc - shift, is_signed);
            }
            check_both(bytes, {a, b}, want, is_signed, is_signed ? nullptr : std::strcmp(op, "QLinearAdd") == 0 ? ":Add" : ":Mul");
        }
}

TEST_CASE("QLinearConcat: each input to y's grid, one input on it already") {
    for (bool is_signed : {false, true}) {
        CAPTURE(is_signed);
        const int shift = is_signed ? 128 : 0;
        std::string bytes = model_of({named_node("QLinearConcat", "cat", {"sy", "zy", "x0", "s0", "z0", "x1", "s1", "z1", "x2", "sy", "zy"},
                                                 {"y"}, {attr_int("axis", 1)}, kMs)},
                                     {quantized_input("x0", is_signed, {1, 3, 4, 5}), quantized_input("x1", is_signed, {1, 2, 4, 5}),
                                      quantized_input("x2", is_signed, {1, 4, 4, 5})},
                                     {scalar("sy", 0.02f), zero("zy", 128, is_signed), scalar("s0", 0.03f), zero("z0", 100, is_signed),
                                      scalar("s1", 0.013f), zero("z1", 140, is_signed)},
                                     is_signed ? INT8 : UINT8);
        std::vector<std::vector<unsigned char>> x = {bytes_of(60, 5, 1), bytes_of(40, 11, 7), bytes_of(80, 3, 250)};
        const float scales[] = {0.03f, 0.013f, 0.02f};
        const int zeros[] = {100, 140, 128};
        std::vector<int> want;
        for (int k = 0; k < 3; ++k)
            for (size_t i = 0; i < x[k].size(); ++i)
                want.push_back(quantize(dequantize(value_at(x[k], i, is_signed), scales[k], zeros[k] - shift), 0.02f, 128 - shift, is_signed));
        check_both(bytes, x, want, is_signed, is_signed ? nullptr : ":Concat");
    }
}

TEST_CASE("QLinearLeakyRelu: a table of the float op") {
    const float sx = 0.023f, sy = 0.011f, alpha = 0.1f;
    std::string bytes = model_of({named_node("QLinearLeakyRelu", "lr", {"x", "sx", "zx", "sy", "zy"}, {"y"}, {attr_float("alpha", alpha)}, kMs)},
                                 {quantized_input("x", false, {1, 16, 9, 11})},
                                 {scalar("sx", sx), scalar_u8("zx", 110), scalar("sy", sy), scalar_u8("zy", 100)}, UINT8);
    std::vector<unsigned char> x = bytes_of(1584, 1, 0);
    std::vector<int> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        float v = dequantize(x[i], sx, 110);
        want[i] = quantize(v < 0 ? alpha * v : v, sy, 100, false);
    }
    check_both(bytes, {x}, want, false, ":Table");
}

TEST_CASE("pools, QLinearSigmoid and QLinearSoftmax: the standard ops' bits") {
    for (bool is_signed : {false, true}) {
        CAPTURE(is_signed);
        const int type = is_signed ? INT8 : UINT8;
        const std::vector<Pb> grids = {scalar("sx", 0.05f), zero("zx", 110, is_signed), scalar("sy", 0.011f), zero("zy", 100, is_signed)};
        struct Case {
            const char* contrib;
            const char* op;
            std::vector<Pb> attributes;
            Shape dims;
        };
        const Case cases[] = {
            {"QLinearGlobalAveragePool", "GlobalAveragePool", {attr_int("channels_last", 0)}, {1, 16, 9, 11}},
            {"QLinearAveragePool", "AveragePool",
             {attr_ints("kernel_shape", {3, 3}), attr_ints("strides", {2, 2}), attr_ints("pads", {1, 1, 1, 1}), attr_int("count_include_pad", 1)},
             {1, 16, 9, 11}},
            {"QLinearAveragePool", "AveragePool", {attr_ints("kernel_shape", {3, 3}), attr_ints("strides", {2, 2}), attr_ints("pads", {1, 1, 1, 1})},
             {2, 3, 9, 11}},
            {"QLinearSigmoid", "Sigmoid", {}, {1, 16, 9, 11}},
            {"QLinearSoftmax", "Softmax", {attr_int("opset", 13), attr_int("axis", 1)}, {3, 10}},
        };
        for (const Case& c : cases) {
            CAPTURE(c.contrib);
            std::string contrib = model_of({named_node(c.contrib, "q", {"x", "sx", "zx", "sy", "zy"}, {"y"}, c.attributes, kMs)},
                                           {quantized_input("x", is_signed, c.dims)}, grids, type);
            std::vector<Pb> attributes;
            for (const Pb& a : c.attributes)
                if (a.b.find("channels_last") == std::string::npos && a.b.find("opset") == std::string::npos) attributes.push_back(a);
            std::string standard = model_of({named_node("DequantizeLinear", "dq", {"x", "sx", "zx"}, {"f"}),
                                             named_node(c.op, "op", {"f"}, {"g"}, attributes),
                                             named_node("QuantizeLinear", "q", {"g", "sy", "zy"}, {"y"})},
                                            {quantized_input("x", is_signed, c.dims)}, grids, type);
            check_same(contrib, standard, {bytes_of(test::count_of(c.dims), 1, 0)});
        }
    }
    // y's zero point absent: the output keeps x's type (int8 here), zero point 0
    std::string contrib = model_of({named_node("QLinearSigmoid", "q", {"x", "sx", "zx", "sy"}, {"y"}, {}, kMs)},
                                   {quantized_input("x", true, {64})}, {scalar("sx", 0.05f), scalar_s8("zx", 3), scalar("sy", 0.01f)}, INT8);
    std::string standard = model_of({named_node("DequantizeLinear", "dq", {"x", "sx", "zx"}, {"f"}), named_node("Sigmoid", "op", {"f"}, {"g"}),
                                     named_node("QuantizeLinear", "q", {"g", "sy", "zy"}, {"y"})},
                                    {quantized_input("x", true, {64})}, {scalar("sx", 0.05f), scalar_s8("zx", 3), scalar("sy", 0.01f), scalar_s8("zy", 0)},
                                    INT8);
    for (bool fusion : {true, false}) {
        Out a = run(contrib, {bytes_of(64, 5, 0)}, fusion), b = run(standard, {bytes_of(64, 5, 0)}, fusion);
        CHECK(a.type == ElementType::Int8);
        CHECK(a.y == b.y);
        CHECK(a.kernels == b.kernels);   // the CastLike of a constant folded: the same steps
    }
}

TEST_CASE("QGemm: C at alpha a_scale b_scale, B per column, transposed, quantized or float output") {
    const int64_t m = 5, k = 24, n = 10;
    std::vector<int8_t> b((size_t)(k * n));
    std::vector<float> sb((size_t)n);
    std::vector<int32_t> c((size_t)n);
    for (size_t i = 0; i < b.size(); ++i) b[i] = (int8_t)((int)((i * 37 + 11) % 255) - 127);
    for (int64_t j = 0; j < n; ++j) sb[(size_t)j] = 0.002f + 0.0007f * (float)j, c[(size_t)j] = (int32_t)(j * 613 % 5000) - 2500;
    const float sa = 0.031f, sy = 0.043f;
    const int za = 120, zy = 127;
    std::vector<unsigned char> a = bytes_of(m * k, 7, 3);
    for (int trans_b : {0, 1})
        for (float alpha : {1.0f, 0.5f})
            for (bool quantized : {true, false}) {
                CAPTURE(trans_b);
                CAPTURE(alpha);
                CAPTURE(quantized);
                std::vector<int8_t> stored = b;   // [k, n], or [n, k] transposed
                if (trans_b)
                    for (int64_t i = 0; i < k; ++i)
                        for (int64_t j = 0; j < n; ++j) stored[(size_t)(j * k + i)] = b[(size_t)(i * n + j)];
                std::vector<Pb> inits = {scalar("sa", sa), scalar_u8("za", (uint8_t)za),
                                         tensor_raw("B", INT8, trans_b ? Shape{n, k} : Shape{k, n}, raw_of(stored)),
                                         tensor_raw("sb", FLOAT, {n}, raw_of(sb)), tensor_raw("zb", INT8, {n}, raw_of(std::vector<int8_t>((size_t)n, 0))),
                                         tensor_raw("C", INT32, {n}, raw_of(c)), scalar("sy", sy), scalar_u8("zy", (uint8_t)zy)};
                std::vector<std::string> ins = {"a", "sa", "za", "B", "sb", "zb", "C"};
                if (quantized) ins.push_back("sy"), ins.push_back("zy");
                std::vector<Pb> attributes = {attr_int("transB", trans_b), attr_float("alpha", alpha)};
                std::string contrib = model_of({named_node("QGemm", "g", ins, {"y"}, attributes, kMs)},
                                               {value_info("a", UINT8, {m, k})}, inits, quantized ? UINT8 : FLOAT);
                Pb b_axis = attr_int("axis", trans_b ? 0 : 1), c_axis = attr_int("axis", 0);
                std::vector<Pb> nodes = {named_node("DequantizeLinear", "da", {"a", "sa", "za"}, {"fa"}),
                                         named_node("DequantizeLinear", "db", {"B", "sb", "zb"}, {"fb"}, {b_axis}),
                                         named_node("Mul", "sc", {"sa", "sb"}, {"sab"}),
                                         named_node("Mul", "sc2", {"sab", "alpha"}, {"sc_alpha"}),
                                         named_node("DequantizeLinear", "dc", {"C", "sc_alpha"}, {"fc"}, {c_axis}),
                                         named_node("Gemm", "gemm", {"fa", "fb", "fc"}, {quantized ? "fy" : "y"}, attributes)};
                if (quantized) nodes.push_back(named_node("QuantizeLinear", "q", {"fy", "sy", "zy"}, {"y"}));
                inits.push_back(scalar("alpha", alpha));
                std::string standard = model_of(nodes, {value_info("a", UINT8, {m, k})}, inits, quantized ? UINT8 : FLOAT);
                for (bool fusion : {true, false}) {
                    CAPTURE(fusion);
                    Out x = run(contrib, {a}, fusion), y = run(standard, {a}, fusion);
                    INFO(x.kernels);
                    CHECK(x.type == (quantized ? ElementType::UInt8 : ElementType::Float32));
                    CHECK(x.y == y.y);
                    if (fusion && quantized && alpha == 1.0f) CHECK(x.kernels.find(":Gemm") != std::string::npos);
                    // the integer sum: (sum (a - za) b + C) alpha sa sb[j], within one step (float: 1e-5 relative)
                    for (int64_t i = 0; i < m; ++i)
                        for (int64_t j = 0; j < n; ++j) {
                            int64_t acc = c[(size_t)j];
                            for (int64_t t = 0; t < k; ++t) acc += (int64_t)(a[(size_t)(i * k + t)] - za) * b[(size_t)(t * n + j)];
                            const double real = (double)acc * alpha * sa * sb[(size_t)j];
                            if (quantized) {
                                const int want = quantize((float)real, sy, zy, false);
                                CHECK(std::abs((int)x.y[(size_t)(i * n + j)] - want) <= 1);
                            } else {
                                float got;
                                std::memcpy(&got, &x.y[(size_t)(i * n + j) * 4], 4);
                                CHECK(std::fabs(got - real) <= 1e-5 * (std::fabs(real) + 1.0));
                            }
                        }
                }
            }
}

TEST_CASE("bad com.microsoft nodes: one Status each") {
    const std::vector<Pb> inputs = {value_info("a", UINT8, {4})};
    const std::vector<Pb> grids = {scalar("s", 0.5f), scalar_u8("z", 3)};
    std::string error;
    auto status_of = [&](const Pb& node) {
        Model m;
        Status s = read(m, model_of({node}, inputs, grids, UINT8));
        error = m.last_error();
        CHECK((s == Status::Ok || error.find("node '") != std::string::npos));   // the message names the node
        return s;
    };
    // an op of com.microsoft not read: the message lists those that are
    CHECK(status_of(named_node("QLinearWhere", "w", {"a"}, {"y"}, {}, kMs)) == Status::Unsupported);
    CHECK(error.find("QLinearConcat") != std::string::npos);
    CHECK(status_of(named_node("FusedConv", "w", {"a"}, {"y"}, {}, kMs)) == Status::Unsupported);
    // channels_last
    CHECK(status_of(named_node("QLinearGlobalAveragePool", "p", {"a", "s", "z", "s", "z"}, {"y"}, {attr_int("channels_last", 1)}, kMs)) ==
          Status::Unsupported);
    // inputs: too few, too many, a scale absent; Concat's triples
    CHECK(status_of(named_node("QLinearAdd", "q", {"a", "s", "z", "a", "s"}, {"y"}, {}, kMs)) == Status::InvalidArgument);
    CHECK(status_of(named_node("QLinearSigmoid", "q", {"a", "s", "z", "s", "z", "z"}, {"y"}, {}, kMs)) == Status::InvalidArgument);
    CHECK(status_of(named_node("QLinearAdd", "q", {"a", "s", "z", "a", "", "z", "s", "z"}, {"y"}, {}, kMs)) == Status::InvalidArgument);
    CHECK(status_of(named_node("QLinearSigmoid", "q", {"a", "s", "z", "", "z"}, {"y"}, {}, kMs)) == Status::InvalidArgument);
    CHECK(status_of(named_node("QLinearConcat", "q", {"s", "z", "a", "s"}, {"y"}, {attr_int("axis", 0)}, kMs)) == Status::InvalidArgument);
    CHECK(status_of(named_node("QLinearConcat", "q", {"s", "z", "a", "s", "z", "a"}, {"y"}, {attr_int("axis", 0)}, kMs)) ==
          Status::InvalidArgument);
    // outputs
    CHECK(status_of(named_node("QLinearSigmoid", "q", {"a", "s", "z", "s", "z"}, {"y", "y2"}, {}, kMs)) == Status::InvalidArgument);
    // QGemm with y_scale alone (onnxruntime would give floats divided by it)
    CHECK(status_of(named_node("QGemm", "g", {"a", "s", "z", "a", "s", "z", "", "s"}, {"y"}, {}, kMs)) == Status::Unsupported);
    // QLinearSoftmax whose opset reads axis 0 the other way than the model's
    CHECK(status_of(named_node("QLinearSoftmax", "q", {"a", "s", "z", "s", "z"}, {"y"}, {attr_int("opset", 11), attr_int("axis", 0)}, kMs)) ==
          Status::Unsupported);
    CHECK(status_of(named_node("QLinearSoftmax", "q", {"a", "s", "z", "s", "z"}, {"y"}, {attr_int("opset", 11)}, kMs)) == Status::Ok);
    // a graph attribute
    Pb body;
    body.bytes(1, "body").msg(6, graph(GraphSpec{})).u(20, 5);
    CHECK(status_of(named_node("QLinearSigmoid", "q", {"a", "s", "z", "s", "z"}, {"y"}, {body}, kMs)) == Status::Unsupported);
    // an input nothing produces
    CHECK(status_of(named_node("QLinearSigmoid", "q", {"a", "s", "nothing", "s", "z"}, {"y"}, {}, kMs)) == Status::DanglingInput);
    // the nodes made count against max_nodes
    {
        Limits limits;
        limits.max_nodes = 6;   // a, s, z, y and the node: 5; its DequantizeLinear and Sigmoid make 7
        Model m;
        std::string bytes = model_of({named_node("QLinearSigmoid", "q", {"a", "s", "z", "s", "z"}, {"y"}, {}, kMs)}, inputs, grids, UINT8);
        CHECK(m.read_onnx(bytes.data(), bytes.size(), StringView(), limits) == Status::LimitExceeded);
    }
}

TEST_CASE("a model of com.microsoft nodes cut or overwritten at every byte: a status, never a crash") {
    GraphSpec g;
    g.inputs = {value_info("a", UINT8, {2, 3}), value_info("b", UINT8, {2, 3})};
    g.initializers = {scalar("s", 0.5f), scalar_u8("z", 3)};
    g.nodes = {named_node("QLinearAdd", "add", {"a", "s", "z", "b", "s", "", "s", "z"}, {"sum"}, {}, kMs),
               named_node("QLinearConcat", "cat", {"s", "z", "sum", "s", "z", "a", "s", "z"}, {"cat_y"}, {attr_int("axis", 0)}, kMs),
               named_node("QGemm", "gemm", {"cat_y", "s", "z", "b", "s", "z", "", "s"}, {"g"}, {attr_float("alpha", 2.0f)}, kMs),
               named_node("QLinearSigmoid", "", {"a", "s", "z", "s"}, {"y"}, {}, kMs)};
    g.outputs = {test::output("y", UINT8), test::output("cat_y", UINT8)};
    const std::string bytes = model_proto(graph(g), 13, {{kMs, 1}}).b;
    uint32_t ok = 0, failed = 0;
    for (size_t n = 0; n <= bytes.size(); ++n) {
        std::string cut = bytes.substr(0, n);   // its own buffer: a read past it is caught by ASan
        Model m;
        Status status = read(m, cut);
        if (status == Status::Ok) {
            ++ok;
        } else {
            ++failed;
            CHECK(std::strlen(m.last_error()) > 0);
        }
        CHECK((status == Status::Ok) == m.graph.finalized());
    }
    const unsigned char values[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    for (size_t at = 0; at < bytes.size(); ++at)
        for (unsigned char v : values) {
            std::string changed = bytes;
            changed[at] = (char)v;
            Model m;
            Status status = read(m, changed);
            if (status == Status::Ok) ++ok;
            else ++failed;
            CHECK((status == Status::Ok) == m.graph.finalized());
        }
    CHECK(ok > 0);
    CHECK(failed > 0);
}

}  // TEST_SUITE
