// The GPU device (OpenCL through dlopen): availability and metrics, the no-driver fallback,
// island kernels printed from the body IR against the reference kernels, light CNNs on
// HETERO:GPU,CPU against CPU. Where no OpenCL driver is installed (qemu, a bare machine)
// the GPU tests check the unavailable path and skip the rest.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "alloc_counter.h"
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

// Under ASan/LSan and TSan the GPU tests take the no-driver path: PoCL and its LLVM are not
// instrumented and keep allocations for the life of the process (LSan reports them as leaks);
// the device's own code is what the no-driver and host runs cover.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TESSEL_TEST_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TESSEL_TEST_SANITIZER 1
#endif
#endif
struct DriverChoice {
    DriverChoice() {
#ifdef TESSEL_TEST_SANITIZER
        setenv("TESSEL_OPENCL_LIBRARY", "libOpenCL-not-under-sanitizers.so.1", 1);
#endif
    }
};
const DriverChoice driver_choice;

// The GPU's results do not depend on TESSEL_ISA: the slow GPU tests run at one ISA level
// (unset or ref) of the host suite's four.
bool isa_level_runs_gpu() {
    const char* isa = std::getenv("TESSEL_ISA");
    if (!isa || !*isa || !std::strcmp(isa, "ref")) return true;
    MESSAGE("skipped at TESSEL_ISA=" << std::string(isa) << ": the GPU tests run at the ref level");
    return false;
}

bool gpu_available(Core& core) {
    Device* gpu = core.device("GPU");
    REQUIRE(gpu != nullptr);
    if (gpu->check_available() == Status::Ok) return true;
    MESSAGE("GPU unavailable here: " << gpu->last_error());
    return false;
}

std::string metric(Device* d, const char* key) {
    StringView v;
    if (d->get_metric(key, &v) != Status::Ok) return "error: " + std::string(d->last_error());
    return test::to_string(v);
}

uint32_t bits_of(float x) { uint32_t b; std::memcpy(&b, &x, 4); return b; }

// Runs `model` on `device` with `inputs` (one vector per model input); outputs by index.
std::vector<std::vector<float>> run_model(const Model& model, const char* device, const std::vector<std::vector<float>>& inputs,
                                          std::string* placement = nullptr) {
    Core core;
    CompiledModel compiled;
    Status s = core.compile_model(model, device, {}, &compiled);
    INFO(core.last_error());
    REQUIRE(s == Status::Ok);
    if (placement)
        for (const PlacementSummary& p : compiled.placement())
            *placement += test::to_string(p.device) + ":" + std::to_string(p.nodes) + " ";
    return test::infer_floats(compiled, inputs);
}

}  // namespace

TEST_CASE("gpu: listed by every Core, with the driver's metrics or the reason it is unavailable") {
    Core core;
    Device* gpu = core.device("GPU");
    REQUIRE(gpu != nullptr);
    CHECK(metric(gpu, "SUPPORTED_CONFIG_KEYS") == "PLATFORM DEVICE PERF_COUNT QUEUE_TIMEOUT_MS TILED_KERNELS");
    StringView v;
    CHECK(gpu->set_config("PLATFORM", "first") == Status::InvalidArgument);
    CHECK(std::string(gpu->last_error()) == "GPU: PLATFORM must be auto or an index from 0 to 255");
    CHECK(gpu->set_config("PERF_COUNT", "maybe") == Status::InvalidArgument);
    CHECK(gpu->set_config("WORKGROUP", "64") == Status::NotFound);
    CHECK(gpu->get_metric("NO_SUCH_METRIC", &v) == Status::NotFound);
    if (gpu->check_available() == Status::Ok) {
        CHECK(metric(gpu, "AVAILABLE") == "YES");
        CHECK(metric(gpu, "OPENCL_VERSION").rfind("OpenCL ", 0) == 0);
        CHECK(std::atoi(metric(gpu, "COMPUTE_UNITS").c_str()) > 0);
        CHECK(std::atoll(metric(gpu, "GLOBAL_MEMORY").c_str()) > 0);
        CHECK(metric(gpu, "AVAILABLE_DEVICES").rfind("0", 0) == 0);
        std::string name = metric(gpu, "FULL_DEVICE_NAME");
        CHECK(!name.empty());
        CHECK(name.find("unavailable") == std::string::npos);
        // A device index the platform does not have makes it unavailable, with the count.
        REQUIRE(gpu->set_config("DEVICE", "255") == Status::Ok);
        CHECK(gpu->check_available() == Status::Unsupported);
        CHECK(std::string(gpu->last_error()).find("DEVICE 255: the platform lists") == 0);
        REQUIRE(gpu->set_config("DEVICE", "auto") == Status::Ok);
        CHECK(gpu->check_available() == Status::Ok);
    } else {
        MESSAGE("GPU unavailable here: " << gpu->last_error());
        CHECK(metric(gpu, "AVAILABLE").rfind("NO: ", 0) == 0);
        CHECK(metric(gpu, "FULL_DEVICE_NAME").find("unavailable") != std::string::npos);
        CHECK(metric(gpu, "AVAILABLE_DEVICES") == "");
    }
}

