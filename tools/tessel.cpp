// The `tessel` command line.
//   tessel partition GRAPH.txt [--devices A,B,...] [--algo rollback|levels|waves] [--trace]
//                    [--dot FILE] [--min-size N] [--reasons] [--threads N]
//   tessel run MODEL.onnx|COMPILED [--device D] [--inputs DIR] [--shape NAME=D1,D2,..]
//                    [--output-dir DIR] [--compare DIR [--rtol R] [--atol A]] [--bench N [--no-reference]]
//                    [--threads N] [--isa NAME] [--config [DEVICE:]KEY=VALUE]...
//                    [--perf-counts] [--profile FILE.html] [--dump-partition FILE.dot]
//   tessel compile MODEL.onnx [--device D] [--config ...] [--shape ...] -o FILE
//   tessel info MODEL.onnx [--device D] [--config ...] [--shape ...]
//   tessel devices
//   tessel demo        partitions the hetero seed's example graph, then runs a small model on HETERO
//   tessel version
// Exit status: 0 on success, 1 when --compare finds a mismatch, 2 with a one-line message on
// bad input or usage.
// The library's implementation is tools/impl.cpp, linked with this file.
#include "runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using namespace tessel;

void write_stdout(void*, const char* data, size_t size) { std::fwrite(data, 1, size, stdout); }
void write_file(void* user, const char* data, size_t size) { std::fwrite(data, 1, size, static_cast<std::FILE*>(user)); }

int usage() {
    std::fprintf(stderr,
                 "usage: tessel partition GRAPH.txt [--devices A,B,...] [--algo rollback|levels|waves]\n"
                 "                        [--trace] [--dot FILE] [--min-size N] [--reasons] [--threads N]\n"
                 "       tessel run MODEL.onnx|COMPILED [--device D] [--inputs DIR] [--shape NAME=D1,D2,..]\n"
                 "                  [--output-dir DIR] [--compare DIR [--rtol R] [--atol A]] [--bench N [--no-reference]]\n"
                 "                  [--threads N] [--isa NAME] [--config [DEVICE:]KEY=VALUE]...\n"
                 "                  [--perf-counts] [--profile FILE.html] [--dump-partition FILE.dot]\n"
                 "       tessel compile MODEL.onnx [--device D] [--config ...] [--shape ...] -o FILE\n"
                 "       tessel info MODEL.onnx [--device D] [--config ...] [--shape ...]\n"
                 "       tessel devices\n"
                 "       tessel demo\n"
                 "       tessel version\n");
    return 2;
}

// Reads a whole file into memory from TESSEL_MALLOC; nullptr and a message on failure.
char* read_file(const char* path, size_t* size) {
    std::FILE* file = std::fopen(path, "rb");
    if (!file) { std::fprintf(stderr, "tessel: cannot open '%s'\n", path); return nullptr; }
    size_t capacity = 1 << 16, used = 0;
    char* data = static_cast<char*>(TESSEL_MALLOC(capacity));
    while (data) {
        used += std::fread(data + used, 1, capacity - used, file);
        if (used < capacity) break;
        char* bigger = static_cast<char*>(TESSEL_MALLOC(capacity * 2));
        if (bigger) std::memcpy(bigger, data, used);
        TESSEL_FREE(data);
        data = bigger;
        capacity *= 2;
    }
    bool failed = std::ferror(file);
    std::fclose(file);
    if (!data || failed) {
        TESSEL_FREE(data);
        std::fprintf(stderr, "tessel: cannot read '%s'\n", path);
        return nullptr;
    }
    *size = used;
    return data;
}

// One line per subgraph, `<device>: <names in file order>`, then the summary line.
void print_partition(const Graph& graph, const Partition& result, double microseconds) {
    for (const Subgraph& subgraph : result.subgraphs) {
        StringView device = graph.device_name(subgraph.device);
        std::printf("%.*s:", (int)device.size, device.data);
        for (NodeId v : subgraph.nodes) std::printf(" %s", graph.node(v).name.data);
        std::printf("\n");
    }
    std::printf("# subgraphs=%zu cross_edges=%u algo=%s time_us=%.0f\n", result.subgraphs.size, result.cross_edges,
                algorithm_name(result.algorithm), microseconds);
}

