// The one translation unit with TESSEL_IMPLEMENTATION. Every other test file includes the
// same headers without it, so a definition that would be emitted twice fails to link.
// White-box tests of the implementation's internals (detail::) live here too: no other
// translation unit sees them.
#define TESSEL_IMPLEMENTATION
#include "runtime.h"
#include "snippets.h"
#include "hetero.h"
// Included twice on purpose: the guards must hold for the implementation part too.
#include "hetero.h"

#include <doctest/doctest.h>
#include <cstdint>
#include <cstring>

#if !defined(TESSEL_NO_JIT) && defined(__x86_64__)
// The in-place twin is the streaming kernel's copy with each movntps turned into a movaps:
// one opcode byte (2B to 29) in the legacy, REX, 2- and 3-byte VEX and EVEX forms, every
// other byte the same, and the copy runs (its RIP-relative constant moved with it).
TEST_CASE("snippets: the in-place twin patches exactly the listed non-temporal stores") {
    using namespace asmjit;
    CodeHolder code;
    code.init(tessel::detail::jit_runtime().environment());
    x86::Assembler a(&code);
    Label data = a.newLabel();
    uint32_t offsets[8];
    uint32_t count = 0;
    auto store = [&](auto emit) { offsets[count++] = (uint32_t)a.offset(); emit(); };
    const bool avx2 = tessel::isa_available(tessel::Isa::Avx2), avx512 = tessel::isa_available(tessel::Isa::Avx512);
    a.movaps(x86::xmm0, x86::ptr(data));
    a.movaps(x86::xmm8, x86::ptr(data));
    store([&] { a.movntps(x86::ptr(x86::rdi, 0), x86::xmm0); });      // 0F 2B
    store([&] { a.movntps(x86::ptr(x86::rdi, 16), x86::xmm8); });     // REX 0F 2B
    if (avx2) {
        a.mov(x86::r9, x86::rdi);
        a.vmovaps(x86::ymm1, x86::ptr(data));
        store([&] { a.vmovntps(x86::ptr(x86::rdi, 32), x86::ymm1); });   // C5 .. 2B
        store([&] { a.vmovntps(x86::ptr(x86::r9, 64), x86::ymm1); });    // C4 .. .. 2B
    }
    if (avx512) {
        a.vmovaps(x86::zmm2, x86::ptr(data));
        store([&] { a.vmovntps(x86::ptr(x86::rdi, 128), x86::zmm2); });  // 62 .. .. .. 2B
    }
    if (avx2) a.vzeroupper();
    a.ret();
    a.align(AlignMode::kData, 64);
    a.bind(data);
    float values[16];
    for (int i = 0; i < 16; ++i) values[i] = 1.5f + (float)i;
    a.embed(values, sizeof values);
    void* kernel = nullptr;
    REQUIRE(tessel::detail::jit_runtime().add(&kernel, &code) == kErrorOk);
    const size_t size = code.codeSize(), text = (size_t)code.textSection()->offset();
    void* twin = tessel::detail::patched_twin(kernel, size, text, offsets, count);
    REQUIRE(twin);
    const unsigned char* original = static_cast<const unsigned char*>(kernel);
    const unsigned char* patched = static_cast<const unsigned char*>(twin);
    uint32_t changed = 0;
    for (size_t i = 0; i < size; ++i) {
        if (original[i] == patched[i]) continue;
        ++changed;
        CHECK(original[i] == 0x2b);
        CHECK(patched[i] == 0x29);
    }
    CHECK(changed == count);
    // Both store the constant: 4 floats per SSE store, 8 per AVX one, 16 per AVX-512 one.
    alignas(64) float out[2][48];
    for (int k = 0; k < 2; ++k) {
        for (float& x : out[k]) x = -1.0f;
        reinterpret_cast<void (*)(float*)>(k ? twin : kernel)(out[k]);
    }
    CHECK(std::memcmp(out[0], out[1], sizeof out[0]) == 0);
    CHECK(out[1][0] == 1.5f);
    CHECK(out[1][7] == 4.5f);
    if (avx512) CHECK(out[1][32 + 15] == 16.5f);
    // A listed offset that is not a movntps (the first movaps load: 0F 28) gives no twin.
    const uint32_t wrong[] = {0};
    CHECK(tessel::detail::patched_twin(kernel, size, text, wrong, 1) == nullptr);
    tessel::detail::release_kernel(twin);
    tessel::detail::release_kernel(kernel);
}
#endif