TEST_CASE("gpu: without an OpenCL loader the GPU is unavailable and HETERO:GPU,CPU runs on CPU") {
    const char* before = std::getenv("TESSEL_OPENCL_LIBRARY");   // set under sanitizers: put it back after
    std::string saved = before ? before : "";
    setenv("TESSEL_OPENCL_LIBRARY", "libOpenCL-missing-for-tessel-test.so.1", 1);
    Core core;
    if (before) setenv("TESSEL_OPENCL_LIBRARY", saved.c_str(), 1);
    else unsetenv("TESSEL_OPENCL_LIBRARY");
    Device* gpu = core.device("GPU");
    REQUIRE(gpu != nullptr);
    CHECK(gpu->check_available() == Status::Unsupported);
    CHECK(std::string(gpu->last_error()).find("cannot load libOpenCL-missing-for-tessel-test.so.1") == 0);
    CHECK(metric(gpu, "AVAILABLE").rfind("NO: cannot load", 0) == 0);
    Model model;
    TensorDesc d = test::make_desc(ElementType::Float32, {4});
    NodeId x, relu;
    REQUIRE(model.add_input("x", d, &x) == Status::Ok);
    InputRef in = InputRef::by_id(x);
    REQUIRE(model.add_node("Relu", "relu", Span<const InputRef>(&in, 1), 1, &relu) == Status::Ok);
    REQUIRE(model.add_output("y", InputRef::by_id(relu)) == Status::Ok);
    REQUIRE(model.finalize() == Status::Ok);
    CompiledModel compiled;
    CHECK(core.compile_model(model, "GPU", {}, &compiled) == Status::Unsupported);
    CHECK(std::string(core.last_error()).find("device GPU is not available: cannot load") == 0);
    REQUIRE(core.compile_model(model, "HETERO:GPU,CPU", {}, &compiled) == Status::Ok);
    REQUIRE(compiled.placement().size == 1);
    CHECK(compiled.placement()[0].device == StringView("CPU"));
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    float values[] = {-1, 2, -3, 4};
    std::memcpy(request.input(0).data(), values, sizeof values);
    REQUIRE(request.infer() == Status::Ok);
    CHECK(request.output(0).data_as<float>()[1] == 2.0f);
    CHECK(request.output(0).data_as<float>()[0] == 0.0f);
    char log[256];
    CHECK(gpu_build_check(core, "__kernel void k() {}", log, sizeof log) == Status::Unsupported);
    CHECK(std::string(log).find("GPU is not available: cannot load") == 0);
}

TEST_CASE("gpu: a program that does not build returns the driver's build log") {
    Core core;
    if (!gpu_available(core)) return;
    char log[kErrorMessageBytes];
    CHECK(gpu_build_check(core, "__kernel void good(__global float* x) { x[0] = 1.0f; }", log, sizeof log) == Status::Ok);
    CHECK(gpu_build_check(core, "__kernel void bad(__global float* x) { x[0] = undefined_name; }", log, sizeof log) ==
          Status::Unsupported);
    std::string text(log);
    INFO(text);
    CHECK(text.find("the OpenCL program did not build (CL_BUILD_PROGRAM_FAILURE): ") == 0);
    CHECK(text.find("undefined_name") != std::string::npos);
}

