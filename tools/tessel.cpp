// The `tessel` command line.
//   tessel partition GRAPH.txt [--devices A,B,...] [--algo rollback|levels|waves] [--trace]
//                    [--dot FILE] [--min-size N] [--reasons]
//   tessel demo        partitions the hetero seed's example graph with every algorithm
//   tessel version
// Exit status: 0 on success, 2 with a one-line message on bad input or usage.
#define TESSEL_IMPLEMENTATION
#include "runtime.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using namespace tessel;

void write_stdout(void*, const char* data, size_t size) { std::fwrite(data, 1, size, stdout); }
void write_file(void* user, const char* data, size_t size) { std::fwrite(data, 1, size, static_cast<std::FILE*>(user)); }

int usage() {
    std::fprintf(stderr,
                 "usage: tessel partition GRAPH.txt [--devices A,B,...] [--algo rollback|levels|waves]\n"
                 "                        [--trace] [--dot FILE] [--min-size N] [--reasons]\n"
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
                   const char* dot_path, uint32_t min_size, bool reasons) {
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
    uint32_t min_size = 0;
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
        } else if (!std::strcmp(arg, "--trace")) trace = true;
        else if (!std::strcmp(arg, "--reasons")) reasons = true;
        else if (arg[0] == '-' || path) { std::fprintf(stderr, "tessel: unexpected argument '%s'\n", arg); return usage(); }
        else path = arg;
    }
    if (!path) return usage();
    size_t size = 0;
    char* text = read_file(path, &size);
    if (!text) return 2;
    int code = partition_text(text, size, devices, algorithm, trace, dot, min_size, reasons);
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

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) return usage();
    if (!std::strcmp(argv[1], "partition")) return command_partition(argc - 2, argv + 2);
    if (!std::strcmp(argv[1], "demo")) return command_demo();
    if (!std::strcmp(argv[1], "version")) {
        std::printf("tessel %d.%d.%d\n", TESSEL_VERSION_MAJOR, TESSEL_VERSION_MINOR, TESSEL_VERSION_PATCH);
        return 0;
    }
    std::fprintf(stderr, "tessel: unknown command '%s'\n", argv[1]);
    return usage();
}
