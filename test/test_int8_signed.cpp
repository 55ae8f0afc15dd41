// Signed activations (onnxruntime's default QInt8): prepare makes an int8 activation that only
// DequantizeLinear, QLinearConv and QLinearMatMul read uint8, 128 up, with its zero points.
// Each signed model is compared with its uint8 twin (the same values 128 apart): the same output
// bits and the same CPU steps at every ISA and at 1 and 2 threads, and the same bits on
// TEMPLATE (the reference kernels). Where an int8 value is seen (a model output, another reader, a zero point
// known only at run time) it is int8, checked against QuantizeLinear's formula. An int8 model
// input and output reach and leave the uint8 kernels through byte tables (recasts).
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

struct Grid {
    float scale;
    int zero;   // in uint8 terms; int8 models use zero - 128
};

// A zero point of `count` values (a scalar for 0) of the grid, int8 when `is_signed`.
InputRef zero_point(OpTest& t, int zero, bool is_signed, int64_t count = 0) {
    const Shape shape = count ? Shape{count} : Shape{};
    const size_t n = count ? (size_t)count : 1;
    std::vector<uint8_t> u(n);
    std::vector<int8_t> s(n);
    for (size_t k = 0; k < n; ++k) {   // per channel: zero, zero + 3, ... (wrapped into [0, 255])
        u[k] = (uint8_t)((zero + 3 * (int)k) % 256);
        s[k] = (int8_t)((int)u[k] - 128);
    }
    return is_signed ? t.constant(shape, s) : t.constant(shape, u);
}
InputRef scale_of(OpTest& t, float scale) { return t.constant(Shape{}, std::vector<float>{scale}); }
InputRef quantize(OpTest& t, InputRef x, Grid g, bool is_signed) {
    return InputRef::by_id(t.op("QuantizeLinear", {x, scale_of(t, g.scale), zero_point(t, g.zero, is_signed)}));
}
InputRef dequantize(OpTest& t, InputRef q, Grid g, bool is_signed) {
    return InputRef::by_id(t.op("DequantizeLinear", {q, scale_of(t, g.scale), zero_point(t, g.zero, is_signed)}));
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (float& f : v) f = u(rng);
    return v;
}

// A conv's weights as a quantizer writes them: int8 in [-127, 127] through a per-map
// DequantizeLinear (axis 0, zero point 0).
InputRef int8_weights(OpTest& t, const Shape& shape, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int8_t> q((size_t)test::count_of(shape));
    for (int8_t& v : q) v = (int8_t)((int)(rng() % 255) - 127);
    std::vector<float> scales((size_t)shape[0]);
    for (float& s : scales) s = std::ldexp(1.0f + (float)(rng() % 100) / 100.0f, -8);
    InputRef w = InputRef::by_id(t.op("DequantizeLinear", {t.constant(shape, q), t.constant(Shape{shape[0]}, scales),
                                                          t.constant(Shape{shape[0]}, std::vector<int8_t>((size_t)shape[0], 0))}));
    t.set_int("axis", 0);
    return w;
}

// A small conv net with QuantizeLinear -> DequantizeLinear around each op (a QDQ quantizer's
// form): Conv 3x3 + Relu, MaxPool, Conv 1x1, a residual Add, GlobalAveragePool; the last
// DequantizeLinear's floats are y.
void build_net(OpTest& t, bool is_signed) {
    const Grid gx{0.02f, 120}, g1{0.03f, 10}, g2{0.025f, 140}, g3{0.04f, 128}, g4{0.01f, 5};
    InputRef x = t.input(Shape{1, 8, 12, 12}, random_floats(8 * 12 * 12, 7, -2.0f, 2.5f));
    InputRef a = dequantize(t, quantize(t, x, gx, is_signed), gx, is_signed);
    InputRef c1 = InputRef::by_id(t.op("Conv", {a, int8_weights(t, Shape{16, 8, 3, 3}, 11), t.constant(Shape{16}, random_floats(16, 3, -0.5f, 0.5f))}));
    t.set_ints("pads", {1, 1, 1, 1});
    InputRef r1 = InputRef::by_id(t.op("Relu", {c1}));
    InputRef p_in = dequantize(t, quantize(t, r1, g1, is_signed), g1, is_signed);
    InputRef pool = InputRef::by_id(t.op("MaxPool", {p_in}));
    t.set_ints("kernel_shape", {2, 2});
    t.set_ints("strides", {2, 2});
    InputRef pool_q = quantize(t, pool, g1, is_signed);
    InputRef c2 = InputRef::by_id(t.op("Conv", {dequantize(t, pool_q, g1, is_signed), int8_weights(t, Shape{16, 16, 1, 1}, 13)}));
    InputRef b = dequantize(t, quantize(t, c2, g2, is_signed), g2, is_signed);
    InputRef sum = InputRef::by_id(t.op("Add", {b, dequantize(t, pool_q, g1, is_signed)}));
    InputRef s = dequantize(t, quantize(t, sum, g3, is_signed), g3, is_signed);
    InputRef avg = InputRef::by_id(t.op("GlobalAveragePool", {s}));
    dequantize(t, quantize(t, avg, g4, is_signed), g4, is_signed);
}

