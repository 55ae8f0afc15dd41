// The runtime's own cost per inference: a chain of tiny ops (Relu on 4 floats) run through
// InferRequest::infer() on TEMPLATE (one kernel call per node) against the same kernel calls
// made directly in a loop, in the same process. Prints ns per step and the ratio, then the
// speed of a large fused island on 1 and 2 threads, and the compile time of large generated
// models (10k to 100k nodes, and HETERO with a subgraph per node).
//   build/bench/runtime [NODES]
#define TESSEL_IMPLEMENTATION
#include "runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace tessel;

namespace {
double median_ns(std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Median over 21 runs of `repeats` inferences of the time of one, in ns; negative if one fails.
double median_infer_ns(InferRequest& request, int repeats) {
    std::vector<double> times;
    for (int run = 0; run < 21; ++run) {
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < repeats; ++i) if (request.infer() != Status::Ok) return -1;
        times.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / repeats);
    }
    return median_ns(times);
}

// A chain of n Relu nodes on d; device(i) names node i's affinity (nullptr: none).
bool relu_chain(Model* model, uint32_t n, const TensorDesc& d, const char* (*device)(uint32_t)) {
    NodeId p;
    if (model->add_input("x", d, &p) != Status::Ok) return false;
    for (uint32_t i = 0; i < n; ++i) {
        std::string name = "n" + std::to_string(i);
        InputRef in[] = {InputRef::by_id(p)};
        if (model->add_node("Relu", StringView(name.c_str()), in, 1, &p) != Status::Ok) return false;
        const char* affinity = device ? device(i) : nullptr;
        if (affinity && model->graph.set_affinity(p, affinity) != Status::Ok) return false;
    }
    return model->add_output("y", InputRef::by_id(p)) == Status::Ok && model->finalize() == Status::Ok;
}

// Compiles `model` on `device` and prints one row: nodes, milliseconds, steps.
bool print_compile_time(Core& core, const Model& model, const char* device, uint32_t nodes) {
    CompiledModel compiled;
    auto start = std::chrono::steady_clock::now();
    if (core.compile_model(model, device, {}, &compiled) != Status::Ok) { std::fprintf(stderr, "%s\n", core.last_error()); return false; }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("%10u %12.1f %8u\n", nodes, ms, compiled.step_count());
    return true;
}
}  // namespace

