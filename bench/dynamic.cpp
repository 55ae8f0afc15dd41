// Dynamic shapes: what a new input-shape signature's plan costs (detail::CompileJob::plan_at,
// what a request's first infer at the shape compiles) against a full compile at that shape,
// and what the per-infer shape check costs. The model: BLOCKS blocks of Conv(3x3) -> Add ->
// Relu -> Mul -> Sigmoid on x[N,8,H,W] with N, H, W free, on CPU and on HETERO:TEMPLATE,CPU
// (TEMPLATE takes the Convs, so the partition has a subgraph per device change). Then the same
// for a data-dependent shape: x[4096] -> NonZero -> Cast -> BLOCKS x (Mul, Add, Relu, Sigmoid),
// where a new count of non-zeros plans the later stage (>>stages), against a full compile of
// that chain at the count; and what a cached stage costs per infer.
// Then a Loop whose body has a bounded op inside (prepared at every iteration) against the same
// Loop with a body planned once, per iteration.
// Then the OCR models (build/ocr-models/*.onnx, or the folder given) with their input's batch,
// height and width made free: a new image size's plan against a full compile at that size.
//   build/bench/dynamic [BLOCKS] [OCR_MODEL_DIR]
#define TESSEL_IMPLEMENTATION
#include "runtime.h"
#include "bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

using namespace tessel;
using bench::median;