struct Outputs {
    std::vector<std::vector<unsigned char>> bytes;   // per output
    std::vector<ElementType> types;
    std::string kernels;
};

// Compiles t (its outputs added) on `device` with PERF_COUNT, on the CPU at `isa` ("" for the
// default) and `threads`, and infers once.
Outputs run_on(OpTest& t, const char* device, const std::string& isa, uint32_t threads) {
    REQUIRE(t.model.finalize() == Status::Ok);
    const std::string count = std::to_string(threads);
    std::vector<ConfigEntry> config = {{"PERF_COUNT", "YES"}};
    if (std::string(device) == "CPU") config.push_back({"NUM_THREADS", StringView(count.c_str())});
    if (!isa.empty()) config.push_back({"ISA", StringView(isa.c_str())});
    test::CompiledRun run;
    test::compile_and_infer(t, device, Span<const ConfigEntry>(config.data(), config.size()), &run);
    Outputs o;
    o.kernels = run.kernels;
    run.read_outputs(&o.bytes, &o.types);
    return o;
}

// The twin and the signed model make(t, is_signed) makes, run on the CPU at every ISA of the
// machine (and the default) and at 1 and 2 threads: check(twin's, signed's, at default ISA and
// one thread) for each.
template <class Make, class Check>
void each_cpu_run(Make make, Check check) {
    for (Isa isa : {Isa::Auto, Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (isa != Isa::Auto && !isa_available(isa)) continue;
        for (uint32_t threads : {1u, 2u}) {
            const std::string name = isa == Isa::Auto ? "" : isa_name(isa);
            CAPTURE(name);
            CAPTURE(threads);
            OpTest twin, signed_model;
            make(twin, false);
            make(signed_model, true);
            check(run_on(twin, "CPU", name, threads), run_on(signed_model, "CPU", name, threads), isa == Isa::Auto && threads == 1);
        }
    }
}

// build(t, is_signed) makes the last node's output y. The signed model against its uint8 twin:
// the twin's bits on TEMPLATE (the reference kernels), and on the CPU at every ISA and at 1 and
// 2 threads through the same steps. (The CPU's int8 groups may differ from the float reference
// by a step, so each device is compared with itself.) Returns the twin's CPU kernels at the
// default ISA.
template <class Build>
std::string check_like_twin(Build build) {
    auto make = [&](OpTest& t, bool is_signed) {
        build(t, is_signed);
        REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    };
    OpTest twin_on_template, signed_on_template;
    make(twin_on_template, false);
    make(signed_on_template, true);
    CHECK(run_on(signed_on_template, "TEMPLATE", "", 1).bytes == run_on(twin_on_template, "TEMPLATE", "", 1).bytes);
    std::string default_kernels;
    each_cpu_run(make, [&](const Outputs& u, const Outputs& s, bool by_default) {
        CHECK(s.kernels == u.kernels);
        CHECK(s.bytes == u.bytes);
        if (by_default) default_kernels = u.kernels;
    });
    return default_kernels;
}

// QuantizeLinear's int8 result: x / scale in float32, ties to even, plus the zero point, saturated.
int8_t quantize_int8(float x, float scale, int zero) {
    const float q = std::nearbyint(x / scale) + (float)zero;
    return (int8_t)std::min(127.0f, std::max(-128.0f, q));
}
}  // namespace