int main(int argc, char** argv) {
    uint32_t nodes = argc > 1 ? (uint32_t)std::atoi(argv[1]) : 200;
    if (nodes < 1 || nodes > 100000) { std::fprintf(stderr, "usage: runtime [NODES]\n"); return 2; }
    Model model;
    TensorDesc d;
    d.type = ElementType::Float32;
    d.rank = 1;
    d.dims[0] = 4;
    if (!relu_chain(&model, nodes, d, nullptr)) return 1;

    std::printf("chain of %u Relu nodes on float[4]; medians of 21 runs of 200 inferences\n", nodes);
    std::printf("%-34s %12s %12s %10s\n", "path", "us/infer", "ns/step", "vs direct");
    // Direct: the reference kernel called in a loop, as a hand-written program would.
    const OpKernel* relu = find_builtin_kernel("Relu");
    Core core;
    CompiledModel probe;
    if (core.compile_model(model, "TEMPLATE", {}, &probe) != Status::Ok) { std::fprintf(stderr, "%s\n", core.last_error()); return 1; }
    const PreparedModel& pm = *probe.prepared();
    NodeId first = pm.model.graph.find("n0");
    float a[4] = {1, -2, 3, -4}, b[4];
    TensorView in, out;
    in.desc = d; out.desc = d;
    char error[kErrorMessageBytes];
    RunContext c;
    c.graph = &pm.model.graph;
    c.node = first;
    c.state = pm.kernel_state(first);
    c.num_inputs = 1;
    c.inputs = &in;
    c.num_outputs = 1;
    c.outputs = &out;
    c.error = error;
    std::vector<double> direct;
    for (int run = 0; run < 21; ++run) {
        auto start = std::chrono::steady_clock::now();
        for (int k = 0; k < 200; ++k)
            for (uint32_t i = 0; i < nodes; ++i) {
                in.data = (i & 1) ? b : a;
                out.data = (i & 1) ? a : b;
                if (relu->run(c) != Status::Ok) return 1;
            }
        direct.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / 200);
    }
    double direct_ns = median_ns(direct);
    std::printf("%-34s %12.2f %12.1f %10s\n", "direct kernel calls", direct_ns / 1000, direct_ns / nodes, "1.00x");
    struct Case { const char* name; const char* device; std::vector<ConfigEntry> config; };
    std::vector<Case> cases = {
        {"TEMPLATE (reference kernels)", "TEMPLATE", {}},
        {"CPU, FUSION=NO", "CPU", {{"FUSION", "NO"}}},
        {"CPU (fused: one snippet)", "CPU", {}},
        {"TEMPLATE, PERF_COUNT=YES", "TEMPLATE", {{"PERF_COUNT", "YES"}}},
        {"HETERO:TEMPLATE,CPU (split 1 in 10)", "HETERO:TEMPLATE,CPU", {}},
    };
    for (Case& k : cases) {
        Model* m = &model;
        Model split;
        if (std::string(k.device).rfind("HETERO", 0) == 0) {   // every tenth node on TEMPLATE
            if (!relu_chain(&split, nodes, d, [](uint32_t i) -> const char* { return i % 10 == 5 ? "TEMPLATE" : nullptr; })) return 1;
            m = &split;
        }
        CompiledModel compiled;
        if (core.compile_model(*m, k.device, Span<const ConfigEntry>(k.config.data(), k.config.size()), &compiled) != Status::Ok) {
            std::fprintf(stderr, "%s\n", core.last_error());
            return 1;
        }
        InferRequest request;
        if (compiled.create_request(&request) != Status::Ok) return 1;
        for (int i = 0; i < 4; ++i) request.input(0).data_as<float>()[i] = a[i];
        for (int i = 0; i < 20; ++i) if (request.infer() != Status::Ok) return 1;
        double ns = median_infer_ns(request, 200);
        if (ns < 0) return 1;
        uint32_t steps = compiled.step_count();
        std::printf("%-34s %12.2f %12.1f %9.2fx   (%u steps)\n", k.name, ns / 1000, ns / (steps ? steps : 1), ns / direct_ns, steps);
    }
    // A fused island on the request's threads: Gelu(x) * x + x (compute-bound) and x * x + x
    // (memory-bound) on float[N], one snippet each, CPU with NUM_THREADS=1 and 2; the runtime
    // runs a kernel in parts once it walks twice ReferenceProgram::kPartBytes.
    for (const char* first_op : {"Gelu", "Identity"}) {
        std::printf("\nfused island %s on float[N], CPU: NUM_THREADS=1 vs 2, medians of 21 runs\n%10s %12s %12s %8s\n",
                    first_op[0] == 'G' ? "Gelu(x) * x + x" : "x * x + x", "N", "us (1)", "us (2)", "speedup");
        for (int64_t n : {65536, 262144, 1048576, 4194304}) {
            Model island;
            TensorDesc flat;
            flat.type = ElementType::Float32;
            flat.rank = 1;
            flat.dims[0] = n;
            NodeId x, m, y;
            if (island.add_input("x", flat, &x) != Status::Ok) return 1;
            NodeId g = x;
            InputRef gx[] = {InputRef::by_id(x)};
            if (first_op[0] == 'G' && island.add_node("Gelu", "g", gx, 1, &g) != Status::Ok) return 1;
            InputRef mx[] = {InputRef::by_id(g), InputRef::by_id(x)};
            if (island.add_node("Mul", "m", mx, 1, &m) != Status::Ok) return 1;
            InputRef ax[] = {InputRef::by_id(m), InputRef::by_id(x)};
            if (island.add_node("Add", "y", ax, 1, &y) != Status::Ok) return 1;
            if (island.add_output("out", InputRef::by_id(y)) != Status::Ok || island.finalize() != Status::Ok) return 1;
            double us[2];
            for (int t = 0; t < 2; ++t) {
                ConfigEntry threads[] = {{"NUM_THREADS", t ? "2" : "1"}};
                CompiledModel compiled;
                InferRequest request;
                if (core.compile_model(island, "CPU", threads, &compiled) != Status::Ok || compiled.create_request(&request) != Status::Ok) {
                    std::fprintf(stderr, "%s\n", core.last_error());
                    return 1;
                }
                float* in_data = request.input(0).data_as<float>();
                for (int64_t i = 0; i < n; ++i) in_data[i] = (float)(i % 2001) * 0.01f - 10.0f;
                const int repeats = (int)std::max<int64_t>(1, (1 << 22) / n);
                for (int i = 0; i < 3; ++i) if (request.infer() != Status::Ok) return 1;
                us[t] = median_infer_ns(request, repeats) / 1000;
                if (us[t] < 0) return 1;
            }
            std::printf("%10lld %12.1f %12.1f %7.2fx\n", (long long)n, us[0], us[1], us[0] / us[1]);
        }
    }
    // Compile time on large models: node i is Add(node i-1, node i-3) when even, Identity
    // (not fusible) when odd, on float[1,64]: an island and a buffer every other node, so
    // the stages that grow with islands times nodes, or buffers squared, show here.
    std::printf("\ncompile on CPU, chains of Add and Identity on float[1,64]\n%10s %12s %8s\n", "nodes", "compile_ms", "steps");
    TensorDesc wide;
    wide.type = ElementType::Float32;
    wide.rank = 2;
    wide.dims[0] = 1;
    wide.dims[1] = 64;
    for (uint32_t n : {10000u, 40000u, 100000u}) {
        Model big;
        std::vector<NodeId> ids(n + 1);
        if (big.add_input("x", wide, &ids[0]) != Status::Ok) return 1;
        for (uint32_t i = 1; i <= n; ++i) {
            std::string name = "v" + std::to_string(i);
            InputRef in2[] = {InputRef::by_id(ids[i - 1]), InputRef::by_id(ids[i >= 4 ? i - 3 : 0])};
            Span<const InputRef> inputs(in2, i % 2 ? 1 : 2);
            if (big.add_node(i % 2 ? "Identity" : "Add", StringView(name.c_str()), inputs, 1, &ids[i]) != Status::Ok) {
                std::fprintf(stderr, "%s\n", big.last_error());
                return 1;
            }
        }
        if (big.add_output("y", InputRef::by_id(ids[n])) != Status::Ok || big.finalize() != Status::Ok) return 1;
        if (!print_compile_time(core, big, "CPU", n)) return 1;
    }
    // HETERO with the device alternating at every node of a Relu chain: a subgraph per node,
    // so the stages that grow with subgraphs times nodes show here.
    std::printf("\ncompile on HETERO:TEMPLATE,CPU, Relu chains on float[4], device alternating per node\n%10s %12s %8s\n",
                "nodes", "compile_ms", "steps");
    for (uint32_t n : {2000u, 10000u, 20000u}) {
        Model split;
        if (!relu_chain(&split, n, d, [](uint32_t i) -> const char* { return i % 2 ? "TEMPLATE" : "CPU"; }) ||
            !print_compile_time(core, split, "HETERO:TEMPLATE,CPU", n))
            return 1;
    }
    return 0;
}