// The version table of >>op versions: the version a model of an opset runs, and every row
// naming an op of the list at an opset the reader accepts.
TEST_CASE("runtime: the op version table") {
    using tessel::detail::onnx_op_version;
    namespace detail = tessel::detail;
    REQUIRE(onnx_op_version("Pad", 17) != nullptr);
    CHECK(onnx_op_version("Pad", 17)->version == 11);
    CHECK(onnx_op_version("Pad", 18)->version == 18);
    CHECK(onnx_op_version("Pad", 20)->version == 19);
    CHECK(onnx_op_version("Pad", 28)->version == 25);
    CHECK(onnx_op_version("ReduceMean", 17) == nullptr);   // the kernel reads c.opset
    CHECK(onnx_op_version("ReduceMax", 20)->version == 20);
    CHECK(onnx_op_version("Relu", 28) == nullptr);
    CHECK(onnx_op_version("Tile", 5)->support == detail::OpVersionSupport::Refused);
    CHECK(onnx_op_version("Tile", 6)->support == detail::OpVersionSupport::Kernel);
    // every row names an op of the list, with a version the reader accepts
    for (const detail::OpVersion& v : detail::kOpVersions) {
        INFO(v.op << "-" << v.version);
        bool folded = tessel::StringView(v.op) == "Constant" || tessel::StringView(v.op) == "Size";   // no kernel
        CHECK((folded || tessel::find_builtin_kernel(v.op) != nullptr));
        CHECK(v.version >= 1);
        CHECK(v.version <= detail::kOnnxMaxOpset);
    }
}

// A plan at new shapes copies the first plan's prepared graph (detail_prepare::rebind), and
// each kernel prepares again with that plan's state for the node in PrepareContext::like_state:
// the elementwise and typed float32 kernels keep theirs (it holds no shapes); the descs are new.
TEST_CASE("dynamic shapes: a copied plan keeps the elementwise and typed kernels' states, with new descs") {
    using namespace tessel;
    Model m;
    TensorDesc xd;
    xd.type = ElementType::Float32;
    xd.rank = 2;
    xd.dims[0] = -1;
    xd.dims[1] = 6;
    TensorDesc scalar;
    scalar.type = ElementType::Float32;
    const float two_value = 2.0f;
    NodeId x, two, add, relu, pow;
    REQUIRE(m.add_input("x", xd, &x) == Status::Ok);
    REQUIRE(m.add_constant("two", scalar, &two_value, &two) == Status::Ok);
    InputRef add_in[] = {InputRef::by_id(x), InputRef::by_id(x)};
    REQUIRE(m.add_node("Add", "add", add_in, 1, &add) == Status::Ok);
    InputRef relu_in[] = {InputRef::by_id(add)};
    REQUIRE(m.add_node("Relu", "relu", relu_in, 1, &relu) == Status::Ok);
    InputRef pow_in[] = {InputRef::by_id(relu), InputRef::by_id(two)};
    REQUIRE(m.add_node("Pow", "pow", pow_in, 1, &pow) == Status::Ok);
    REQUIRE(m.add_output("y", InputRef::by_id(pow)) == Status::Ok);
    REQUIRE(m.finalize() == Status::Ok);
    for (const char* device : {"TEMPLATE", "CPU"}) {
        INFO(device);
        Core core;
        CompiledModel compiled;
        REQUIRE(core.compile_model(m, device, {}, &compiled) == Status::Ok);
        const PreparedModel& first = *compiled.prepared();
        const int64_t dims[] = {3, 6};
        InputShape shape[] = {{"x", Span<const int64_t>(dims, 2)}};
        CompiledModel::Impl* plan = nullptr;
        char error[kErrorMessageBytes] = {};
        REQUIRE(detail::CompileJob::plan_at(compiled, shape, &plan, error) == Status::Ok);
        const PreparedModel& p = plan->prepared;
        REQUIRE(p.copy_family() == first.copy_family());
        REQUIRE(p.copy_family() != 0);
        const Graph& g = p.model.graph;
        for (const char* name : {"add", "relu", "pow"}) {
            INFO(name);
            const NodeId id = g.find(name);
            REQUIRE(id != kNoNode);
            CHECK(p.kernel(id) == first.kernel(id));
            CHECK(p.value_desc(p.value_id(id, 0)).dims[0] == 3);
            CHECK(first.value_desc(first.value_id(id, 0)).dims[0] == 1);
        }
        CHECK(p.kernel_state(g.find("add")) == first.kernel_state(g.find("add")));    // typed, over the elementwise kernel
        CHECK(p.kernel_state(g.find("relu")) == first.kernel_state(g.find("relu")));
        // Pow's exponent is a one-element constant: its state is PowerStatic's, made again
        const void* pow_state = p.kernel_state(g.find("pow"));
        CHECK(pow_state != nullptr);
        CHECK(pow_state != first.kernel_state(g.find("pow")));
        destroy(plan);
    }
}