TEST_CASE("int8 signed activations: a QDQ conv net with int8 activations runs the uint8 twin's steps, its bits") {
    const std::string kernels = check_like_twin([](OpTest& t, bool is_signed) { build_net(t, is_signed); });
    INFO(kernels);
    CHECK(kernels.find("int8:") != std::string::npos);
    CHECK(kernels.find("Conv") != std::string::npos);
    CHECK(kernels.find("MaxPool") != std::string::npos);
}

TEST_CASE("int8 signed activations: zero points per channel, absent ones with output_dtype, a QuantizeLinear read twice") {
    // DequantizeLinear per channel (axis 1) of a per-tensor int8 activation: each zero point moved
    SUBCASE("per-channel zero points") {
        check_like_twin([](OpTest& t, bool is_signed) {
            InputRef x = t.input(Shape{2, 5, 3}, random_floats(30, 5, -3.0f, 3.0f));
            InputRef q = quantize(t, x, Grid{0.05f, 100}, is_signed);
            std::vector<float> scales = {0.05f, 0.04f, 0.03f, 0.02f, 0.01f};
            t.op("DequantizeLinear", {q, t.constant(Shape{5}, scales), zero_point(t, 100, is_signed, 5)});
            t.set_int("axis", 1);
        });
    }
    // opset 21: QuantizeLinear without a zero point, int8 by output_dtype, DequantizeLinear without one
    SUBCASE("absent zero points, output_dtype int8") {
        check_like_twin([](OpTest& t, bool is_signed) {
            t.model.opset = 21;   // output_dtype
            InputRef x = t.input(Shape{1, 4, 6, 6}, random_floats(144, 9, -3.0f, 3.0f));
            InputRef q;
            if (is_signed) {
                q = InputRef::by_id(t.op("QuantizeLinear", {x, scale_of(t, 0.03f)}));
                t.set_int("output_dtype", 3);   // INT8
            } else {
                q = quantize(t, x, Grid{0.03f, 128}, false);
            }
            InputRef d = is_signed ? InputRef::by_id(t.op("DequantizeLinear", {q, scale_of(t, 0.03f)})) : dequantize(t, q, Grid{0.03f, 128}, false);
            InputRef c = InputRef::by_id(t.op("Conv", {d, int8_weights(t, Shape{8, 4, 3, 3}, 17)}));
            dequantize(t, quantize(t, c, Grid{0.05f, 70}, is_signed), Grid{0.05f, 70}, is_signed);
        });
    }
    // One QuantizeLinear read by two DequantizeLinears of different zero points (the same grid
    // after the move), then added
    SUBCASE("two readers") {
        check_like_twin([](OpTest& t, bool is_signed) {
            InputRef x = t.input(Shape{1, 3, 4, 4}, random_floats(48, 13, -1.0f, 1.0f));
            InputRef q = quantize(t, x, Grid{0.01f, 128}, is_signed);
            InputRef a = dequantize(t, q, Grid{0.01f, 128}, is_signed), b = dequantize(t, q, Grid{0.02f, 0}, is_signed);
            t.op("Add", {a, b});
        });
    }
}

TEST_CASE("int8 signed activations: QLinearConv and QLinearMatMul with int8 x and y run the uint8 twin's steps, its bits") {
    SUBCASE("QLinearConv") {
        const std::string kernels = check_like_twin([](OpTest& t, bool is_signed) {
            const Grid gx{0.02f, 100}, gy{0.05f, 150};
            InputRef x = t.input(Shape{1, 16, 9, 9}, random_floats(16 * 81, 21, -2.0f, 2.0f));
            InputRef q = quantize(t, x, gx, is_signed);
            std::mt19937 rng(23);
            std::vector<int8_t> w(32 * 16 * 9);
            for (int8_t& v : w) v = (int8_t)((int)(rng() % 255) - 127);
            std::vector<int32_t> bias(32);
            for (int32_t& v : bias) v = (int32_t)(rng() % 2001) - 1000;
            NodeId conv = t.op("QLinearConv", {q, scale_of(t, gx.scale), zero_point(t, gx.zero, is_signed), t.constant(Shape{32, 16, 3, 3}, w),
                                               t.constant(Shape{32}, std::vector<float>(32, 0.004f)), t.constant(Shape{32}, std::vector<int8_t>(32, 0)),
                                               scale_of(t, gy.scale), zero_point(t, gy.zero, is_signed), t.constant(Shape{32}, bias)});
            t.set_ints("pads", {1, 1, 1, 1});
            dequantize(t, InputRef::by_id(conv), gy, is_signed);
        });
        INFO(kernels);
        CHECK(kernels.find("QLinearConv") != std::string::npos);
        CHECK(kernels.find("int8:") != std::string::npos);
    }
    SUBCASE("QLinearMatMul, both operands activations") {
        check_like_twin([](OpTest& t, bool is_signed) {
            const Grid ga{0.02f, 90}, gb{0.03f, 160}, gy{0.2f, 128};
            InputRef a = quantize(t, t.input(Shape{2, 5, 7}, random_floats(70, 29, -2.0f, 2.0f)), ga, is_signed);
            InputRef b = quantize(t, t.input(Shape{2, 7, 6}, random_floats(84, 31, -2.0f, 2.0f)), gb, is_signed);
            NodeId mm = t.op("QLinearMatMul", {a, scale_of(t, ga.scale), zero_point(t, ga.zero, is_signed), b, scale_of(t, gb.scale),
                                               zero_point(t, gb.zero, is_signed), scale_of(t, gy.scale), zero_point(t, gy.zero, is_signed)});
            dequantize(t, InputRef::by_id(mm), gy, is_signed);
        });
    }
}

