// A device plugin in one file: "NPU", a made-up accelerator that runs only elementwise ops
// (here with Tessel's reference kernels, where a real plugin would call its driver). It shows
// every responsibility of a Device: the availability check at creation, metrics, config keys
// (an unknown one is an error), query_model, compile_subgraph with a DeviceProgram,
// export/import of its payload, and custom ops. HETERO:NPU,CPU then splits a model between it
// and the CPU. This is TEMPLATE's structure (runtime.h, detail::TemplateDevice) cut to the bone.
#define TESSEL_IMPLEMENTATION
#include "runtime.h"

#include <cstdio>
#include <cstring>

using namespace tessel;

namespace {

// The compiled subgraph: one step per node, run by the reference kernel the runtime prepared.
class NpuProgram : public DeviceProgram {
public:
    Arena arena;                    // steps and their value lists live here
    const PreparedModel* model = nullptr;
    ProgramStep* steps_ = nullptr;
    uint32_t count = 0;

    Span<const ProgramStep> steps() const override { return Span<const ProgramStep>(steps_, count); }

    // Must be thread safe: several requests run one program at once. Everything per request
    // (values, scratch) comes in the context.
    Status run_step(uint32_t i, const StepContext& context) const override {
        return model->run_kernel(steps_[i], context);   // the runtime's reference kernel, one thread
    }

    // What import needs to rebuild this program besides the prepared model: a version tag.
    Status export_payload(WriteFn write, void* user) const override {
        write(user, "NPU1", 4);
        return Status::Ok;
    }
};

class Npu : public Device {
public:
    // A real plugin opens its driver in the constructor; check_available() tells
    // Core::register_device whether that worked (a device never half-works).
    Npu() { available_ = true; }

    StringView name() const override { return "NPU"; }
    Status check_available() override { return available_ ? Status::Ok : fail(Status::IoError, "NPU: no driver"); }

    Status get_metric(StringView key, StringView* value) override {
        if (key == StringView("AVAILABLE_DEVICES")) *value = "0";
        else if (key == StringView("FULL_DEVICE_NAME")) *value = "Example NPU (elementwise only)";
        else if (key == StringView("SUPPORTED_METRICS"))
            *value = "AVAILABLE_DEVICES FULL_DEVICE_NAME SUPPORTED_METRICS SUPPORTED_CONFIG_KEYS OPTIMIZATION_CAPABILITIES";
        else if (key == StringView("SUPPORTED_CONFIG_KEYS")) *value = "PERF_COUNT";
        else if (key == StringView("OPTIMIZATION_CAPABILITIES")) *value = "FP32";
        else return fail(Status::NotFound, "NPU has no metric '%.*s'", (int)key.size, key.data);
        return Status::Ok;
    }

    Status set_config(StringView key, StringView value) override {
        if (!(key == StringView("PERF_COUNT"))) return fail(Status::NotFound, "NPU has no config key '%.*s'", (int)key.size, key.data);
        if (!(value == StringView("YES")) && !(value == StringView("NO"))) return fail(Status::InvalidArgument, "NPU: PERF_COUNT is YES or NO");
        std::snprintf(perf_, sizeof perf_, "%.*s", (int)value.size, value.data);
        return Status::Ok;
    }

    Status get_config(StringView key, StringView* value) override {
        if (!(key == StringView("PERF_COUNT"))) return fail(Status::NotFound, "NPU has no config key '%.*s'", (int)key.size, key.data);
        *value = StringView(perf_);
        return Status::Ok;
    }

    // Elementwise float ops only: the node names are the original model's.
    Status query_model(const PreparedModel& model, uint8_t* supported) override {
        const Graph& g = model.model.graph;
        for (NodeId v = 0; v < g.node_count(); ++v) {
            SnippetOp op;
            supported[v] = snippet_op_from_name(g.node(v).op, &op) == Status::Ok ? 1 : 0;
        }
        return Status::Ok;
    }