// Every elementwise op the GPU claims, each a model output (so the islands have many results
// and split at the argument limit), over values with NaN, infinities, denormals and signed
// zeros, broadcasting a second operand: the GPU's printed kernels equal the reference kernels
// bit for bit (NaN only as NaN).
TEST_CASE("gpu: every elementwise op in islands printed as OpenCL C equals the reference bit for bit") {
    if (!isa_level_runs_gpu()) return;
    {
        Core core;
        if (!gpu_available(core)) return;
    }
    const int64_t rows = 3, cols = 67;
    std::vector<float> x(rows * cols), y(cols);
    std::mt19937 rng(35);
    std::uniform_real_distribution<float> wide(-12.0f, 12.0f), narrow(-2.0f, 2.0f);
    for (float& v : x) v = wide(rng);
    for (float& v : y) v = narrow(rng);
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f, 3e38f, -3e38f, 0.5f, -0.5f, 2.5f, -2.5f, 1e-7f, 88.7f, -103.0f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i) { x[i * 3] = specials[i]; y[i * 4 % cols] = specials[(i + 5) % 16]; }
    Model model;
    model.opset = 20;
    NodeId xi, yi;
    REQUIRE(model.add_input("x", test::make_desc(ElementType::Float32, {rows, cols}), &xi) == Status::Ok);
    REQUIRE(model.add_input("y", test::make_desc(ElementType::Float32, {cols}), &yi) == Status::Ok);
    float lo = -1.5f, hi = 2.0f;
    NodeId clip_lo, clip_hi;
    REQUIRE(model.add_constant("lo", test::make_desc(ElementType::Float32, {}), &lo, &clip_lo) == Status::Ok);
    REQUIRE(model.add_constant("hi", test::make_desc(ElementType::Float32, {}), &hi, &clip_hi) == Status::Ok);
    const char* unary[] = {"Sqrt", "Reciprocal", "Abs", "Neg", "Exp", "Log", "Tanh", "Sigmoid", "Relu", "Elu", "Selu", "Erf",
                           "HardSigmoid", "HardSwish", "LeakyRelu", "Softplus", "Softsign", "Mish", "Floor", "Ceil", "Round", "Sign"};
    const char* binary[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu"};
    int count = 0;
    auto add = [&](const char* op, std::vector<InputRef> inputs, const char* attribute = nullptr, const char* text = nullptr) {
        std::string name = std::string("n") + std::to_string(count++) + op;
        NodeId id;
        REQUIRE(model.add_node(op, StringView(name.data(), name.size()), Span<const InputRef>(inputs.data(), inputs.size()), 1, &id) == Status::Ok);
        if (attribute) REQUIRE(model.set_string(id, attribute, text) == Status::Ok);
        std::string out = "out_" + name;
        REQUIRE(model.add_output(StringView(out.data(), out.size()), InputRef::by_id(id)) == Status::Ok);
        return id;
    };
    for (const char* op : unary) add(op, {InputRef::by_id(xi)});
    for (const char* op : binary) add(op, {InputRef::by_id(xi), InputRef::by_id(yi)});
    add("Clip", {InputRef::by_id(xi), InputRef::by_id(clip_lo), InputRef::by_id(clip_hi)});
    add("Gelu", {InputRef::by_id(xi)});
    add("Gelu", {InputRef::by_id(xi)}, "approximate", "tanh");
    // A chain, so one island holds several ops: tanh(y * x + x) - sigmoid(y * x) (not x * y or
    // sigmoid(x): those are nodes above, and prepare would take them for these).
    NodeId mul = add("Mul", {InputRef::by_id(yi), InputRef::by_id(xi)});
    NodeId sum = add("Add", {InputRef::by_id(mul), InputRef::by_id(xi)});
    NodeId th = add("Tanh", {InputRef::by_id(sum)});
    NodeId sg = add("Sigmoid", {InputRef::by_id(mul)});
    add("Sub", {InputRef::by_id(th), InputRef::by_id(sg)});
    REQUIRE(model.finalize() == Status::Ok);
    std::string placement;
    std::vector<std::vector<float>> gpu = run_model(model, "GPU", {x, y}, &placement);
    CHECK(placement == "GPU:" + std::to_string(count) + " ");
    std::vector<std::vector<float>> ref = run_model(model, "TEMPLATE", {x, y});
    REQUIRE(gpu.size() == ref.size());
    for (size_t o = 0; o < gpu.size(); ++o) {
        REQUIRE(gpu[o].size() == ref[o].size());
        for (size_t i = 0; i < gpu[o].size(); ++i) {
            INFO("output " << test::to_string(model.output((uint32_t)o).name) << " element " << i << " x " << x[i] << " y "
                           << y[i % cols] << ": GPU " << gpu[o][i] << " reference " << ref[o][i]);
            if (std::isnan(ref[o][i])) CHECK(std::isnan(gpu[o][i]));
            else CHECK(bits_of(gpu[o][i]) == bits_of(ref[o][i]));
        }
    }
}

