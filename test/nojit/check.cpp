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
    return 0;
}
