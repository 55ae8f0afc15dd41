// Dynamically quantized models (onnxruntime's quantize_dynamic: DynamicQuantizeLinear ->
// MatMulInteger -> Cast -> Mul) on the CPU device, on the target from TESSEL_ISA, 1 and 2 threads:
// MatMulInteger with a constant B (int8 or uint8, zero point absent, one or one per column; A
// uint8 or int8 with one zero point, given at run time) bit for bit against the exact integer
// sums done here (wrapping int32), across tails of M, K and N, batch dims, and K long enough that
// its sums pass 2^24 (the float GEMM path then sums K in blocks); DynamicQuantizeLinear's three
// outputs bit for bit against the reference kernel (NaN, infinities, signed zeros, ties, every
// tail of a vector); Cast int32 -> float32 against C++'s conversion.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

// The JIT GEMM runs on the default target (else MatMulInteger stays on the reference).
bool gemm_jit() {
    Gemm g;
    return g.init() == Status::Ok && g.jit();
}

struct MatMulIntegerCase {
    Shape a;                       // [..., M, K]
    int64_t n = 0;
    ElementType a_type = ElementType::UInt8, b_type = ElementType::Int8;
    int b_zero_points = 0;         // 0: absent, 1: one, 2: one per column
    bool a_zero_point = true;
    bool extreme = false;          // A at its largest distance from its zero point, B at its most negative
    bool narrow = false;           // B - zb within [-64, 64] (AVX2's byte-pair tiles)
};

template <class T>
std::vector<T> random_bytes(size_t n, std::mt19937& rng) {
    std::vector<T> v(n);
    for (T& x : v) x = (T)(rng() & 0xFF);
    return v;
}

void check_matmul_integer(const MatMulIntegerCase& cc, uint32_t threads) {
    std::mt19937 rng(7u + (uint32_t)cc.n);
    const int64_t k = cc.a.back(), n = cc.n;
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < cc.a.size(); ++d) rows *= cc.a[d];
    const bool a_signed = cc.a_type == ElementType::Int8, b_signed = cc.b_type == ElementType::Int8;
    std::vector<uint8_t> a = random_bytes<uint8_t>((size_t)(rows * k), rng), b = random_bytes<uint8_t>((size_t)(k * n), rng);
    std::vector<uint8_t> zb = random_bytes<uint8_t>(cc.b_zero_points == 2 ? (size_t)n : 1, rng);
    uint8_t za = (uint8_t)(rng() & 0xFF);
    if (cc.extreme) {   // A - za = 255 (or -255 for int8: -128 - 127), B - zb = -128 or -255
        za = a_signed ? (uint8_t)127 : 0;
        for (uint8_t& x : a) x = a_signed ? (uint8_t)0x80 : 255;
        for (uint8_t& x : b) x = b_signed ? (uint8_t)0x80 : 0;
        for (uint8_t& z : zb) z = b_signed ? 0 : 255;
    }
    if (cc.narrow)
        for (uint8_t& x : b) x = (uint8_t)(int8_t)((int)(x % 129) - 64);
    auto value = [](uint8_t byte, bool is_signed) { return is_signed ? (int32_t)(int8_t)byte : (int32_t)byte; };
    // the path the CPU should take: Int8Gemm's tiles where every B - zb fits int8, else the float GEMM
    bool fits = true;
    for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) {
            const int32_t zbv = cc.b_zero_points ? value(zb[cc.b_zero_points == 2 ? (size_t)j : 0], b_signed) : 0;
            const int32_t w = value(b[(size_t)(p * n + j)], b_signed) - zbv;
            fits = fits && w >= -128 && w <= 127;
        }
    OpTest t;
    t.opset = 13;
    std::vector<InputRef> in = {t.input<uint8_t>(cc.a, a, cc.a_type), t.constant<uint8_t>(Shape{k, n}, b, cc.b_type)};
    in.push_back(cc.a_zero_point ? t.input<uint8_t>(Shape{}, std::vector<uint8_t>{za}, cc.a_type) : t.absent());
    if (cc.b_zero_points) in.push_back(t.constant<uint8_t>(cc.b_zero_points == 2 ? Shape{n} : Shape{}, zb, cc.b_type));
    t.op("MatMulInteger", in);
    test::CpuRun run = test::run_last_node_on_cpu(t, threads, true);
    INFO(run.kernels);
    CAPTURE(fits);
    const bool int8 = fits && default_isa() != Isa::Ref, gemm = !int8 && gemm_jit();
    CHECK((run.kernels.find("int8:") != std::string::npos) == int8);
    CHECK((run.kernels.find("gemm:") != std::string::npos) == gemm);
    CHECK(run.kernels.find(":MatMulInteger") != std::string::npos);
    REQUIRE(run.bytes.size() == (size_t)(rows * n) * 4);
    std::vector<int32_t> y((size_t)(rows * n));
    std::memcpy(y.data(), run.bytes.data(), run.bytes.size());
    int64_t bad = 0;
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j) {
            uint32_t sum = 0;   // wraps, as int32 arithmetic does in the spec's reference
            const int32_t zbv = cc.b_zero_points ? value(zb[cc.b_zero_points == 2 ? (size_t)j : 0], b_signed) : 0;
            const int32_t zav = cc.a_zero_point ? value(za, a_signed) : 0;
            for (int64_t p = 0; p < k; ++p)
                sum += (uint32_t)((value(a[(size_t)(i * k + p)], a_signed) - zav) * (value(b[(size_t)(p * n + j)], b_signed) - zbv));
            if (y[(size_t)(i * n + j)] != (int32_t)sum && bad++ < 5)
                MESSAGE("y[" << i << "][" << j << "] = " << y[(size_t)(i * n + j)] << ", want " << (int32_t)sum);
        }
    CHECK(bad == 0);
}