int partition_text(const char* text, size_t size, const char* devices_arg, PartitionAlgorithm algorithm, bool trace,
                   const char* dot_path, uint32_t min_size, bool reasons, uint32_t threads = 1) {
    Arena arena;
    Graph graph(&arena);
    if (read_text(StringView(text, size), &graph) != Status::Ok) {
        std::fprintf(stderr, "tessel: %s\n", graph.last_error());
        return 2;
    }
    StringView devices[64];
    PartitionOptions options;
    options.algorithm = algorithm;
    options.min_subgraph_size = min_size;
    options.threads = threads;
    if (devices_arg) {
        size_t count = 0;
        for (const char* p = devices_arg; *p;) {
            const char* end = std::strchr(p, ',');
            size_t length = end ? (size_t)(end - p) : std::strlen(p);
            if (length == 0 || count == 64) { std::fprintf(stderr, "tessel: bad --devices list '%s'\n", devices_arg); return 2; }
            devices[count++] = StringView(p, length);
            p += length + (end ? 1 : 0);
        }
        options.devices = Span<const StringView>(devices, count);
    }
    if (trace) options.trace = write_stdout;
    Partition result;
    auto start = std::chrono::steady_clock::now();
    Status status = partition(graph, options, &arena, &result);
    double microseconds = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    if (status != Status::Ok) {
        std::fprintf(stderr, "tessel: %s\n", result.last_error());
        return 2;
    }
    if (check_partition(graph, &result) != Status::Ok) {  // a library bug, not bad input
        std::fprintf(stderr, "tessel: internal error: invalid partition: %s\n", result.last_error());
        return 1;
    }
    print_partition(graph, result, microseconds);
    if (reasons) write_placements(graph, result, write_stdout, nullptr);
    if (dot_path) {
        std::FILE* file = std::fopen(dot_path, "wb");
        if (!file) { std::fprintf(stderr, "tessel: cannot write '%s'\n", dot_path); return 2; }
        write_dot(graph, &result, write_file, file);
        if (std::fclose(file) != 0) { std::fprintf(stderr, "tessel: cannot write '%s'\n", dot_path); return 2; }
    }
    return 0;
}

int command_partition(int argc, char** argv) {
    const char* path = nullptr;
    const char* devices = nullptr;
    const char* dot = nullptr;
    PartitionAlgorithm algorithm = PartitionAlgorithm::Rollback;
    bool trace = false, reasons = false;
    uint32_t min_size = 0, threads = 1;
    for (int i = 0; i < argc; ++i) {
        const char* arg = argv[i];
        bool has_value = i + 1 < argc;
        if (!std::strcmp(arg, "--devices") && has_value) devices = argv[++i];
        else if (!std::strcmp(arg, "--dot") && has_value) dot = argv[++i];
        else if (!std::strcmp(arg, "--algo") && has_value) {
            if (parse_algorithm(argv[++i], &algorithm) != Status::Ok) {
                std::fprintf(stderr, "tessel: unknown algorithm '%s' (rollback, levels, waves)\n", argv[i]);
                return 2;
            }
        } else if (!std::strcmp(arg, "--min-size") && has_value) {
            char* end = nullptr;
            unsigned long value = std::strtoul(argv[++i], &end, 10);
            if (!*argv[i] || *end || value > 0xffffffffu) { std::fprintf(stderr, "tessel: bad --min-size '%s'\n", argv[i]); return 2; }
            min_size = (uint32_t)value;
        } else if (!std::strcmp(arg, "--threads") && has_value) {  // rollback's helper thread: 2
            char* end = nullptr;
            unsigned long value = std::strtoul(argv[++i], &end, 10);
            if (*argv[i] < '0' || *argv[i] > '9' || *end || value < 1 || value > 64) {
                std::fprintf(stderr, "tessel: bad --threads '%s' (1 to 64)\n", argv[i]);
                return 2;
            }
            threads = (uint32_t)value;
        } else if (!std::strcmp(arg, "--trace")) trace = true;
        else if (!std::strcmp(arg, "--reasons")) reasons = true;
        else if (arg[0] == '-' || path) { std::fprintf(stderr, "tessel: unexpected argument '%s'\n", arg); return usage(); }
        else path = arg;
    }
    if (!path) return usage();
    size_t size = 0;
    char* text = read_file(path, &size);
    if (!text) return 2;
    int code = partition_text(text, size, devices, algorithm, trace, dot, min_size, reasons, threads);
    TESSEL_FREE(text);
    return code;
}

int command_demo() {
    static const char kSeed[] = "1 A\n2 A 1\n3 A 2\n4 B 2\n5 A 3 4\n6 A 5\n7 A 6\n";
    std::printf("The hetero seed's example graph (node 4 runs on device B only):\n%s\n", kSeed);
    const PartitionAlgorithm all[] = {PartitionAlgorithm::Rollback, PartitionAlgorithm::Levels, PartitionAlgorithm::Waves};
    for (PartitionAlgorithm algorithm : all) {
        std::printf("== %s\n", algorithm_name(algorithm));
        int code = partition_text(kSeed, sizeof kSeed - 1, nullptr, algorithm, algorithm == PartitionAlgorithm::Rollback,
                                  nullptr, 0, false);
        if (code != 0) return code;
    }
    return 0;
}

// ---- models: run, compile, info, devices ----------------------------------------------

// Options shared by run, compile and info.
struct ModelOptions {
    const char* path = nullptr;
    const char* device = "CPU";
    const char* inputs_dir = nullptr;
    const char* output_dir = nullptr;
    const char* compare_dir = nullptr;
    const char* output_file = nullptr;
    const char* profile = nullptr;
    const char* dump_partition = nullptr;
    double rtol = 1e-3, atol = 1e-5;
    uint32_t bench = 0;
    // --no-reference: time the model back to back, as other runtimes' benches do; the reference
    // runs interleaved with it evict its weights and activations from the caches.
    bool bench_reference = true;
    bool perf_counts = false;
    // --config, --threads, --isa: "DEVICE:KEY" or "KEY" and value, kept in static storage
    ConfigEntry config[64];
    uint32_t config_count = 0;
    char config_text[64][160];
    InputShape shapes[16];
    int64_t shape_dims[16][kMaxRank];
    uint32_t shape_count = 0;
    char shape_names[16][128];
};