TEST_CASE("int8 signed activations: an int8 value a model output or another op reads, or with a run-time zero point, is int8 there") {
    const std::vector<float> xs = random_floats(60, 41, -4.0f, 4.0f);
    const float scale = 0.03f;
    const int zero = -20;
    std::vector<int8_t> want(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) want[i] = quantize_int8(xs[i], scale, zero);
    auto as_int8 = [](const std::vector<unsigned char>& b) { return std::vector<int8_t>(b.begin(), b.end()); };
    auto dequantized = [&](const std::vector<int8_t>& q) {
        std::vector<unsigned char> bytes(q.size() * sizeof(float));
        for (size_t i = 0; i < q.size(); ++i) {
            const float f = (float)((int)q[i] - zero) * scale;
            std::memcpy(&bytes[i * sizeof(float)], &f, sizeof f);
        }
        return bytes;
    };
    auto quantized = [&](OpTest& t, InputRef zero_point) {
        return InputRef::by_id(t.op("QuantizeLinear", {t.input(Shape{3, 20}, xs), scale_of(t, scale), zero_point}));
    };
    auto int8_zero = [&](OpTest& t) { return t.constant(Shape{}, std::vector<int8_t>{(int8_t)zero}); };
    // outputs: the int8 values as they are, and their DequantizeLinear's floats
    auto check_int8_and_floats = [&](OpTest& t, const std::string& device) {
        const Outputs o = run_on(t, device.c_str(), "", 1);
        REQUIRE(o.bytes.size() == 2);
        CHECK(o.types[0] == ElementType::Int8);
        CHECK(as_int8(o.bytes[0]) == want);
        CHECK(o.bytes[1] == dequantized(want));
    };
    for (std::string device : {"CPU", "TEMPLATE"}) {
        CAPTURE(device);
        {   // a model output, and a DequantizeLinear reads it
            OpTest t;
            InputRef q = quantized(t, int8_zero(t));
            NodeId d = t.op("DequantizeLinear", {q, scale_of(t, scale), int8_zero(t)});
            REQUIRE(t.model.add_output("q", q) == Status::Ok);
            REQUIRE(t.model.add_output("d", InputRef::by_id(d)) == Status::Ok);
            check_int8_and_floats(t, device);
        }
        {   // a Reshape reads it, and a DequantizeLinear
            OpTest t;
            InputRef q = quantized(t, int8_zero(t));
            NodeId r = t.op("Reshape", {q, t.constant(Shape{2}, std::vector<int64_t>{6, 10})});
            NodeId d = t.op("DequantizeLinear", {q, scale_of(t, scale), int8_zero(t)});
            REQUIRE(t.model.add_output("r", InputRef::by_id(r)) == Status::Ok);
            REQUIRE(t.model.add_output("d", InputRef::by_id(d)) == Status::Ok);
            check_int8_and_floats(t, device);
        }
        {   // its zero point a model input
            OpTest t;
            InputRef q = quantized(t, t.input(Shape{}, std::vector<int8_t>{(int8_t)zero}));
            NodeId d = t.op("DequantizeLinear", {q, scale_of(t, scale), int8_zero(t)});
            REQUIRE(t.model.add_output("d", InputRef::by_id(d)) == Status::Ok);
            const Outputs o = run_on(t, device.c_str(), "", 1);
            REQUIRE(o.bytes.size() == 1);
            CHECK(o.bytes[0] == dequantized(want));
        }
    }
}

