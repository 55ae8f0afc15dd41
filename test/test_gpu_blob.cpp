// The GPU device's part of an exported model: the driver's program binary, taken again on
// import (no OpenCL C compile) with the same outputs; a payload cut short is a ParseError.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

bool gpu_runs_here(Core& core) {
    const char* isa = std::getenv("TESSEL_ISA");
    if (isa && *isa && std::strcmp(isa, "ref")) return false;   // the GPU tests run at the ref level only
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return false;
#endif
    Device* gpu = core.device("GPU");
    return gpu && gpu->check_available() == Status::Ok;
}

void append(void* user, const char* data, size_t size) { static_cast<std::vector<char>*>(user)->insert(static_cast<std::vector<char>*>(user)->end(), data, data + size); }

std::vector<float> infer(const CompiledModel& compiled) {
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    float* x = request.input(0).data_as<float>();
    for (uint64_t i = 0; i < request.input(0).elements(); ++i) x[i] = std::sin(0.3f * (float)i);
    REQUIRE(request.infer() == Status::Ok);
    const float* y = request.output(0).data_as<float>();
    return std::vector<float>(y, y + request.output(0).elements());
}

}  // namespace

TEST_CASE("gpu blob: export keeps the OpenCL program binary; import builds from it") {
    Core core;
    if (!gpu_runs_here(core)) return;
    Model m;
    NodeId x, w, conv, relu;
    REQUIRE(m.add_input("x", test::make_desc(ElementType::Float32, {1, 2, 6, 6}), &x) == Status::Ok);
    std::vector<float> weights(3 * 2 * 3 * 3);
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = std::cos((float)i) * 0.2f;
    REQUIRE(m.add_constant("w", test::make_desc(ElementType::Float32, {3, 2, 3, 3}), weights.data(), &w) == Status::Ok);
    InputRef in[] = {InputRef::by_id(x), InputRef::by_id(w)};
    REQUIRE(m.add_node("Conv", "conv", in, 1, &conv) == Status::Ok);
    InputRef rin[] = {InputRef::by_id(conv)};
    REQUIRE(m.add_node("Relu", "relu", rin, 1, &relu) == Status::Ok);
    REQUIRE(m.add_output("y", InputRef::by_id(relu)) == Status::Ok);
    m.opset = 17;
    REQUIRE(m.finalize() == Status::Ok);
    CompiledModel compiled;
    REQUIRE(core.compile_model(m, "GPU", {}, &compiled) == Status::Ok);
    Device* gpu = core.device("GPU");
    StringView build;
    REQUIRE(gpu->get_metric("LAST_PROGRAM_BUILD", &build) == Status::Ok);
    CHECK(test::to_string(build) == "source");
    std::vector<float> before = infer(compiled);
    std::vector<char> blob;
    REQUIRE(compiled.export_model(append, &blob) == Status::Ok);
    CompiledModel imported;
    Status s = core.import_model(blob.data(), blob.size(), &imported);
    INFO(std::string(core.last_error()));
    REQUIRE(s == Status::Ok);
    REQUIRE(gpu->get_metric("LAST_PROGRAM_BUILD", &build) == Status::Ok);
    CHECK(test::to_string(build) == "binary");
    CHECK(infer(imported) == before);
}
