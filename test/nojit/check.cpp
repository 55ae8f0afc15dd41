// The TESSEL_NO_JIT build: no asmjit header is included and the program links without
// asmjit; every snippet runs the interpreter, and asking for a JIT target is Unsupported.
#define TESSEL_NO_JIT
#define TESSEL_IMPLEMENTATION
#include "runtime.h"

#if defined(ASMJIT_LIBRARY_VERSION) || defined(ASMJIT_CORE_H_INCLUDED)
#error "TESSEL_NO_JIT must not include asmjit"
#endif

#include <cstdio>
#include <cstring>

int main() {
    using namespace tessel;
    Arena arena;
    SnippetBody body(&arena);
    int64_t shape[] = {3, 5};
    ValueId x, y;
    if (body.parameter(shape, &x) != Status::Ok || body.unary(SnippetOp::GeluErf, x, &y) != Status::Ok ||
        body.result(y) != Status::Ok) {
        std::printf("body: %s\n", body.last_error());
        return 1;
    }
    float in[15], out[15], want[15];
    for (int i = 0; i < 15; ++i) in[i] = -3.0f + 0.4f * (float)i;
    const float* inputs[] = {in};
    float* outputs[] = {out};
    float* expected[] = {want};
    Snippet snippet;
    if (snippet.compile(body) != Status::Ok || snippet.isa() != Isa::Ref) {
        std::printf("compile: %s (isa %s)\n", snippet.last_error(), isa_name(snippet.isa()));
        return 1;
    }
    if (snippet.run(inputs, outputs) != Status::Ok || interpret(body, inputs, expected) != Status::Ok ||
        std::memcmp(out, want, sizeof out) != 0) {
        std::printf("run: results differ from the interpreter\n");
        return 1;
    }
    SnippetOptions jit;
    jit.isa = Isa::Avx2;
    Snippet refused;
    if (refused.compile(body, jit) != Status::Unsupported) {
        std::printf("compile for avx2 should be Unsupported in a TESSEL_NO_JIT build\n");
        return 1;
    }
    std::printf("no-JIT build: interpreter only, avx2 refused: %s\n", refused.last_error());

    // The runtime's CPU device fuses islands and runs them with the interpreter; it gives the
    // bits of TEMPLATE's reference kernels.
    Model model;
    TensorDesc d;
    d.type = ElementType::Float32;
    d.rank = 2;
    d.dims[0] = 3;
    d.dims[1] = 5;
    NodeId xi, g, r;
    InputRef xin[] = {InputRef::by_name("x")};
    InputRef gin[] = {InputRef::by_name("gelu")};
    if (model.add_input("x", d, &xi) != Status::Ok || model.add_node("Gelu", "gelu", xin, 1, &g) != Status::Ok ||
        model.add_node("Relu", "relu", gin, 1, &r) != Status::Ok || model.add_output("y", InputRef::by_name("relu")) != Status::Ok ||
        model.finalize() != Status::Ok) {
        std::printf("model: %s\n", model.last_error());
        return 1;
    }
    Core core;
    float results[2][15];
    const char* devices[] = {"CPU", "TEMPLATE"};
    for (int k = 0; k < 2; ++k) {
        CompiledModel compiled;
        InferRequest request;
        if (core.compile_model(model, devices[k], {}, &compiled) != Status::Ok || compiled.create_request(&request) != Status::Ok) {
            std::printf("compile on %s: %s\n", devices[k], core.last_error());
            return 1;
        }
        std::memcpy(request.input(0).data(), in, sizeof in);
        if (request.infer() != Status::Ok) { std::printf("infer: %s\n", request.last_error()); return 1; }
        std::memcpy(results[k], request.output(0).data(), sizeof results[k]);
        if (k == 0 && compiled.step_count() != 1) { std::printf("CPU should fuse Gelu+Relu into one step\n"); return 1; }
    }
    if (std::memcmp(results[0], results[1], sizeof results[0]) != 0) {
        std::printf("CPU (interpreted island) and TEMPLATE differ\n");
        return 1;
    }
    std::printf("no-JIT build: the CPU device runs its fused island with the interpreter, same bits as TEMPLATE\n");
    return 0;
}