bool add_config(ModelOptions* o, const char* key, size_t key_size, const char* value) {
    if (o->config_count == 64 || key_size == 0 || key_size + std::strlen(value) + 2 > sizeof o->config_text[0]) return false;
    char* text = o->config_text[o->config_count];
    std::snprintf(text, sizeof o->config_text[0], "%.*s", (int)key_size, key);
    char* v = text + key_size + 1;
    std::snprintf(v, sizeof o->config_text[0] - key_size - 1, "%s", value);
    o->config[o->config_count++] = ConfigEntry{StringView(text, key_size), StringView(v)};
    return true;
}

bool parse_shape(ModelOptions* o, const char* arg) {
    const char* eq = std::strchr(arg, '=');
    if (!eq || eq == arg || o->shape_count == 16 || (size_t)(eq - arg) >= sizeof o->shape_names[0]) return false;
    uint32_t k = o->shape_count;
    std::snprintf(o->shape_names[k], sizeof o->shape_names[k], "%.*s", (int)(eq - arg), arg);
    size_t rank = 0;
    for (const char* p = eq + 1; *p;) {
        char* end = nullptr;
        long long d = std::strtoll(p, &end, 10);
        if (end == p || d < 0 || rank == kMaxRank || (*end && *end != ',')) return false;
        o->shape_dims[k][rank++] = d;
        p = *end ? end + 1 : end;
    }
    o->shapes[k] = InputShape{StringView(o->shape_names[k]), Span<const int64_t>(o->shape_dims[k], rank)};
    ++o->shape_count;
    return true;
}

bool parse_number(const char* text, double* out) {
    char* end = nullptr;
    *out = std::strtod(text, &end);
    return *text && !*end && *out >= 0;
}

// Returns 0 when parsed, else the exit code.
int parse_model_options(int argc, char** argv, ModelOptions* o, bool allow_output) {
    for (int i = 0; i < argc; ++i) {
        const char* arg = argv[i];
        bool v = i + 1 < argc;
        if (!std::strcmp(arg, "--device") && v) o->device = argv[++i];
        else if (!std::strcmp(arg, "--inputs") && v) o->inputs_dir = argv[++i];
        else if (!std::strcmp(arg, "--output-dir") && v) o->output_dir = argv[++i];
        else if (!std::strcmp(arg, "--compare") && v) o->compare_dir = argv[++i];
        else if (!std::strcmp(arg, "--profile") && v) o->profile = argv[++i];
        else if (!std::strcmp(arg, "--dump-partition") && v) o->dump_partition = argv[++i];
        else if (!std::strcmp(arg, "-o") && v && allow_output) o->output_file = argv[++i];
        else if (!std::strcmp(arg, "--perf-counts")) o->perf_counts = true;
        else if (!std::strcmp(arg, "--no-reference")) o->bench_reference = false;
        else if ((!std::strcmp(arg, "--rtol") || !std::strcmp(arg, "--atol")) && v) {
            double x;
            if (!parse_number(argv[++i], &x)) { std::fprintf(stderr, "tessel: bad %s '%s'\n", arg, argv[i]); return 2; }
            (arg[2] == 'r' ? o->rtol : o->atol) = x;
        } else if (!std::strcmp(arg, "--bench") && v) {
            char* end = nullptr;
            unsigned long n = std::strtoul(argv[++i], &end, 10);
            if (!*argv[i] || *end || n == 0 || n > 1000000) { std::fprintf(stderr, "tessel: bad --bench '%s'\n", argv[i]); return 2; }
            o->bench = (uint32_t)n;
        } else if (!std::strcmp(arg, "--threads") && v) {
            if (!add_config(o, "CPU:NUM_THREADS", 15, argv[++i])) return 2;
        } else if (!std::strcmp(arg, "--isa") && v) {
            if (!add_config(o, "CPU:ISA", 7, argv[++i])) return 2;
        } else if (!std::strcmp(arg, "--config") && v) {
            const char* kv = argv[++i];
            const char* eq = std::strchr(kv, '=');
            if (!eq || !add_config(o, kv, (size_t)(eq - kv), eq + 1)) {
                std::fprintf(stderr, "tessel: bad --config '%s' (expected [DEVICE:]KEY=VALUE)\n", kv);
                return 2;
            }
        } else if (!std::strcmp(arg, "--shape") && v) {
            if (!parse_shape(o, argv[++i])) { std::fprintf(stderr, "tessel: bad --shape '%s' (expected NAME=D1,D2,..)\n", argv[i]); return 2; }
        } else if (arg[0] == '-' || o->path) {
            std::fprintf(stderr, "tessel: unexpected argument '%s'\n", arg);
            return 2;
        } else o->path = arg;
    }
    if (!o->path) { std::fprintf(stderr, "tessel: no model file given\n"); return 2; }
    if (o->perf_counts && !add_config(o, "PERF_COUNT", 10, "YES")) return 2;
    return 0;
}