namespace {
// A model input of every byte value (every_byte's order from `seed`): int8 when `is_signed`,
// else uint8, the same values 128 up.
InputRef quantized_input(OpTest& t, const Shape& shape, bool is_signed, uint32_t seed) {
    const std::vector<uint8_t> u = test::every_byte(shape, 2 * seed + 1, seed);
    if (!is_signed) return t.input(shape, u);
    std::vector<int8_t> s(u.size());
    for (size_t k = 0; k < u.size(); ++k) s[k] = (int8_t)((int)u[k] - 128);
    return t.input(shape, s);
}

// build(t, is_signed) makes a model whose int8 input and int8 output (y, the last node's) are
// uint8 in its twin. On TEMPLATE and on the CPU at every ISA and 1 and 2 threads: y is int8, its
// values the twin's 128 down, and the CPU runs the twin's steps and two byte tables (the
// input's recast to uint8 and y's to int8). Returns the signed model's CPU kernels at the default ISA.
template <class Build>
std::string check_ends_like_twin(Build build) {
    auto make = [&](OpTest& t, bool is_signed) {
        build(t, is_signed);
        REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    };
    // the steps' kernel names but the byte tables' ("int8:avx2:Table"), and how many those are
    auto split = [](const std::string& kernels, bool want_tables) {
        std::vector<std::string> names;
        size_t from = 0;
        for (size_t to; (to = kernels.find(' ', from)) != std::string::npos; from = to + 1) {
            const std::string name = kernels.substr(from, to - from);
            const bool table = name.size() >= 6 && name.compare(name.size() - 6, 6, ":Table") == 0;
            if (table == want_tables) names.push_back(name);
        }
        return names;
    };
    auto without_tables = [&](const std::string& kernels) { return split(kernels, false); };
    auto tables = [&](const std::string& kernels) { return split(kernels, true).size(); };
    auto down = [](const Outputs& twin) {
        std::vector<unsigned char> b = twin.bytes.at(0);
        for (unsigned char& v : b) v = (unsigned char)(v ^ 0x80);
        return b;
    };
    std::string default_kernels;
    each_cpu_run(make, [&](const Outputs& u, const Outputs& s, bool by_default) {
        REQUIRE(s.bytes.size() == 1);
        CHECK(s.types.at(0) == ElementType::Int8);
        CHECK(s.bytes.at(0) == down(u));
        CHECK(without_tables(s.kernels) == without_tables(u.kernels));
        CHECK(tables(s.kernels) == tables(u.kernels) + 2);
        if (by_default) default_kernels = s.kernels;
    });
    OpTest twin, signed_model;
    make(twin, false);
    make(signed_model, true);
    const Outputs u = run_on(twin, "TEMPLATE", "", 1), s = run_on(signed_model, "TEMPLATE", "", 1);
    CHECK(s.types.at(0) == ElementType::Int8);
    CHECK(s.bytes.at(0) == down(u));
    return default_kernels;
}
}  // namespace

