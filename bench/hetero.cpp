// bench/hetero: HETERO:GPU,CPU on a model whose partition has independent GPU and CPU
// subgraphs (a Conv chain the GPU takes, a MatMul chain given to the CPU), with PoCL limited
// to one thread and the CPU to one thread. Prints each device's time (PERF_COUNT, the
// sequential run), the run with the lanes one after another (HETERO_CONCURRENT=NO) and at once,
// and the ratio of the concurrent run to the sum of the two devices' times. Medians of N runs.
//   build/bench/hetero [runs] [--threads-pocl N]
// Not a test: it prints; docs/performance.md keeps the figures.
#define TESSEL_IMPLEMENTATION
#include "runtime.h"
#include "bench_util.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace tessel;
using bench::median;

namespace {

TensorDesc desc(std::vector<int64_t> dims) {
    TensorDesc d;
    d.type = ElementType::Float32;
    d.rank = (uint8_t)dims.size();
    for (size_t i = 0; i < dims.size(); ++i) d.dims[i] = dims[i];
    return d;
}

bool ok(Status s, const char* what, const char* error) {
    if (s == Status::Ok) return true;
    std::fprintf(stderr, "%s: %s (%s)\n", what, status_name(s), error);
    return false;
}

// x[1,16,40,40] -> (Conv 3x3 16->16 pad 1, Relu) x convs; y[384,384] -> MatMul w x matmuls, on the CPU by affinity.
bool build(Model* m, int convs, int matmuls, std::vector<std::vector<float>>* keep) {
    NodeId x, y;
    if (m->add_input("x", desc({1, 16, 40, 40}), &x) != Status::Ok || m->add_input("y", desc({384, 384}), &y) != Status::Ok) return false;
    NodeId at = x;
    for (int i = 0; i < convs; ++i) {
        keep->emplace_back(16 * 16 * 9);
        for (size_t k = 0; k < keep->back().size(); ++k) keep->back()[k] = std::sin(0.37f * (float)(k + i)) * 0.1f;
        std::string w = "cw" + std::to_string(i), c = "conv" + std::to_string(i), r = "relu" + std::to_string(i);
        NodeId wid, conv, relu;
        if (m->add_constant(w.c_str(), desc({16, 16, 3, 3}), keep->back().data(), &wid) != Status::Ok) return false;
        InputRef in[] = {InputRef::by_id(at), InputRef::by_id(wid)};
        if (m->add_node("Conv", c.c_str(), in, 1, &conv) != Status::Ok) return false;
        int64_t pads[] = {1, 1, 1, 1};
        if (m->set_ints(conv, "pads", Span<const int64_t>(pads, 4)) != Status::Ok) return false;
        InputRef rin[] = {InputRef::by_id(conv)};
        if (m->add_node("Relu", r.c_str(), rin, 1, &relu) != Status::Ok) return false;
        at = relu;
    }
    if (m->add_output("gpu_out", InputRef::by_id(at)) != Status::Ok) return false;
    at = y;
    for (int i = 0; i < matmuls; ++i) {
        keep->emplace_back(384 * 384);
        for (size_t k = 0; k < keep->back().size(); ++k) keep->back()[k] = std::cos(0.11f * (float)(k + i)) / 384.0f;
        std::string w = "mw" + std::to_string(i), mm = "matmul" + std::to_string(i);
        NodeId wid, matmul;
        if (m->add_constant(w.c_str(), desc({384, 384}), keep->back().data(), &wid) != Status::Ok) return false;
        InputRef in[] = {InputRef::by_id(at), InputRef::by_id(wid)};
        if (m->add_node("MatMul", mm.c_str(), in, 1, &matmul) != Status::Ok) return false;
        if (m->graph.set_affinity(matmul, "CPU") != Status::Ok) return false;   // the GPU runs MatMul too
        at = matmul;
    }
    if (m->add_output("cpu_out", InputRef::by_id(at)) != Status::Ok) return false;
    m->opset = 17;
    return m->finalize() == Status::Ok;
}

struct Timing {
    double wall_ms = 0, gpu_ms = 0, cpu_ms = 0;
    std::vector<float> outputs;
};

bool measure(Core& core, const Model& model, bool concurrent, int runs, Timing* t) {
    ConfigEntry config[] = {{"CPU:NUM_THREADS", "1"}, {"PERF_COUNT", "YES"}, {"HETERO_CONCURRENT", concurrent ? "YES" : "NO"}};
    CompiledModel compiled;
    if (!ok(core.compile_model(model, "HETERO:GPU,CPU", config, &compiled), "compile", core.last_error())) return false;
    InferRequest request;
    if (!ok(compiled.create_request(&request), "request", compiled.last_error())) return false;
    for (uint32_t i = 0; i < 2; ++i) {
        float* p = request.input(i).data_as<float>();
        for (uint64_t k = 0; k < request.input(i).elements(); ++k) p[k] = std::sin(0.01f * (float)k + (float)i);
    }
    std::vector<double> wall, gpu, cpu;
    for (int r = 0; r < runs + 1; ++r) {   // the first run warms the driver's kernels
        auto start = std::chrono::steady_clock::now();
        if (!ok(request.infer(), "infer", request.last_error())) return false;
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (r == 0) continue;
        wall.push_back(ms);
        double g = 0, c = 0;
        for (const ProfileEntry& e : request.profiling_info()) (e.device == StringView("GPU") ? g : c) += (double)e.ns / 1e6;
        gpu.push_back(g);
        cpu.push_back(c);
    }
    if (std::getenv("TIMELINE"))
        for (const ProfileEntry& e : request.profiling_info())
            std::printf("  %-4.*s %-12.*s start %8.2f ms  %7.2f ms\n", (int)e.device.size, e.device.data, (int)e.node.size, e.node.data,
                        (double)e.start_ns / 1e6, (double)e.ns / 1e6);
    t->wall_ms = median(wall);
    t->gpu_ms = median(gpu);
    t->cpu_ms = median(cpu);
    for (uint32_t o = 0; o < compiled.output_count(); ++o) {
        const float* p = request.output(o).data_as<float>();
        t->outputs.insert(t->outputs.end(), p, p + request.output(o).elements());
    }
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    int runs = 15;
    const char* pocl_threads = "1";
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--threads-pocl") && i + 1 < argc) pocl_threads = argv[++i];
        else runs = std::max(1, std::atoi(argv[i]));
    }
    setenv("POCL_MAX_PTHREAD_COUNT", pocl_threads, 1);   // before the driver starts
    Core core;
    Device* gpu = core.device("GPU");
    if (!gpu || gpu->check_available() != Status::Ok) {
        std::printf("GPU unavailable: %s\n", gpu ? gpu->last_error() : "no GPU device");
        return 0;
    }
    StringView name;
    if (gpu->get_metric("FULL_DEVICE_NAME", &name) == Status::Ok) std::printf("GPU: %.*s, POCL_MAX_PTHREAD_COUNT=%s, CPU NUM_THREADS=1\n", (int)name.size, name.data, pocl_threads);
    Model model;
    std::vector<std::vector<float>> weights;
    // GPU and CPU work of similar size, so running them at once has something to save
    const int convs = 4, matmuls = 16;
    if (!build(&model, convs, matmuls, &weights)) { std::fprintf(stderr, "building the model failed\n"); return 1; }
    Timing sequential, concurrent;
    if (!measure(core, model, false, runs, &sequential) || !measure(core, model, true, runs, &concurrent)) return 1;
    bool same = sequential.outputs == concurrent.outputs;
    double sum = sequential.gpu_ms + sequential.cpu_ms;
    std::printf("model: %d x (Conv 3x3 16ch 40x40 + Relu) on GPU beside %d x MatMul 384^3 on CPU; medians of %d\n", convs, matmuls, runs);
    std::printf("device times (sequential run): GPU %.2f ms, CPU %.2f ms, sum %.2f ms\n", sequential.gpu_ms, sequential.cpu_ms, sum);
    std::printf("HETERO_CONCURRENT=NO : %.2f ms\n", sequential.wall_ms);
    std::printf("HETERO_CONCURRENT=YES: %.2f ms (GPU %.2f ms, CPU %.2f ms at once)\n", concurrent.wall_ms, concurrent.gpu_ms, concurrent.cpu_ms);
    std::printf("concurrent / sum of device times: %.2fx   concurrent / sequential: %.2fx   outputs %s\n", concurrent.wall_ms / sum,
                concurrent.wall_ms / sequential.wall_ms, same ? "identical" : "DIFFER");
    return same ? 0 : 1;
}