// Symbolic dims come from --shape, else from the input files of --inputs. Returns the count.
uint32_t input_shapes(const ModelOptions& o, const Model& model, InputShape* shapes) {
    static int64_t dims[64][kMaxRank];
    uint32_t count = 0;
    for (uint32_t i = 0; i < o.shape_count; ++i) shapes[count++] = o.shapes[i];
    for (uint32_t i = 0; o.inputs_dir && i < model.input_count() && count < 64; ++i) {
        bool given = false;
        for (uint32_t k = 0; k < o.shape_count; ++k) given = given || o.shapes[k].name == model.input(i).name;
        if (given) continue;
        char path[4096];
        std::snprintf(path, sizeof path, "%s/input_%u.pb", o.inputs_dir, i);
        Tensor t;
        if (read_tensor_file(path, &t) != Status::Ok) continue;   // reported when the inputs are set
        for (uint32_t k = 0; k < t.rank(); ++k) dims[count][k] = t.dim(k);
        shapes[count] = InputShape{model.input(i).name, Span<const int64_t>(dims[count], t.rank())};
        ++count;
    }
    return count;
}

// A desc with its free dims by name (`batch`, or `?` for an unnamed one) when `model` has them.
void describe_symbolic(const TensorDesc& d, const Model* model, uint32_t input, char* out, size_t size) {
    size_t k = (size_t)std::snprintf(out, size, "%s[", element_type_name(d.type));
    for (uint32_t i = 0; i < d.rank && k < size; ++i) {
        StringView name = model && d.dims[i] < 0 ? model->dim_name(input, i) : StringView();
        if (d.dims[i] >= 0) k += (size_t)std::snprintf(out + k, size - k, "%s%lld", i ? "," : "", (long long)d.dims[i]);
        else k += (size_t)std::snprintf(out + k, size - k, "%s%.*s", i ? "," : "", name.empty() ? 1 : (int)name.size, name.empty() ? "?" : name.data);
    }
    if (k < size) std::snprintf(out + k, size - k, "]");
}

// Reads MODEL.onnx, or imports a compiled blob (by its magic), and compiles. 0 or exit code.
int load_and_compile(Core* core, const ModelOptions& o, Model* model, CompiledModel* compiled, bool* from_blob) {
    char magic[8] = {};
    std::FILE* file = std::fopen(o.path, "rb");
    if (!file) { std::fprintf(stderr, "tessel: cannot open '%s'\n", o.path); return 2; }
    *from_blob = std::fread(magic, 1, sizeof magic, file) == sizeof magic && std::memcmp(magic, "TESSELCM", 8) == 0;
    std::fclose(file);
    Status s;
    if (*from_blob) {
        size_t size = 0;
        char* bytes = read_file(o.path, &size);
        if (!bytes) return 2;
        s = core->import_model(bytes, size, compiled, Span<const ConfigEntry>(o.config, o.config_count));
        TESSEL_FREE(bytes);
        if (s != Status::Ok) { std::fprintf(stderr, "tessel: %s: %s\n", o.path, core->last_error()); return 2; }
        return 0;
    }
    s = model->read_onnx_file(o.path);
    if (s != Status::Ok) { std::fprintf(stderr, "tessel: %s: %s\n", o.path, model->last_error()); return 2; }
    InputShape shapes[64];
    uint32_t count = input_shapes(o, *model, shapes);
    s = core->compile_model(*model, o.device, Span<const ConfigEntry>(o.config, o.config_count), compiled,
                            Span<const InputShape>(shapes, count));
    if (s != Status::Ok) {
        std::fprintf(stderr, "tessel: %s: %s\n", o.path, core->last_error());
        for (uint32_t i = 0; i < model->input_count(); ++i) {   // the free dims to name with --shape
            const TensorDesc& d = model->graph.node(model->input(i).node).outputs[0];
            bool free = false, given = false;
            for (uint32_t k = 0; k < d.rank; ++k) free = free || d.dims[k] < 0;
            for (uint32_t k = 0; k < count; ++k) given = given || shapes[k].name == model->input(i).name;
            if (!free || given) continue;
            char desc[256];
            describe_symbolic(d, model, i, desc, sizeof desc);
            std::fprintf(stderr, "tessel: give --shape %.*s=D1,D2,.. for %s\n", (int)model->input(i).name.size, model->input(i).name.data, desc);
        }
        return 2;
    }
    return 0;
}

// Seeded inputs: floats in [-1, 1), integers in [0, 4), booleans.
void fill_random(Tensor& t, uint32_t seed) {
    uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);
    auto next = [&state] { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return state; };
    for (uint64_t i = 0; i < t.elements(); ++i) {
        uint64_t r = next();
        switch (t.type()) {
            case ElementType::Float32: t.data_as<float>()[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2 - 1); break;
            case ElementType::Int64: t.data_as<int64_t>()[i] = (int64_t)(r % 4); break;
            case ElementType::Int32: t.data_as<int32_t>()[i] = (int32_t)(r % 4); break;
            case ElementType::Bool: case ElementType::UInt8: case ElementType::Int8: t.data_as<uint8_t>()[i] = (uint8_t)(r % 2); break;
            case ElementType::Float16: t.data_as<uint16_t>()[i] = (uint16_t)(0x3800 + r % 0x400); break;  // [0.5, 1)
            case ElementType::BFloat16: t.data_as<uint16_t>()[i] = (uint16_t)(0x3f00 + r % 0x80); break;  // [0.5, 1)
            case ElementType::Float64: t.data_as<double>()[i] = (double)(r >> 11) / 9007199254740992.0 * 2 - 1; break;
            case ElementType::UInt64: t.data_as<uint64_t>()[i] = r % 4; break;
            case ElementType::UInt32: t.data_as<uint32_t>()[i] = (uint32_t)(r % 4); break;
            case ElementType::Int16: case ElementType::UInt16: t.data_as<uint16_t>()[i] = (uint16_t)(r % 4); break;
            default: break;
        }
    }
}