TEST_CASE("int8 signed activations: an int8 model input and an int8 model output, a QDQ conv and a QLinearConv between") {
    SUBCASE("QDQ conv: DequantizeLinear(x) -> Conv -> Relu -> QuantizeLinear -> y") {
        const std::string kernels = check_ends_like_twin([](OpTest& t, bool is_signed) {
            const Grid gx{0.02f, 110}, gy{0.03f, 20};
            InputRef x = dequantize(t, quantized_input(t, Shape{1, 8, 10, 10}, is_signed, 51), gx, is_signed);
            InputRef c = InputRef::by_id(t.op("Conv", {x, int8_weights(t, Shape{16, 8, 3, 3}, 53), t.constant(Shape{16}, random_floats(16, 5, -0.3f, 0.3f))}));
            t.set_ints("pads", {1, 1, 1, 1});
            quantize(t, InputRef::by_id(t.op("Relu", {c})), gy, is_signed);
        });
        INFO(kernels);
        CHECK(kernels.find("int8:") != std::string::npos);
        CHECK(kernels.find("Conv") != std::string::npos);
    }
    SUBCASE("QLinearConv, its x a model input and y a model output") {
        const std::string kernels = check_ends_like_twin([](OpTest& t, bool is_signed) {
            const Grid gx{0.02f, 100}, gy{0.05f, 150};
            InputRef q = quantized_input(t, Shape{1, 16, 7, 7}, is_signed, 57);
            std::mt19937 rng(59);
            std::vector<int8_t> w(24 * 16 * 9);
            for (int8_t& v : w) v = (int8_t)((int)(rng() % 255) - 127);
            t.op("QLinearConv", {q, scale_of(t, gx.scale), zero_point(t, gx.zero, is_signed), t.constant(Shape{24, 16, 3, 3}, w),
                                 t.constant(Shape{24}, std::vector<float>(24, 0.003f)), t.constant(Shape{24}, std::vector<int8_t>(24, 0)),
                                 scale_of(t, gy.scale), zero_point(t, gy.zero, is_signed)});
            t.set_ints("pads", {1, 1, 1, 1});
        });
        INFO(kernels);
        CHECK(kernels.find("QLinearConv") != std::string::npos);
    }
}

TEST_CASE("int8 signed activations: an int8 model input also read as int8 keeps its values there") {
    // x is read by a DequantizeLinear (as uint8, through the recast) and by a Reshape (as it is)
    const std::vector<int8_t> xs = {-128, -100, -1, 0, 1, 50, 126, 127};
    for (std::string device : {"CPU", "TEMPLATE"}) {
        CAPTURE(device);
        OpTest t;
        InputRef x = t.input(Shape{2, 4}, xs);
        NodeId d = t.op("DequantizeLinear", {x, scale_of(t, 0.5f), t.constant(Shape{}, std::vector<int8_t>{-3})});
        NodeId r = t.op("Reshape", {x, t.constant(Shape{1}, std::vector<int64_t>{8})});
        REQUIRE(t.model.add_output("d", InputRef::by_id(d)) == Status::Ok);
        REQUIRE(t.model.add_output("r", InputRef::by_id(r)) == Status::Ok);
        const Outputs o = run_on(t, device.c_str(), "", 1);
        REQUIRE(o.bytes.size() == 2);
        std::vector<float> want(xs.size());
        for (size_t i = 0; i < xs.size(); ++i) want[i] = (float)((int)xs[i] + 3) * 0.5f;
        std::vector<float> got(want.size());
        REQUIRE(o.bytes[0].size() == got.size() * sizeof(float));
        std::memcpy(got.data(), o.bytes[0].data(), o.bytes[0].size());
        CHECK(got == want);
        CHECK(o.types[1] == ElementType::Int8);
        CHECK(std::vector<int8_t>(o.bytes[1].begin(), o.bytes[1].end()) == xs);
    }
}

TEST_CASE("int8 signed activations: a compiled blob of a model with int8 ends imports and runs the same steps and bits") {
    OpTest t;
    const Grid gx{0.02f, 110}, gy{0.03f, 20};
    InputRef x = dequantize(t, quantized_input(t, Shape{1, 8, 10, 10}, true, 61), gx, true);
    InputRef c = InputRef::by_id(t.op("Conv", {x, int8_weights(t, Shape{16, 8, 3, 3}, 63)}));
    t.set_ints("pads", {1, 1, 1, 1});
    quantize(t, c, gy, true);
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    ConfigEntry config[] = {{"PERF_COUNT", "YES"}};
    test::CompiledRun run;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 1), &run);
    std::string blob;
    REQUIRE(run.compiled.export_model(test::append_to_string, &blob) == Status::Ok);
    Core core;
    CompiledModel imported;
    Status s = core.import_model(blob.data(), blob.size(), &imported);
    INFO(std::string(core.last_error()));
    REQUIRE(s == Status::Ok);   // each recast made once: no name twice
    if (s != Status::Ok) return;   // (REQUIRE does not leave the test case without exceptions)
    InferRequest request;
    REQUIRE(imported.create_request(&request) == Status::Ok);
    const std::vector<unsigned char>& in = t.data[t.runtime_inputs.at(0)];
    REQUIRE(request.input(0).bytes() == in.size());
    std::memcpy(request.input(0).data(), in.data(), in.size());
    REQUIRE(request.infer() == Status::Ok);
    std::string kernels;
    for (const ProfileEntry& e : request.profiling_info()) kernels += std::string(e.kernel) + " ";
    CHECK(kernels == run.kernels);
    const Tensor& y = request.output(0), &want = run.request.output(0);
    CHECK(y.desc().type == ElementType::Int8);
    REQUIRE(y.bytes() == want.bytes());
    CHECK(std::memcmp(y.data(), want.data(), y.bytes()) == 0);
}