namespace {
double since_ms(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

bool build_blocks(Model* m, uint32_t blocks) {
    TensorDesc x;
    x.type = ElementType::Float32;
    x.rank = 4;
    int64_t dims[] = {-1, 8, -1, -1};
    for (int i = 0; i < 4; ++i) x.dims[i] = dims[i];
    NodeId p;
    if (m->add_input("x", x, &p) != Status::Ok) return false;
    std::vector<float> w(8 * 8 * 9), b(8), s(8);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.02f * (float)((i * 5) % 11) - 0.1f;
    for (size_t i = 0; i < 8; ++i) { b[i] = 0.01f * (float)i; s[i] = 1.0f - 0.05f * (float)i; }
    TensorDesc wd, cd;
    wd.type = cd.type = ElementType::Float32;
    wd.rank = cd.rank = 4;
    int64_t wdims[] = {8, 8, 3, 3}, cdims[] = {1, 8, 1, 1};
    for (int i = 0; i < 4; ++i) { wd.dims[i] = wdims[i]; cd.dims[i] = cdims[i]; }
    for (uint32_t k = 0; k < blocks; ++k) {
        std::string n = std::to_string(k);
        NodeId wn, bn, sn, conv, add, relu, mul, sig;
        if (m->add_constant(StringView(("w" + n).c_str()), wd, w.data(), &wn) != Status::Ok) return false;
        if (m->add_constant(StringView(("b" + n).c_str()), cd, b.data(), &bn) != Status::Ok) return false;
        if (m->add_constant(StringView(("s" + n).c_str()), cd, s.data(), &sn) != Status::Ok) return false;
        InputRef cin[] = {InputRef::by_id(p), InputRef::by_id(wn)};
        if (m->add_node("Conv", StringView(("conv" + n).c_str()), cin, 1, &conv) != Status::Ok) return false;
        int64_t pads[] = {1, 1, 1, 1};
        if (m->set_ints(conv, "pads", pads) != Status::Ok) return false;
        InputRef ain[] = {InputRef::by_id(conv), InputRef::by_id(bn)};
        if (m->add_node("Add", StringView(("add" + n).c_str()), ain, 1, &add) != Status::Ok) return false;
        InputRef rin[] = {InputRef::by_id(add)};
        if (m->add_node("Relu", StringView(("relu" + n).c_str()), rin, 1, &relu) != Status::Ok) return false;
        InputRef min[] = {InputRef::by_id(relu), InputRef::by_id(sn)};
        if (m->add_node("Mul", StringView(("mul" + n).c_str()), min, 1, &mul) != Status::Ok) return false;
        InputRef sin[] = {InputRef::by_id(mul)};
        if (m->add_node("Sigmoid", StringView(("sig" + n).c_str()), sin, 1, &sig) != Status::Ok) return false;
        p = sig;
    }
    return m->add_output("y", InputRef::by_id(p)) == Status::Ok && m->finalize() == Status::Ok;
}

// The elementwise chain on z[1, n]; with `nonzero`, z = Cast(NonZero(x[4096])) instead of an input.
bool build_chain(Model* m, uint32_t blocks, bool nonzero, int64_t n) {
    TensorDesc zd;
    zd.type = ElementType::Float32;
    zd.rank = nonzero ? 1 : 2;
    zd.dims[0] = nonzero ? 4096 : 1;
    zd.dims[1] = n;
    NodeId p;
    if (m->add_input("x", zd, &p) != Status::Ok) return false;
    if (nonzero) {
        NodeId nz, cast;
        InputRef in[] = {InputRef::by_id(p)};
        if (m->add_node("NonZero", "nz", in, 1, &nz) != Status::Ok) return false;
        InputRef cin[] = {InputRef::by_id(nz)};
        if (m->add_node("Cast", "cast", cin, 1, &cast) != Status::Ok || m->set_int(cast, "to", 1) != Status::Ok) return false;
        p = cast;
    }
    TensorDesc scalar;
    scalar.type = ElementType::Float32;
    float half = 0.5f, tenth = 0.1f;
    NodeId a, b;
    if (m->add_constant("half", scalar, &half, &a) != Status::Ok || m->add_constant("tenth", scalar, &tenth, &b) != Status::Ok) return false;
    for (uint32_t k = 0; k < blocks; ++k) {
        std::string s = std::to_string(k);
        NodeId mul, add, relu, sig;
        InputRef min[] = {InputRef::by_id(p), InputRef::by_id(a)};
        if (m->add_node("Mul", StringView(("mul" + s).c_str()), min, 1, &mul) != Status::Ok) return false;
        InputRef ain[] = {InputRef::by_id(mul), InputRef::by_id(b)};
        if (m->add_node("Add", StringView(("add" + s).c_str()), ain, 1, &add) != Status::Ok) return false;
        InputRef rin[] = {InputRef::by_id(add)};
        if (m->add_node("Relu", StringView(("relu" + s).c_str()), rin, 1, &relu) != Status::Ok) return false;
        InputRef sin[] = {InputRef::by_id(relu)};
        if (m->add_node("Sigmoid", StringView(("sig" + s).c_str()), sin, 1, &sig) != Status::Ok) return false;
        p = sig;
    }
    return m->add_output("y", InputRef::by_id(p)) == Status::Ok && m->finalize() == Status::Ok;
}

// Loop(M = iterations, cond true, x[n]) whose body scans out ReduceSum(Cast(NonZero(x))) (a
// bounded op inside: the body prepares again at each iteration) or, without `nonzero`,
// ReduceSum(x) (a body planned once), and carries Relu(x - 1).
bool build_loop(Model* m, int64_t n, int64_t iterations, bool nonzero) {
    TensorDesc xd, scalar, bd;
    xd.type = ElementType::Float32;
    xd.rank = 1;
    xd.dims[0] = n;
    scalar.type = ElementType::Int64;
    bd.type = ElementType::Bool;
    TensorDesc fd;
    fd.type = ElementType::Float32;
    uint8_t yes = 1;
    float one = 1;
    NodeId x, trip, cond, loop;
    if (m->add_input("x", xd, &x) != Status::Ok || m->add_constant("M", scalar, &iterations, &trip) != Status::Ok ||
        m->add_constant("cond", bd, &yes, &cond) != Status::Ok)
        return false;
    Model* body = nullptr;
    if (m->add_body(&body) != Status::Ok) return false;
    NodeId i, c, xin, bone, keep, sum, sub, relu;
    if (body->add_input("i", scalar, &i) != Status::Ok || body->add_input("c", bd, &c) != Status::Ok ||
        body->add_input("x_in", xd, &xin) != Status::Ok || body->add_constant("one", fd, &one, &bone) != Status::Ok)
        return false;
    InputRef cin[] = {InputRef::by_id(c)};
    if (body->add_node("Identity", "keep_cond", cin, 1, &keep) != Status::Ok) return false;
    NodeId summed = xin;
    if (nonzero) {
        NodeId nz, cast;
        InputRef nin[] = {InputRef::by_id(xin)};
        if (body->add_node("NonZero", "nz", nin, 1, &nz) != Status::Ok) return false;
        InputRef castin[] = {InputRef::by_id(nz)};
        if (body->add_node("Cast", "cast", castin, 1, &cast) != Status::Ok || body->set_int(cast, "to", 1) != Status::Ok) return false;
        summed = cast;
    }
    InputRef sin[] = {InputRef::by_id(summed)};
    if (body->add_node("ReduceSum", "sum", sin, 1, &sum) != Status::Ok || body->set_int(sum, "keepdims", 0) != Status::Ok) return false;
    InputRef subin[] = {InputRef::by_id(xin), InputRef::by_id(bone)};
    if (body->add_node("Sub", "sub", subin, 1, &sub) != Status::Ok) return false;
    InputRef rin[] = {InputRef::by_id(sub)};
    if (body->add_node("Relu", "relu", rin, 1, &relu) != Status::Ok) return false;
    if (body->add_output("cond_out", InputRef::by_id(keep)) != Status::Ok || body->add_output("x_out", InputRef::by_id(relu)) != Status::Ok ||
        body->add_output("s", InputRef::by_id(sum)) != Status::Ok || body->finalize() != Status::Ok)
        return false;
    InputRef in[] = {InputRef::by_id(trip), InputRef::by_id(cond), InputRef::by_id(x)};
    if (m->add_node("Loop", "loop", in, 2, &loop) != Status::Ok || m->set_graph(loop, "body", body) != Status::Ok) return false;
    return m->add_output("x_final", InputRef::by_id(loop, 0)) == Status::Ok && m->add_output("sums", InputRef::by_id(loop, 1)) == Status::Ok &&
           m->finalize() == Status::Ok;
}

// A new input shape's plan as a request's first infer at it compiles one (not cached here).
double plan_ms(const CompiledModel& dynamic, StringView input, const int64_t* dims) {
    InputShape shape[] = {{input, Span<const int64_t>(dims, 4)}};
    CompiledModel::Impl* plan = nullptr;
    char error[kErrorMessageBytes];
    auto start = std::chrono::steady_clock::now();
    if (detail::CompileJob::plan_at(dynamic, shape, &plan, error) != Status::Ok) { std::fprintf(stderr, "%s\n", error); return -1; }
    double ms = since_ms(start);
    destroy(plan);
    return ms;
}

// Full compiles and plans at two shapes taken in turn, a full compile and a plan at each step,
// so a change in the machine's load weighs on both alike: medians of kRuns of each.
constexpr int kRuns = 15;
template <class FullCompile>
bool full_and_plan_ms(const CompiledModel& dynamic, StringView input, const int64_t (*dims)[4], FullCompile full_compile,
                      double* full, double* plan) {
    std::vector<double> fulls, plans;
    for (int run = 0; run < kRuns; ++run) {
        auto start = std::chrono::steady_clock::now();
        if (!full_compile(dims[run % 2])) return false;
        fulls.push_back(since_ms(start));
        double p = plan_ms(dynamic, input, dims[run % 2]);
        if (p < 0) return false;
        plans.push_back(p);
    }
    *full = median(fulls);
    *plan = median(plans);
    return true;
}

// An OCR model with its 4-d input's batch and width made free (and the detector's height: the
// text-line models keep theirs), at its own size and 32 wider (and higher).
void bench_ocr(Core& core, const std::string& dir, const char* name) {
    std::string path = dir + "/" + name + ".onnx";
    Model model;
    if (model.read_onnx_file(path.c_str()) != Status::Ok) { std::printf("%-10s skipped: %s\n", name, model.last_error()); return; }
    NodeId input = model.input(0).node;
    TensorDesc fixed = model.graph.node(input).outputs[0], free = fixed;
    if (fixed.rank != 4) { std::printf("%-10s skipped: input rank %u\n", name, fixed.rank); return; }
    const bool grow_height = std::strcmp(name, "ocr_det") == 0;
    free.dims[0] = free.dims[3] = -1;
    if (grow_height) free.dims[2] = -1;
    if (model.graph.set_output_desc(input, 0, free) != Status::Ok) { std::printf("%-10s skipped: %s\n", name, model.last_error()); return; }
    ConfigEntry config[] = {{"SHAPE_CACHE_SIZE", "1"}};
    CompiledModel dynamic;
    if (core.compile_model(model, "CPU", config, &dynamic) != Status::Ok) { std::printf("%-10s skipped: %s\n", name, core.last_error()); return; }
    int64_t dims[2][4] = {{1, fixed.dims[1], fixed.dims[2], fixed.dims[3]},
                          {1, fixed.dims[1], fixed.dims[2] + (grow_height ? 32 : 0), fixed.dims[3] + 32}};
    double f = 0, p = 0;
    auto full_compile = [&](const int64_t* at) {
        InputShape shape[] = {{model.input(0).name, Span<const int64_t>(at, 4)}};
        CompiledModel at_shape;
        if (core.compile_model(model, "CPU", config, &at_shape, shape) == Status::Ok) return true;
        std::printf("%-10s %s\n", name, core.last_error());
        return false;
    };
    if (!full_and_plan_ms(dynamic, model.input(0).name, dims, full_compile, &f, &p)) return;
    std::printf("%-10s %14.2f %14.2f %8.2f\n", name, f, p, p / f);
}
}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
    // A compile packing megabytes of weights takes 2 ms or 10 ms by whether its pages come from
    // the heap or, page-faulted, from the system, which depends on what earlier rows left
    // where in the heap (glibc trims only its top). Memory is never given back here, so every
    // row times the compile's own work on a warm heap.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    uint32_t blocks = argc > 1 ? (uint32_t)std::atoi(argv[1]) : 200;
    std::string ocr_dir = argc > 2 ? argv[2] : "build/ocr-models";
    if (blocks < 1 || blocks > 20000) { std::fprintf(stderr, "usage: dynamic [BLOCKS]\n"); return 2; }
    Model model;
    if (!build_blocks(&model, blocks)) { std::fprintf(stderr, "%s\n", model.last_error()); return 1; }
    std::printf("%u blocks (%u nodes) on x[N,8,H,W], N,H,W free: a new input shape's plan (as a request's first infer at\n"
                "it compiles it) against a full compile at it, taken in turn, medians of 15\n",
                blocks, model.graph.node_count());
    std::printf("%-22s %14s %14s %8s\n", "device", "compile_ms", "new_shape_ms", "new/full");
    Core core;
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", "Conv"}, {"SHAPE_CACHE_SIZE", "1"}};
        Span<const ConfigEntry> entries(config, device[0] == 'H' ? 2 : 1);
        if (device[0] != 'H') entries = Span<const ConfigEntry>(config + 1, 1);
        CompiledModel dynamic;
        if (core.compile_model(model, device, entries, &dynamic) != Status::Ok) { std::fprintf(stderr, "%s\n", core.last_error()); return 1; }
        int64_t dims[2][4] = {{1, 8, 8, 16}, {1, 8, 8, 18}};
        double f = 0, p = 0;
        auto full_compile = [&](const int64_t* at) {
            InputShape shape[] = {{"x", Span<const int64_t>(at, 4)}};
            CompiledModel fixed;
            if (core.compile_model(model, device, entries, &fixed, shape) == Status::Ok) return true;
            std::fprintf(stderr, "%s\n", core.last_error());
            return false;
        };
        if (!full_and_plan_ms(dynamic, "x", dims, full_compile, &f, &p)) return 1;
        std::printf("%-22s %14.2f %14.2f %8.2f\n", device, f, p, p / f);
    }

    // A data-dependent shape: the later stage's plan at a new count against a full compile of
    // the chain at that count, and a cached signature's infer against the fixed chain's.
    std::printf("\n%u blocks after NonZero (x[4096]): a new count's stage plan against a full compile of the chain at that\n"
                "count, taken in turn, medians of 15 (the plan: an infer that plans minus one that does not, SHAPE_CACHE_SIZE 1)\n", blocks);
    std::printf("%-22s %14s %14s %8s %16s %16s %8s\n", "device", "compile_ms", "new_count_ms", "new/full", "cached_infer_us", "fixed_infer_us",
                "copied");
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        ConfigEntry config[] = {{"SHAPE_CACHE_SIZE", "1"}, {"TEMPLATE:SUPPORTED_OPS", "NonZero,Cast,Relu"}};
        Span<const ConfigEntry> entries(config, device[0] == 'H' ? 2 : 1);
        Model staged_model;
        if (!build_chain(&staged_model, blocks, true, 0)) { std::fprintf(stderr, "%s\n", staged_model.last_error()); return 1; }
        CompiledModel staged;
        if (core.compile_model(staged_model, device, entries, &staged) != Status::Ok) { std::fprintf(stderr, "%s\n", core.last_error()); return 1; }
        InferRequest request;
        if (staged.create_request(&request) != Status::Ok) return 1;
        const int64_t counts[2] = {100, 137};
        std::vector<double> full, fixed_times;
        Tensor x[2];
        for (int k = 0; k < 2; ++k) {
            int64_t n = 4096;
            if (x[k].allocate(ElementType::Float32, Span<const int64_t>(&n, 1)) != Status::Ok) return 1;
            for (int64_t i = 0; i < counts[k]; ++i) x[k].data_as<float>()[i * 3] = 1.0f;
        }
        // A full compile of the chain, then an infer that plans the other count (a one-entry
        // cache), in turn; the request's buffers grown by the first two infers.
        std::vector<double> planned, cached;
        for (int k = 0; k < 2; ++k)
            if (request.set_input(0, x[k]) != Status::Ok || request.infer() != Status::Ok) { std::fprintf(stderr, "%s\n", request.last_error()); return 1; }
        for (int run = 0; run < kRuns; ++run) {
            Model chain;
            if (!build_chain(&chain, blocks, false, counts[run % 2])) return 1;
            CompiledModel fixed;
            auto start = std::chrono::steady_clock::now();
            if (core.compile_model(chain, device, entries, &fixed) != Status::Ok) { std::fprintf(stderr, "%s\n", core.last_error()); return 1; }
            full.push_back(since_ms(start));
            InferRequest fixed_request;
            if (fixed.create_request(&fixed_request) != Status::Ok || fixed_request.infer() != Status::Ok) return 1;
            start = std::chrono::steady_clock::now();
            if (fixed_request.infer() != Status::Ok) return 1;
            fixed_times.push_back(since_ms(start) * 1e3);
            if (request.set_input(0, x[run % 2]) != Status::Ok) return 1;
            start = std::chrono::steady_clock::now();
            if (request.infer() != Status::Ok) { std::fprintf(stderr, "%s\n", request.last_error()); return 1; }
            planned.push_back(since_ms(start));
        }
        for (int k = 0; k < 9; ++k) {
            auto start = std::chrono::steady_clock::now();
            if (request.infer() != Status::Ok) return 1;
            cached.push_back(since_ms(start));
        }
        double f = median(full), p = median(planned) - median(cached);
        // copied: of the stage plans made, those that copied the first one's prepared graph
        std::printf("%-22s %14.2f %14.2f %8.2f %16.1f %16.1f %5u/%u\n", device, f, p, p / f, median(cached) * 1e3, median(fixed_times),
                    staged.copied_stage_plans(), (unsigned)kRuns + 2);
    }

    // The per-infer shape check: Relu on float[1,4], compiled with the batch free and fixed.
    Model tiny;
    TensorDesc d;
    d.type = ElementType::Float32;
    d.rank = 2;
    d.dims[0] = -1;
    d.dims[1] = 4;
    NodeId x, r;
    InputRef in[] = {InputRef::by_id(0)};
    if (tiny.add_input("x", d, &x) != Status::Ok || tiny.add_node("Relu", "r", in, 1, &r) != Status::Ok ||
        tiny.add_output("y", InputRef::by_id(r)) != Status::Ok || tiny.finalize() != Status::Ok)
        return 1;
    int64_t one[] = {1, 4};
    InputShape fixed_shape[] = {{"x", Span<const int64_t>(one, 2)}};
    CompiledModel free_batch, fixed_batch;
    if (core.compile_model(tiny, "TEMPLATE", {}, &free_batch) != Status::Ok ||
        core.compile_model(tiny, "TEMPLATE", {}, &fixed_batch, fixed_shape) != Status::Ok)
        return 1;
    InferRequest a, b;
    Tensor input;
    if (free_batch.create_request(&a) != Status::Ok || fixed_batch.create_request(&b) != Status::Ok ||
        input.allocate(ElementType::Float32, Span<const int64_t>(one, 2)) != Status::Ok || a.set_input(0, input) != Status::Ok ||
        b.set_input(0, input) != Status::Ok)
        return 1;
    std::vector<double> with_check, without;
    const int repeats = 2000;
    for (int run = 0; run < 21; ++run)
        for (int k = 0; k < 2; ++k) {
            InferRequest& req = k ? b : a;
            auto start = std::chrono::steady_clock::now();
            for (int i = 0; i < repeats; ++i) if (req.infer() != Status::Ok) return 1;
            (k ? without : with_check).push_back(since_ms(start) * 1e6 / repeats);
        }
    double c = median(with_check), u = median(without);
    std::printf("\nOCR models on CPU with the input's N, W free (and H for ocr_det): a new image size's plan against a full\n"
                "compile at it, taken in turn, medians of 15\n");
    std::printf("%-10s %14s %14s %8s\n", "model", "compile_ms", "new_shape_ms", "new/full");
    for (const char* name : {"ocr_cls", "ocr_det", "ocr_rec"}) bench_ocr(core, ocr_dir, name);

    // A bounded op inside a Loop body: the body prepared at every iteration, against the same
    // Loop whose body has no bounded op (planned once).
    std::printf("\nLoop of 16 iterations over x[1024] (a quarter non-zero) on CPU, per iteration, medians of 9: a body with\n"
                "NonZero inside (prepared at each iteration) against one with ReduceSum(x) instead (planned once)\n");
    double per_iteration[2] = {0, 0};
    for (int nonzero = 0; nonzero < 2; ++nonzero) {
        Model loop_model;
        if (!build_loop(&loop_model, 1024, 16, nonzero != 0)) { std::fprintf(stderr, "%s\n", loop_model.last_error()); return 1; }
        CompiledModel compiled;
        InferRequest request;
        if (core.compile_model(loop_model, "CPU", {}, &compiled) != Status::Ok || compiled.create_request(&request) != Status::Ok) {
            std::fprintf(stderr, "%s\n", core.last_error());
            return 1;
        }
        float* xs = request.input(0).data_as<float>();
        for (int k = 0; k < 1024; ++k) xs[k] = k % 4 ? 0.0f : (float)(k % 32);
        std::vector<double> times;
        for (int run = 0; run < 10; ++run) {
            auto start = std::chrono::steady_clock::now();
            if (request.infer() != Status::Ok) { std::fprintf(stderr, "%s\n", request.last_error()); return 1; }
            if (run) times.push_back(since_ms(start) * 1e3 / 16);
        }
        per_iteration[nonzero] = median(times);
    }
    std::printf("%-28s %12.1f us\n%-28s %12.1f us\n", "body planned once", per_iteration[0], "body prepared per iteration",
                per_iteration[1]);

    std::printf("\nper-infer shape check (Relu on float[1,4], TEMPLATE): %.1f ns/infer with the batch free, %.1f ns fixed: %.1f ns\n",
                c, u, c - u);
    return 0;
}