void describe_desc(const TensorDesc& d, char* out, size_t size) {
    size_t k = (size_t)std::snprintf(out, size, "%s[", element_type_name(d.type));
    for (uint32_t i = 0; i < d.rank && k < size; ++i) k += (size_t)std::snprintf(out + k, size - k, "%s%lld", i ? "," : "", (long long)d.dims[i]);
    if (k < size) std::snprintf(out + k, size - k, "]");
}

const InputShape* given_shape(const ModelOptions& o, StringView name) {
    for (uint32_t k = 0; k < o.shape_count; ++k) if (o.shapes[k].name == name) return &o.shapes[k];
    return nullptr;
}

// Inputs from DIR/input_<i>.pb (kept alive in `keep`, one per input) or seeded random. With
// free input dims (a symbolic blob, or --shape leaving some free), random inputs take --shape,
// else the free dims at 1, said in one line.
int set_inputs(InferRequest& request, const CompiledModel& compiled, const ModelOptions& o, Tensor* keep,
               const Model* model = nullptr, bool quiet = false) {
    if (compiled.input_count() > 64) { std::fprintf(stderr, "tessel: more than 64 inputs\n"); return 2; }
    char ones[1024] = "";
    size_t ones_at = 0;
    for (uint32_t i = 0; i < compiled.input_count(); ++i) {
        if (!o.inputs_dir && compiled.has_free_dims()) {
            const InputShape* shape = given_shape(o, compiled.input(i).name);
            if (shape) {
                Status s = keep[i].allocate(compiled.input_desc(i).type, shape->dims);
                if (s == Status::Ok) {
                    fill_random(keep[i], 1234 + i);
                    s = request.set_input(i, keep[i]);
                }
                if (s != Status::Ok) { std::fprintf(stderr, "tessel: --shape %s: %s\n", shape->name.data, request.last_error()); return 2; }
                continue;
            }
            const TensorDesc& d = compiled.input_desc(i);
            bool free = false;
            for (uint32_t k = 0; k < d.rank; ++k) free = free || d.dims[k] < 0;
            if (free && ones_at < sizeof ones) {
                uint32_t source = model ? model->find_input(compiled.input(i).name) : kNotFound;
                char desc[256];
                describe_symbolic(d, source == kNotFound ? nullptr : model, source, desc, sizeof desc);
                ones_at += (size_t)std::snprintf(ones + ones_at, sizeof ones - ones_at, "%s%.*s %s", ones_at ? ", " : "",
                                                 (int)compiled.input(i).name.size, compiled.input(i).name.data, desc);
            }
        }
        if (!o.inputs_dir) { fill_random(request.input(i), 1234 + i); continue; }
        char path[4096];
        std::snprintf(path, sizeof path, "%s/input_%u.pb", o.inputs_dir, i);
        Status s = read_tensor_file(path, &keep[i]);
        if (s != Status::Ok) { std::fprintf(stderr, "tessel: %s: cannot read a tensor (%s)\n", path, status_name(s)); return 2; }
        if (request.set_input(i, keep[i]) != Status::Ok) {
            std::fprintf(stderr, "tessel: %s: %s\n", path, request.last_error());
            return 2;
        }
    }
    if (ones_at && !quiet) std::printf("free input dims set to 1 (--shape NAME=D1,D2,.. sets them): %s\n", ones);
    return 0;
}

double percentile(double* values, uint32_t n, double p) {
    std::sort(values, values + n);
    uint32_t k = (uint32_t)(p * (n - 1) + 0.5);
    return values[k < n ? k : n - 1];
}