TEST_CASE("int8 signed activations: data movement between QuantizeLinear and DequantizeLinear moves them as uint8") {
    // MaxPool, Transpose, Reshape, Slice, Flatten on the int8 values: the twin's steps and bits
    const std::string kernels = check_like_twin([](OpTest& t, bool is_signed) {
        const Grid gx{0.02f, 90}, gy{0.04f, 60};
        InputRef q = quantize(t, t.input(Shape{1, 8, 7, 7}, random_floats(8 * 49, 71, -2.0f, 2.0f)), gx, is_signed);
        InputRef pool = InputRef::by_id(t.op("MaxPool", {q}));
        t.set_ints("kernel_shape", {2, 2});
        InputRef moved = InputRef::by_id(t.op("Transpose", {pool}));
        t.set_ints("perm", {0, 1, 3, 2});
        moved = InputRef::by_id(t.op("Reshape", {moved, t.constant(Shape{4}, std::vector<int64_t>{1, 8, 6, 6})}));
        moved = InputRef::by_id(t.op("Slice", {moved, t.constant(Shape{1}, std::vector<int64_t>{1}), t.constant(Shape{1}, std::vector<int64_t>{6}),
                                              t.constant(Shape{1}, std::vector<int64_t>{2})}));
        InputRef c = InputRef::by_id(t.op("Conv", {dequantize(t, moved, gx, is_signed), int8_weights(t, Shape{16, 8, 3, 3}, 73)}));
        t.set_ints("pads", {1, 1, 1, 1});
        InputRef f = InputRef::by_id(t.op("Flatten", {quantize(t, c, gy, is_signed)}));
        dequantize(t, f, gy, is_signed);
    });
    INFO(kernels);
    CHECK(kernels.find("int8:") != std::string::npos);
    CHECK(kernels.find("Conv") != std::string::npos);
}

TEST_CASE("int8 signed activations: moved int8 values a model output reads are int8 there") {
    // Q -> Transpose -> DequantizeLinear, the Transpose's value a model output too
    const std::vector<float> xs = random_floats(24, 81, -3.0f, 3.0f);
    const float scale = 0.025f;
    const int zero = 7;
    for (std::string device : {"CPU", "TEMPLATE"}) {
        CAPTURE(device);
        OpTest t;
        InputRef q = InputRef::by_id(t.op("QuantizeLinear", {t.input(Shape{4, 6}, xs), scale_of(t, scale),
                                                              t.constant(Shape{}, std::vector<int8_t>{(int8_t)zero})}));
        NodeId tr = t.op("Transpose", {q});
        NodeId d = t.op("DequantizeLinear", {InputRef::by_id(tr), scale_of(t, scale), t.constant(Shape{}, std::vector<int8_t>{(int8_t)zero})});
        REQUIRE(t.model.add_output("moved", InputRef::by_id(tr)) == Status::Ok);
        REQUIRE(t.model.add_output("d", InputRef::by_id(d)) == Status::Ok);
        const Outputs o = run_on(t, device.c_str(), "", 1);
        REQUIRE(o.bytes.size() == 2);
        std::vector<int8_t> want(xs.size());
        std::vector<float> floats(xs.size());
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < 6; ++c) {   // y[c][r] = x[r][c]
                want[(size_t)(c * 4 + r)] = quantize_int8(xs[(size_t)(r * 6 + c)], scale, zero);
                floats[(size_t)(c * 4 + r)] = (float)((int)want[(size_t)(c * 4 + r)] - zero) * scale;
            }
        CHECK(o.types[0] == ElementType::Int8);
        CHECK(std::vector<int8_t>(o.bytes[0].begin(), o.bytes[0].end()) == want);
        std::vector<float> got(floats.size());
        REQUIRE(o.bytes[1].size() == got.size() * sizeof(float));
        std::memcpy(got.data(), o.bytes[1].data(), o.bytes[1].size());
        CHECK(got == floats);
    }
}