// DynamicQuantizeLinear's outputs (y, scale, zero point) on the CPU at the default target and at ref.
std::vector<unsigned char> dynamic_quantize(const std::vector<float>& x, uint32_t threads, const char* isa, std::string* kernels) {
    OpTest t;
    t.opset = 11;
    t.op("DynamicQuantizeLinear", {t.input(Shape{(int64_t)x.size()}, x)}, 3);
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.add_output("scale", InputRef::by_id(t.node, 1)) == Status::Ok);
    REQUIRE(t.model.add_output("zero", InputRef::by_id(t.node, 2)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}, {"ISA", isa ? isa : ""}};
    test::CompiledRun run;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, isa ? 3 : 2), &run);
    *kernels = run.kernels;
    std::vector<unsigned char> bytes;
    for (uint32_t o = 0; o < run.compiled.output_count(); ++o) {
        const Tensor& out = run.request.output(o);
        const unsigned char* p = static_cast<const unsigned char*>(out.data());
        bytes.insert(bytes.end(), p, p + out.bytes());
    }
    return bytes;
}
}  // namespace

TEST_CASE("int8 dynamic: MatMulInteger with a constant B equals the exact integer sums") {
    std::vector<MatMulIntegerCase> cases;
    for (Shape a : {Shape{1, 1}, Shape{3, 5}, Shape{17, 64}, Shape{33, 100}, Shape{64, 257}, Shape{200, 70}, Shape{2, 3, 9, 31}, Shape{40}})
        for (int64_t n : {1, 7, 16, 50}) {
            MatMulIntegerCase c;
            c.a = a;
            c.n = n;
            cases.push_back(c);
        }
    for (ElementType at : {ElementType::UInt8, ElementType::Int8})
        for (ElementType bt : {ElementType::Int8, ElementType::UInt8})
            for (int zb : {0, 1, 2})
                for (bool za : {false, true}) {
                    MatMulIntegerCase c;
                    c.a = Shape{19, 70};
                    c.n = 45;
                    c.a_type = at, c.b_type = bt, c.b_zero_points = zb, c.a_zero_point = za;
                    cases.push_back(c);
                }
    {   // several blocks of rows (each block's packed A in half of L2); several chunks of Y's columns (their sums in L2)
        MatMulIntegerCase c;
        c.a = Shape{1000, 2000};
        c.n = 9;
        cases.push_back(c);
        c.a = Shape{200, 70};
        c.n = 2000;
        cases.push_back(c);
    }
    for (Shape a : {Shape{6, 40}, Shape{50, 33}}) {
        MatMulIntegerCase c;
        c.a = a;
        c.n = 21;
        c.narrow = true;
        cases.push_back(c);
    }
    // sums past 2^24: 1100 x 255 x 128 and 600 x 255 x 255 (several blocks of K on the float GEMM)
    for (ElementType bt : {ElementType::Int8, ElementType::UInt8}) {
        MatMulIntegerCase c;
        c.a = Shape{5, bt == ElementType::Int8 ? 1100 : 600};
        c.n = 37;
        c.b_type = bt;
        c.b_zero_points = 1;
        c.extreme = true;
        cases.push_back(c);
        c.a_type = ElementType::Int8;
        cases.push_back(c);
    }
    for (const MatMulIntegerCase& c : cases)
        for (uint32_t threads : {1u, 2u}) {
            std::string dims;
            for (int64_t d : c.a) dims += std::to_string(d) + ",";
            CAPTURE(dims);
            CAPTURE(c.n);
            CAPTURE((int)c.a_type);
            CAPTURE((int)c.b_type);
            CAPTURE(c.b_zero_points);
            CAPTURE(c.a_zero_point);
            CAPTURE(c.extreme);
            CAPTURE(threads);
            check_matmul_integer(c, threads);
        }
}