// Times `runs` inferences of `a` (and of `b`, interleaved one for one so both see the same
// machine load) after 3 warm-up ones each; medians, minima and 90th percentiles in ms. With
// node_us (a's profile_count entries), also each step's median time over the runs in us.
struct BenchResult {
    double median = 0, minimum = 0, p90 = 0;
};
int bench_requests(InferRequest& a, InferRequest* b, uint32_t runs, BenchResult* ra, BenchResult* rb, double* node_us,
                   size_t profile_count) {
    for (int i = 0; i < 3; ++i)
        if (a.infer() != Status::Ok || (b && b->infer() != Status::Ok)) return 2;
    const size_t steps = node_us ? profile_count : 0;
    double* times = static_cast<double*>(TESSEL_MALLOC(sizeof(double) * runs * (2 + steps)));
    if (!times) return 2;
    double* step_times = times + 2 * runs;   // [step][run]
    for (uint32_t i = 0; i < runs; ++i)
        for (int k = 0; k < (b ? 2 : 1); ++k) {
            InferRequest& r = k ? *b : a;
            auto start = std::chrono::steady_clock::now();
            if (r.infer() != Status::Ok) { TESSEL_FREE(times); return 2; }
            times[k * runs + i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
            if (k == 0 && steps) {
                Span<const ProfileEntry> profile = a.profiling_info();
                for (size_t e = 0; e < steps; ++e) step_times[e * runs + i] = e < profile.size ? (double)profile[e].ns / 1000.0 : 0.0;
            }
        }
    for (int k = 0; k < (b ? 2 : 1); ++k) {
        BenchResult* r = k ? rb : ra;
        r->minimum = percentile(times + k * runs, runs, 0);
        r->median = percentile(times + k * runs, runs, 0.5);
        r->p90 = percentile(times + k * runs, runs, 0.9);
    }
    for (size_t e = 0; e < steps; ++e) node_us[e] = percentile(step_times + e * runs, runs, 0.5);
    TESSEL_FREE(times);
    return 0;
}

// The request's per-step times: us[e] for entry e < us_count (the bench's medians), else the
// last inference's; then each device's total.
void print_perf_counts(const InferRequest& request, const CompiledModel& compiled, const double* us, size_t us_count) {
    std::printf("%-40s %-10s %-24s %10s\n", "node", "device", "kernel", "time_us");
    Span<const ProfileEntry> profile = request.profiling_info();
    for (size_t k = 0; k < profile.size; ++k) {
        const ProfileEntry& e = profile[k];
        std::printf("%-40.*s %-10.*s %-24s %10.1f\n", (int)e.node.size, e.node.data, (int)e.device.size, e.device.data, e.kernel,
                    k < us_count ? us[k] : (double)e.ns / 1000.0);
    }
    for (const PlacementSummary& p : compiled.placement()) {   // per device totals
        double total = 0;
        for (size_t k = 0; k < profile.size; ++k)
            if (profile[k].device == p.device) total += k < us_count ? us[k] : (double)profile[k].ns / 1000.0;
        std::printf("time %.*s %.1f us\n", (int)p.device.size, p.device.data, total);
    }
}

int command_run(int argc, char** argv) {
    ModelOptions o;
    int code = parse_model_options(argc, argv, &o, false);
    if (code) return code;
    if (o.profile) {
#ifndef TESSEL_USE_MICROPROFILE
        std::fprintf(stderr, "tessel: --profile needs a build with TESSEL_USE_MICROPROFILE (make build/tessel-profile)\n");
        return 2;
#else
        MicroProfileOnThreadCreate("main");
        MicroProfileSetEnableAllGroups(1);
#endif
    }
    Core core;
    Model model;
    CompiledModel compiled;
    bool from_blob = false;
    auto start = std::chrono::steady_clock::now();
    code = load_and_compile(&core, o, &model, &compiled, &from_blob);
    if (code) return code;
    double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    InferRequest request;
    start = std::chrono::steady_clock::now();
    if (compiled.create_request(&request) != Status::Ok) { std::fprintf(stderr, "tessel: %s\n", compiled.last_error()); return 2; }
    double request_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s in %.2f ms\n", from_blob ? "imported" : "read and compiled", load_ms);
    std::printf("request created in %.2f ms (its activations and scratch touched)\n", request_ms);
    Tensor inputs[64];
    code = set_inputs(request, compiled, o, inputs, from_blob ? nullptr : &model);
    if (code) return code;
    Status s = request.infer();
    if (s != Status::Ok) { std::fprintf(stderr, "tessel: inference failed: %s\n", request.last_error()); return 2; }
    compiled.write_summary(write_stdout, nullptr);
#ifdef TESSEL_USE_MICROPROFILE
    if (o.profile) {   // a few frames, then the HTML timeline
        for (int frame = 0; frame < 4 && s == Status::Ok; ++frame) {
            MicroProfileFlip(nullptr);
            s = request.infer();
        }
        MicroProfileFlip(nullptr);
        MicroProfileDumpFileImmediately(o.profile, nullptr, nullptr);
        std::printf("profile written to %s\n", o.profile);
    }
#endif
    for (uint32_t i = 0; i < compiled.output_count(); ++i) {
        char d[160];
        describe_desc(request.output(i).desc(), d, sizeof d);   // the shapes of this inference
        const ModelPort& p = compiled.output(i);
        std::printf("output %u '%.*s' %s\n", i, (int)p.name.size, p.name.data, d);
    }
    if (o.perf_counts && !o.bench) print_perf_counts(request, compiled, nullptr, 0);   // with --bench: the bench's medians, after it
    if (o.dump_partition) {
        std::FILE* file = std::fopen(o.dump_partition, "wb");
        if (!file) { std::fprintf(stderr, "tessel: cannot write '%s'\n", o.dump_partition); return 2; }
        const Partition* p = compiled.partition();
        write_dot(compiled.prepared()->model.graph, p && p->subgraphs.size ? p : nullptr, write_file, file);
        if (std::fclose(file) != 0) { std::fprintf(stderr, "tessel: cannot write '%s'\n", o.dump_partition); return 2; }
    }
    if (o.output_dir) {
        for (uint32_t i = 0; i < compiled.output_count(); ++i) {
            char path[4096];
            std::snprintf(path, sizeof path, "%s/output_%u.pb", o.output_dir, i);
            std::FILE* file = std::fopen(path, "wb");
            if (!file) { std::fprintf(stderr, "tessel: cannot write '%s'\n", path); return 2; }
            ignore_status(write_tensor_proto(request.output(i), compiled.output(i).name, write_file, file));
            if (std::fclose(file) != 0) { std::fprintf(stderr, "tessel: cannot write '%s'\n", path); return 2; }
        }
    }
    int result = 0;
    if (o.compare_dir) {
        for (uint32_t i = 0; i < compiled.output_count(); ++i) {
            char path[4096];
            std::snprintf(path, sizeof path, "%s/output_%u.pb", o.compare_dir, i);
            Tensor want;
            s = read_tensor_file(path, &want);
            if (s != Status::Ok) { std::fprintf(stderr, "tessel: %s: cannot read a tensor (%s)\n", path, status_name(s)); return 2; }
            const Tensor& got = request.output(i);
            char a[160], b[160];
            describe_desc(got.desc(), a, sizeof a);
            describe_desc(want.desc(), b, sizeof b);
            bool same_shape = got.elements() == want.elements() && got.rank() == want.rank();
            for (uint32_t k = 0; same_shape && k < got.rank(); ++k) same_shape = got.dim(k) == want.dim(k);
            if (!same_shape) {
                std::printf("output %u: MISMATCH shape %s, expected %s\n", i, a, b);
                result = 1;
                continue;
            }
            double worst = 0, worst_excess = 0;
            uint64_t at = 0, bad = 0;
            for (uint64_t k = 0; k < got.elements(); ++k) {
                double x = element_value(got, k), y = element_value(want, k);
                if (std::isnan(x) && std::isnan(y)) continue;
                double err = std::fabs(x - y);
                if (std::isinf(y) && x == y) err = 0;
                double excess = err - (o.atol + o.rtol * std::fabs(y));
                if (std::isnan(err) || excess > 0) ++bad;
                if (std::isnan(err) || err > worst) { worst = std::isnan(err) ? INFINITY : err; at = k; }
                if (excess > worst_excess) worst_excess = excess;
            }
            std::printf("output %u: %s max_abs_error=%.3g at %llu (%llu of %llu outside rtol=%g atol=%g)\n", i,
                        bad ? "MISMATCH" : "ok", worst, (unsigned long long)at, (unsigned long long)bad,
                        (unsigned long long)got.elements(), o.rtol, o.atol);
            if (bad) result = 1;
        }
    }
    if (o.bench) {
        // The reference path (snippets off), measured in the same run, interleaved.
        CompiledModel reference;
        InferRequest rr;
        Tensor reference_inputs[64];
        bool with_reference = false;
        if (!from_blob && o.bench_reference) {
            ModelOptions r = o;
            InputShape shapes[64];
            uint32_t count = input_shapes(o, model, shapes);
            with_reference = add_config(&r, "CPU:FUSION", 10, "NO") &&
                             core.compile_model(model, r.device, Span<const ConfigEntry>(r.config, r.config_count), &reference,
                                                Span<const InputShape>(shapes, count)) == Status::Ok &&
                             reference.create_request(&rr) == Status::Ok && set_inputs(rr, reference, o, reference_inputs, &model, true) == 0;
        }
        BenchResult fused, plain;
        const size_t steps = o.perf_counts ? request.profiling_info().size : 0;
        double* node_us = steps ? static_cast<double*>(TESSEL_MALLOC(sizeof(double) * steps)) : nullptr;
        if ((steps && !node_us) || bench_requests(request, with_reference ? &rr : nullptr, o.bench, &fused, &plain, node_us, steps)) {
            TESSEL_FREE(node_us);
            std::fprintf(stderr, "tessel: inference failed\n");
            return 2;
        }
        if (o.perf_counts) print_perf_counts(request, compiled, node_us, steps);
        TESSEL_FREE(node_us);
        // The CPU's kernels target: the last ISA setting given, else the best the CPU has.
        StringView isa(isa_name(default_isa()));
        for (uint32_t k = 0; k < o.config_count; ++k)
            if (o.config[k].key == StringView("CPU:ISA") || o.config[k].key == StringView("ISA")) isa = o.config[k].value;
        std::printf("latency_ms median=%.4f min=%.4f p90=%.4f isa=%.*s\n", fused.median, fused.minimum, fused.p90,
                    (int)isa.size, isa.data);
        if (with_reference)
            std::printf("reference_ms median=%.4f min=%.4f p90=%.4f speedup=%.2fx\n", plain.median, plain.minimum, plain.p90,
                        plain.median / fused.median);
    }
    return result;
}

int command_compile(int argc, char** argv) {
    ModelOptions o;
    int code = parse_model_options(argc, argv, &o, true);
    if (code) return code;
    if (!o.output_file) { std::fprintf(stderr, "tessel: compile needs -o FILE\n"); return 2; }
    Core core;
    Model model;
    CompiledModel compiled;
    bool from_blob = false;
    code = load_and_compile(&core, o, &model, &compiled, &from_blob);
    if (code) return code;
    std::FILE* file = std::fopen(o.output_file, "wb");
    if (!file) { std::fprintf(stderr, "tessel: cannot write '%s'\n", o.output_file); return 2; }
    Status s = compiled.export_model(write_file, file);
    if (std::fclose(file) != 0 || s != Status::Ok) {
        std::fprintf(stderr, "tessel: cannot write '%s'%s%s\n", o.output_file, s != Status::Ok ? ": " : "", s != Status::Ok ? compiled.last_error() : "");
        return 2;
    }
    compiled.write_summary(write_stdout, nullptr);
    if (compiled.has_free_dims())
        std::printf("free input dims kept: the blob plans each input shape at its first run (--shape fixes them)\n");
    return 0;
}

int command_info(int argc, char** argv) {
    ModelOptions o;
    int code = parse_model_options(argc, argv, &o, false);
    if (code) return code;
    Model model;
    Status s = model.read_onnx_file(o.path);
    if (s != Status::Ok) { std::fprintf(stderr, "tessel: %s: %s\n", o.path, model.last_error()); return 2; }
    const Graph& g = model.graph;
    std::printf("opset %u, %u nodes\n", model.opset, g.node_count());
    for (uint32_t i = 0; i < model.input_count(); ++i) {
        char d[256];
        describe_symbolic(g.node(model.input(i).node).outputs[0], &model, i, d, sizeof d);
        std::printf("input %u '%.*s' %s\n", i, (int)model.input(i).name.size, model.input(i).name.data, d);
    }
    for (uint32_t i = 0; i < model.output_count(); ++i)
        std::printf("output %u '%.*s'\n", i, (int)model.output(i).name.size, model.output(i).name.data);
    // op counts, in order of first appearance
    const char* ops[256];
    uint32_t counts[256], kinds = 0;
    for (NodeId v = 0; v < g.node_count(); ++v) {
        const char* op = g.node(v).op.data;
        uint32_t k = 0;
        while (k < kinds && std::strcmp(ops[k], op)) ++k;
        if (k == kinds && kinds < 256) { ops[kinds] = op; counts[kinds++] = 0; }
        if (k < kinds) ++counts[k];
    }
    for (uint32_t k = 0; k < kinds; ++k) std::printf("op %s %u\n", ops[k], counts[k]);
    Core core;
    uint16_t* devices = static_cast<uint16_t*>(TESSEL_MALLOC(sizeof(uint16_t) * (g.node_count() + 1)));
    if (!devices) return 2;
    s = core.query_model(model, o.device, devices);
    if (s != Status::Ok) { TESSEL_FREE(devices); std::fprintf(stderr, "tessel: %s\n", core.last_error()); return 2; }
    const char* list = std::strncmp(o.device, "HETERO:", 7) ? o.device : o.device + 7;
    for (NodeId v = 0; v < g.node_count(); ++v) {
        const Node& n = g.node(v);
        if (n.op == StringView("Parameter") || n.op == StringView("Result") || n.op == StringView("Absent")) continue;
        char name[64] = "folded";
        if (devices[v] != tessel::kNoDevice) {   // the index in the device list
            const char* p = list;
            for (uint32_t k = 0; k < devices[v] && p; ++k) { p = std::strchr(p, ','); if (p) ++p; }
            size_t len = p ? std::strcspn(p, ",") : 0;
            std::snprintf(name, sizeof name, "%.*s", (int)len, p ? p : "");
        }
        std::printf("node '%.*s' %.*s -> %s\n", (int)n.name.size, n.name.data, (int)n.op.size, n.op.data, name);
    }
    TESSEL_FREE(devices);
    return 0;
}

int command_devices() {
    Core core;
    for (uint32_t i = 0; i < core.device_count(); ++i) {
        Device* d = core.device_at(i);
        std::printf("%.*s\n", (int)d->name().size, d->name().data);
        const char* metrics[] = {"FULL_DEVICE_NAME", "AVAILABLE", "AVAILABLE_DEVICES", "OPTIMIZATION_CAPABILITIES", "SUPPORTED_CONFIG_KEYS",
                                 "OPENCL_VERSION", "DRIVER_VERSION", "COMPUTE_UNITS", "GLOBAL_MEMORY", "HOST_UNIFIED_MEMORY"};
        StringView listed;   // device-specific metrics only where the device lists them
        std::string supported = d->get_metric("SUPPORTED_METRICS", &listed) == Status::Ok ? std::string(listed.data, listed.size) : "";
        for (const char* m : metrics) {
            StringView v;
            if ((" " + supported + " ").find(std::string(" ") + m + " ") == std::string::npos) continue;
            if (d->get_metric(m, &v) == Status::Ok) std::printf("  %s: %.*s\n", m, (int)v.size, v.data);
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) return usage();
    if (!std::strcmp(argv[1], "partition")) return command_partition(argc - 2, argv + 2);
    if (!std::strcmp(argv[1], "demo")) return command_demo();
    if (!std::strcmp(argv[1], "run")) return command_run(argc - 2, argv + 2);
    if (!std::strcmp(argv[1], "compile")) return command_compile(argc - 2, argv + 2);
    if (!std::strcmp(argv[1], "info")) return command_info(argc - 2, argv + 2);
    if (!std::strcmp(argv[1], "devices")) return command_devices();
    if (!std::strcmp(argv[1], "version")) {
        std::printf("tessel %d.%d.%d\n", TESSEL_VERSION_MAJOR, TESSEL_VERSION_MINOR, TESSEL_VERSION_PATCH);
        return 0;
    }
    std::fprintf(stderr, "tessel: unknown command '%s'\n", argv[1]);
    return usage();
}