// The light CNNs of the ONNX model zoo (weights replaced by constants) on HETERO:GPU,CPU: the
// GPU takes every node (its layout ops, LRN, normalizations, reductions); the outputs equal CPU's.
TEST_CASE("gpu: light CNNs on HETERO:GPU,CPU equal CPU") {
    if (!isa_level_runs_gpu()) return;
    {
        Core core;
        if (!gpu_available(core)) return;
    }
    for (const char* name : {"light_squeezenet"}) {   // one model: PoCL compiles each kernel at its first launch
        std::string path = std::string("../shared/onnx-tests/light/") + name + ".onnx";
        if (access(path.c_str(), R_OK) != 0) { MESSAGE("skipped: " << path << " is not here"); continue; }
        INFO(name);
        Model model;
        REQUIRE(model.read_onnx_file(path.c_str()) == Status::Ok);
        uint64_t elements = 1;
        const TensorDesc& d = model.graph.node(model.input(0).node).outputs[0];
        for (uint32_t k = 0; k < d.rank; ++k) elements *= (uint64_t)d.dims[k];
        std::vector<float> input(elements);
        std::mt19937 rng(7);
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        for (float& v : input) v = dist(rng);
        std::string placement;
        std::vector<std::vector<float>> hetero = run_model(model, "HETERO:GPU,CPU", {input}, &placement);
        INFO(placement);
        CHECK(placement.find("GPU:0 ") == std::string::npos);
        CHECK((placement.find("CPU:") == std::string::npos || placement.find("CPU:0 ") != std::string::npos));
        std::vector<std::vector<float>> cpu = run_model(model, "CPU", {input});
        REQUIRE(hetero.size() == cpu.size());
        for (size_t o = 0; o < cpu.size(); ++o) {
            REQUIRE(hetero[o].size() == cpu[o].size());
            double worst = 0;
            for (size_t i = 0; i < cpu[o].size(); ++i)
                worst = std::max(worst, std::fabs((double)hetero[o][i] - cpu[o][i]) / (1e-6 + std::fabs((double)cpu[o][i])));
            CHECK(worst <= 1e-4);
        }
    }
}