TEST_CASE("int8 dynamic: MatMulInteger with a zero point per row of A stays on the reference") {
    std::mt19937 rng(3);
    OpTest t;
    t.opset = 13;
    const std::vector<uint8_t> a = random_bytes<uint8_t>(4 * 6, rng), zb{0};
    const std::vector<int8_t> b(6 * 5, 3);
    t.op("MatMulInteger", {t.input(Shape{4, 6}, a), t.constant(Shape{6, 5}, b), t.input(Shape{4}, random_bytes<uint8_t>(4, rng))});
    test::CpuRun run = test::run_last_node_on_cpu(t, 1, true);
    CHECK(run.kernels.find("ref:MatMulInteger") != std::string::npos);
    CHECK(run.kernels.find("int8:") == std::string::npos);
    CHECK(run.kernels.find("gemm:") == std::string::npos);
    REQUIRE(run.bytes.size() == 4 * 5 * 4);
}

TEST_CASE("int8 dynamic: DynamicQuantizeLinear equals the reference kernel bit for bit") {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> spread(-3.0f, 5.0f);
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<std::vector<float>> inputs;
    for (size_t n : {1u, 3u, 4u, 5u, 17u, 1000u, 70001u}) {
        std::vector<float> x(n);
        for (float& v : x) v = spread(rng);
        inputs.push_back(x);
    }
    inputs.push_back(std::vector<float>(9, 0.0f));                        // no range: scale 1/255
    inputs.push_back({-0.0f, -0.0f, -0.0f, -0.0f, -0.0f});                  // signed zeros
    inputs.push_back({-1.0f, -2.5f, -0.5f, -4.0f, -3.0f, -7.0f});           // all below 0: zero point 255
    inputs.push_back({0.5f, 2.0f, 3.0f, 1.5f, 255.0f, 127.5f, 0.0f, 1.0f});   // all above 0, ties of x / scale
    inputs.push_back({nan, 1.0f, -2.0f, nan, 3.0f, nan, -0.0f, 0.25f, nan});   // NaN skipped by the range, quantized as 0
    inputs.push_back({-5.0f, 7.0f, 1.0f, 1.0f, nan, nan, 1.0f, 1.0f, 2.0f, 0.5f, 1.0f, 1.0f});   // a NaN after a lane's extremes
    inputs.push_back({1.0f, inf, -2.0f, 0.5f, 3.0f});                       // an infinite range
    inputs.push_back({1.0f, -inf, 2.0f, 0.5f, -3.0f, 4.0f});
    inputs.push_back({3.0e38f, -3.0e38f, 1.0f, -1.0f, 0.0f});               // hi - lo overflows
    inputs.push_back({1e-40f, -1e-40f, 2e-41f, 0.0f, -3e-41f});             // subnormals
    for (const std::vector<float>& x : inputs)
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(x.size());
            CAPTURE(threads);
            std::string fast_kernels, ref_kernels;
            const std::vector<unsigned char> fast = dynamic_quantize(x, threads, nullptr, &fast_kernels);
            const std::vector<unsigned char> ref = dynamic_quantize(x, threads, "ref", &ref_kernels);
            INFO(fast_kernels);
            CHECK(ref_kernels.find("ref:DynamicQuantizeLinear") != std::string::npos);
            if (default_isa() != Isa::Ref) CHECK(fast_kernels.find("int8:") != std::string::npos);
            REQUIRE(fast.size() == x.size() + 5);
            REQUIRE(ref.size() == fast.size());
            int64_t bad = 0;
            for (size_t i = 0; i < fast.size(); ++i)
                if (fast[i] != ref[i] && bad++ < 5) MESSAGE("byte " << i << ": " << (int)fast[i] << ", reference " << (int)ref[i]);
            CHECK(bad == 0);
        }
}

TEST_CASE("int8 dynamic: Cast int32 to float32 rounds as C++'s conversion") {
    const std::vector<int32_t> x = {0, 1, -1, 16777216, 16777217, 16777219, -16777217, 2147483647, -2147483647 - 1, 123456789, 7};
    OpTest t;
    t.op("Cast", {t.input(Shape{(int64_t)x.size()}, x)});
    t.set_int("to", 1);   // FLOAT
    test::CpuRun run = test::run_last_node_on_cpu(t, 1, true);
    REQUIRE(run.bytes.size() == x.size() * 4);
    for (size_t i = 0; i < x.size(); ++i) {
        float v;
        std::memcpy(&v, run.bytes.data() + i * 4, 4);
        CHECK(v == (float)x[i]);
    }
}