    Status compile_subgraph(const PreparedModel& model, Span<const NodeId> nodes, DeviceProgram** out) override {
        NpuProgram* p = create<NpuProgram>();   // freed by the runtime with destroy()
        if (!p) return fail(Status::OutOfMemory, "NPU: out of memory");
        p->model = &model;
        p->steps_ = p->arena.allocate_array<ProgramStep>(nodes.size + 1);
        const Graph& g = model.model.graph;
        for (NodeId v : nodes) {   // ascending ids are a topological order
            const Node& n = g.node(v);
            if (n.op == StringView("Parameter") || n.op == StringView("Constant") || n.op == StringView("Result")) continue;
            if (!model.kernel(v) || n.num_inputs > 8 || n.num_outputs > 4) {
                destroy(p);
                return fail(Status::Unsupported, "NPU cannot run '%.*s'", (int)n.name.size, n.name.data);
            }
            uint32_t* reads = p->arena.allocate_array<uint32_t>(n.num_inputs + 1);
            uint32_t* writes = p->arena.allocate_array<uint32_t>(n.num_outputs + 1);
            if (!p->steps_ || !reads || !writes) { destroy(p); return fail(Status::OutOfMemory, "NPU: out of memory"); }
            for (uint32_t i = 0; i < n.num_inputs; ++i) reads[i] = model.value_id(n.inputs[i].producer, n.inputs[i].port);
            for (uint32_t i = 0; i < n.num_outputs; ++i) writes[i] = model.value_id(v, i);
            ProgramStep& step = p->steps_[p->count++];
            step = ProgramStep();
            step.node = v;
            step.kernel = "npu";
            step.reads = Span<const uint32_t>(reads, n.num_inputs);
            step.writes = Span<const uint32_t>(writes, n.num_outputs);
            step.in_place = model.kernel_in_place(v);
            step.scratch_bytes = model.kernel_scratch(v);
        }
        *out = p;
        return Status::Ok;
    }

    Status import_subgraph(const PreparedModel& model, Span<const NodeId> nodes, const void* payload, size_t size,
                           DeviceProgram** out) override {
        if (size != 4 || std::memcmp(payload, "NPU1", 4) != 0) return fail(Status::ParseError, "NPU: unknown payload");
        return compile_subgraph(model, nodes, out);
    }

    Status add_extension(const OpKernel&) override { return fail(Status::Unsupported, "NPU: no custom ops"); }

private:
    bool available_ = false;
    char perf_[4] = "NO";
};

}  // namespace

int main() {
    Npu npu;
    Core core;
    if (core.register_device(&npu) != Status::Ok) { std::puts(core.last_error()); return 1; }   // e.g. no driver

    // x -> MatMul(w) -> Add(b) -> Relu -> y: the NPU takes Add and Relu, CPU the MatMul.
    Model model;
    TensorDesc dx{ElementType::Float32, 2, {4, 8}}, dw{ElementType::Float32, 2, {8, 3}}, db{ElementType::Float32, 1, {3}};
    float w[24], b[3] = {0.5f, -0.5f, 0.25f};
    for (int i = 0; i < 24; ++i) w[i] = (float)(i % 5) * 0.1f - 0.2f;
    NodeId x, wn, bn, mm, add, relu;
    InputRef mm_in[] = {InputRef::by_name("x"), InputRef::by_name("w")};
    InputRef add_in[] = {InputRef::by_name("mm"), InputRef::by_name("b")};
    InputRef relu_in[] = {InputRef::by_name("add")};
    if (model.add_input("x", dx, &x) != Status::Ok || model.add_constant("w", dw, w, &wn) != Status::Ok ||
        model.add_constant("b", db, b, &bn) != Status::Ok || model.add_node("MatMul", "mm", mm_in, 1, &mm) != Status::Ok ||
        model.add_node("Add", "add", add_in, 1, &add) != Status::Ok || model.add_node("Relu", "relu", relu_in, 1, &relu) != Status::Ok ||
        model.add_output("y", InputRef::by_name("relu")) != Status::Ok || model.finalize() != Status::Ok) {
        std::puts(model.last_error());
        return 1;
    }
    CompiledModel compiled;
    if (core.compile_model(model, "HETERO:NPU,CPU", {}, &compiled) != Status::Ok) { std::puts(core.last_error()); return 1; }
    compiled.write_summary([](void*, const char* d, size_t n) { std::fwrite(d, 1, n, stdout); }, nullptr);
    InferRequest request;
    if (compiled.create_request(&request) != Status::Ok) return 1;
    for (int i = 0; i < 32; ++i) request.input(0).data_as<float>()[i] = (float)i * 0.1f - 1.0f;
    if (request.infer() != Status::Ok) { std::puts(request.last_error()); return 1; }
    const float* y = request.output(0).data_as<float>();
    std::printf("y[0] = %.4f %.4f %.4f\n", y[0], y[1], y[2]);
    bool split = compiled.placement().size == 2 && compiled.placement()[0].nodes == 2;
    // An unknown config key is an error, never ignored.
    ConfigEntry bad[] = {{"NPU:CLOCK_MHZ", "800"}};
    if (core.compile_model(model, "HETERO:NPU,CPU", bad, &compiled) != Status::NotFound) return 1;
    std::printf("%s\n", core.last_error());
    return split ? 0 : 1;
}