// The node kernels against CPU's: Conv (groups, strides, dilations, pads, bias), Gemm with
// transposes and a broadcast C, pools with ceil_mode and count_include_pad, global pools and
// Softmax along a middle axis, all reading one input (one GPU program).
TEST_CASE("gpu: Conv, Gemm, pools and Softmax kernels equal CPU within rounding") {
    if (!isa_level_runs_gpu()) return;
    {
        Core core;
        if (!gpu_available(core)) return;
    }
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto randoms = [&](size_t n) { std::vector<float> v(n); for (float& x : v) x = dist(rng); return v; };
    Model model;
    model.opset = 17;
    NodeId x, a;
    REQUIRE(model.add_input("x", test::make_desc(ElementType::Float32, {2, 4, 9, 11}), &x) == Status::Ok);
    REQUIRE(model.add_input("a", test::make_desc(ElementType::Float32, {5, 7}), &a) == Status::Ok);
    std::vector<float> w1 = randoms(6 * 2 * 3 * 3), b1 = randoms(6), w2 = randoms(3 * 4 * 1 * 1), wb = randoms(7 * 6), cb = randoms(6);
    NodeId cw1, cb1, cw2, gw, gc;
    REQUIRE(model.add_constant("w1", test::make_desc(ElementType::Float32, {6, 2, 3, 3}), w1.data(), &cw1) == Status::Ok);
    REQUIRE(model.add_constant("b1", test::make_desc(ElementType::Float32, {6}), b1.data(), &cb1) == Status::Ok);
    REQUIRE(model.add_constant("w2", test::make_desc(ElementType::Float32, {3, 4, 1, 1}), w2.data(), &cw2) == Status::Ok);
    REQUIRE(model.add_constant("gw", test::make_desc(ElementType::Float32, {6, 7}), wb.data(), &gw) == Status::Ok);
    REQUIRE(model.add_constant("gc", test::make_desc(ElementType::Float32, {6}), cb.data(), &gc) == Status::Ok);
    int count = 0;
    auto add = [&](const char* op, std::vector<InputRef> inputs) {
        std::string name = std::string("n") + std::to_string(count++) + op;
        NodeId id;
        REQUIRE(model.add_node(op, StringView(name.data(), name.size()), Span<const InputRef>(inputs.data(), inputs.size()), 1, &id) == Status::Ok);
        std::string out = "out_" + name;
        REQUIRE(model.add_output(StringView(out.data(), out.size()), InputRef::by_id(id)) == Status::Ok);
        return id;
    };
    auto ints = [&](NodeId id, const char* key, std::vector<int64_t> v) {
        REQUIRE(model.set_ints(id, key, Span<const int64_t>(v.data(), v.size())) == Status::Ok);
    };
    NodeId conv = add("Conv", {InputRef::by_id(x), InputRef::by_id(cw1), InputRef::by_id(cb1)});
    REQUIRE(model.set_int(conv, "group", 2) == Status::Ok);
    ints(conv, "strides", {2, 1});
    ints(conv, "dilations", {1, 2});
    ints(conv, "pads", {1, 2, 0, 1});
    add("Conv", {InputRef::by_id(x), InputRef::by_id(cw2)});   // 1x1, no bias
    // depthwise, and the GEMM-shaped 1x1 above: the GPU keeps these nodes, not the CPU's kernels
    std::vector<float> wd = randoms(4 * 1 * 3 * 3);
    NodeId cwd;
    REQUIRE(model.add_constant("wd", test::make_desc(ElementType::Float32, {4, 1, 3, 3}), wd.data(), &cwd) == Status::Ok);
    NodeId depthwise = add("Conv", {InputRef::by_id(x), InputRef::by_id(cwd)});
    REQUIRE(model.set_int(depthwise, "group", 4) == Status::Ok);
    ints(depthwise, "pads", {1, 1, 1, 1});
    NodeId gemm = add("Gemm", {InputRef::by_id(a), InputRef::by_id(gw), InputRef::by_id(gc)});
    REQUIRE(model.set_int(gemm, "transB", 1) == Status::Ok);
    REQUIRE(model.set_float(gemm, "alpha", 0.5f) == Status::Ok);
    REQUIRE(model.set_float(gemm, "beta", 2.0f) == Status::Ok);
    NodeId gemm_t = add("Gemm", {InputRef::by_id(gw), InputRef::by_id(a)});   // 6x7 (trans) x 5x7 (trans)
    REQUIRE(model.set_int(gemm_t, "transA", 0) == Status::Ok);
    REQUIRE(model.set_int(gemm_t, "transB", 1) == Status::Ok);
    NodeId max_pool = add("MaxPool", {InputRef::by_id(x)});
    ints(max_pool, "kernel_shape", {3, 2});
    ints(max_pool, "strides", {2, 2});
    ints(max_pool, "pads", {1, 0, 1, 1});
    REQUIRE(model.set_int(max_pool, "ceil_mode", 1) == Status::Ok);
    NodeId avg_pool = add("AveragePool", {InputRef::by_id(x)});
    ints(avg_pool, "kernel_shape", {3, 3});
    ints(avg_pool, "pads", {1, 1, 1, 1});
    REQUIRE(model.set_int(avg_pool, "count_include_pad", 1) == Status::Ok);
    NodeId avg_pool2 = add("AveragePool", {InputRef::by_id(x)});
    ints(avg_pool2, "kernel_shape", {2, 3});
    ints(avg_pool2, "pads", {1, 1, 1, 1});
    add("GlobalAveragePool", {InputRef::by_id(x)});
    add("GlobalMaxPool", {InputRef::by_id(x)});
    NodeId softmax = add("Softmax", {InputRef::by_id(x)});
    REQUIRE(model.set_int(softmax, "axis", 1) == Status::Ok);
    NodeId log_softmax = add("LogSoftmax", {InputRef::by_id(x)});
    REQUIRE(model.set_int(log_softmax, "axis", -1) == Status::Ok);
    REQUIRE(model.finalize() == Status::Ok);
    std::vector<float> xv = randoms(2 * 4 * 9 * 11), av = randoms(5 * 7);
    std::string placement;
    std::vector<std::vector<float>> gpu = run_model(model, "GPU", {xv, av}, &placement);
    CHECK(placement == "GPU:" + std::to_string(count) + " ");
    std::vector<std::vector<float>> cpu = run_model(model, "CPU", {xv, av});
    REQUIRE(gpu.size() == cpu.size());
    for (size_t o = 0; o < cpu.size(); ++o) {
        INFO("output " << test::to_string(model.output((uint32_t)o).name));
        REQUIRE(gpu[o].size() == cpu[o].size());
        for (size_t i = 0; i < cpu[o].size(); ++i) CHECK(std::fabs(gpu[o][i] - cpu[o][i]) <= 1e-5f + 1e-5f * std::fabs(cpu[o][i]));
    }
}
