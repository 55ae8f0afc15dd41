// The ONNX backend conformance run: every test of libonnx-testdata (data/node,
// data/pytorch-operator, data/pytorch-converted, data/simple) whose ops are all in the
// runtime's op list is attempted on CPU and compared with its expected outputs; a second pass
// runs the same tests on HETERO:TEMPLATE,CPU with TEMPLATE supporting a seeded half of the
// ops. A failure of an attempted test fails the run. Skips name their reason.
//   build/conformance [DATA_DIR] [--table FILE.md] [--verbose] [--only SUBSTRING]
// Exit 0 when every attempted test passes, 1 otherwise, 2 on usage errors.
#define TESSEL_IMPLEMENTATION
#include "runtime.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace tessel;

namespace {

struct OpCoverage {
    int attempted = 0, passed = 0;
};

struct Totals {
    int attempted = 0, passed = 0, skipped = 0;
    std::map<std::string, int> skip_reasons;
    std::vector<std::string> failures;
};

std::vector<std::string> list_dir(const std::string& path) {
    std::vector<std::string> names;
    DIR* dir = opendir(path.c_str());
    if (!dir) return names;
    while (dirent* e = readdir(dir)) {
        if (e->d_name[0] != '.') names.push_back(e->d_name);
    }
    closedir(dir);
    std::sort(names.begin(), names.end());
    return names;
}

bool exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

// The ONNX backend's check: |got - want| <= atol + rtol * |want|, NaN matching NaN; exact
// for integers and booleans. Empty string when they match.
std::string compare(const Tensor& got, const Tensor& want) {
    char message[256];
    if (got.type() != want.type()) {
        std::snprintf(message, sizeof message, "type %s, expected %s", element_type_name(got.type()), element_type_name(want.type()));
        return message;
    }
    bool same = got.rank() == want.rank();
    for (uint32_t i = 0; same && i < got.rank(); ++i) same = got.dim(i) == want.dim(i);
    if (!same) {
        std::string a, b;
        for (uint32_t i = 0; i < got.rank(); ++i) a += std::to_string(got.dim(i)) + ",";
        for (uint32_t i = 0; i < want.rank(); ++i) b += std::to_string(want.dim(i)) + ",";
        return "shape [" + a + "], expected [" + b + "]";
    }
    bool exact = got.type() != ElementType::Float32 && got.type() != ElementType::Float16;
    const double rtol = 1e-3, atol = 1e-5;
    for (uint64_t i = 0; i < got.elements(); ++i) {
        double x = element_value(got, i), y = element_value(want, i);
        if (std::isnan(x) && std::isnan(y)) continue;
        bool ok = exact ? x == y : (x == y || std::fabs(x - y) <= atol + rtol * std::fabs(y));
        if (!ok) {
            std::snprintf(message, sizeof message, "element %llu is %.9g, expected %.9g", (unsigned long long)i, x, y);
            return message;
        }
    }
    return "";
}

struct TestCase {
    std::string name, dir;
    std::vector<std::string> ops;
};

// Runs one test on `device`. Returns "" on pass, "skip: reason" on skip, else the failure.
std::string run_test(const TestCase& test, const char* device, const std::vector<ConfigEntry>& config) {
    Model model;
    Status s = model.read_onnx_file((test.dir + "/model.onnx").c_str());
    if (s == Status::Unsupported) return std::string("skip: ") + model.last_error();
    if (s != Status::Ok) return std::string("read: ") + status_name(s) + ": " + model.last_error();
    std::vector<std::string> sets;
    for (const std::string& name : list_dir(test.dir))
        if (name.rfind("test_data_set_", 0) == 0) sets.push_back(test.dir + "/" + name);
    if (sets.empty()) return "skip: no test data";
    for (const std::string& set : sets) {
        std::vector<Tensor> inputs(model.input_count());
        std::vector<InputShape> shapes;
        std::vector<char> names_storage;
        for (uint32_t i = 0; i < model.input_count(); ++i) {
            std::string path = set + "/input_" + std::to_string(i) + ".pb";
            s = read_tensor_file(path.c_str(), &inputs[i]);
            if (s == Status::Unsupported) return "skip: input element type";
            if (s != Status::Ok) return "cannot read " + path;
            shapes.push_back(InputShape{model.input(i).name, inputs[i].shape()});
        }
        Core core;
        CompiledModel compiled;
        s = core.compile_model(model, device, Span<const ConfigEntry>(config.data(), config.size()), &compiled,
                               Span<const InputShape>(shapes.data(), shapes.size()));
        std::string frozen_note;
        if (s == Status::Unsupported && std::strstr(core.last_error(), "data-dependent shape")) {
            // A shape given as an input (Reshape's shape, Resize's sizes, Range's limits): freeze
            // the inputs to this data set's values (they become constants, and the same kernels
            // run once at compile time) and compile again.
            std::vector<InputValue> values;
            for (uint32_t i = 0; i < model.input_count(); ++i) values.push_back(InputValue{model.input(i).name, &inputs[i]});
            s = core.compile_model(model, device, Span<const ConfigEntry>(config.data(), config.size()), &compiled,
                                   Span<const InputShape>(), Span<const InputValue>(values.data(), values.size()));
        }
        if (s == Status::Unsupported) return std::string("skip: ") + core.last_error();
        if (s != Status::Ok) return std::string("compile: ") + status_name(s) + ": " + core.last_error();
        InferRequest request;
        if (compiled.create_request(&request) != Status::Ok) return "cannot create a request";
        for (uint32_t i = 0; i < compiled.input_count(); ++i) {
            uint32_t k = model.find_input(compiled.input(i).name);
            if (request.set_input(i, inputs[k]) != Status::Ok) return std::string("set_input: ") + request.last_error();
        }
        s = request.infer();
        if (s != Status::Ok) return std::string("infer: ") + status_name(s) + ": " + request.last_error();
        for (uint32_t o = 0; o < compiled.output_count(); ++o) {
            std::string path = set + "/output_" + std::to_string(o) + ".pb";
            Tensor want;
            s = read_tensor_file(path.c_str(), &want);
            if (s == Status::Unsupported) return "skip: output element type";
            if (s != Status::Ok) return "cannot read " + path;
            std::string diff = compare(request.output(o), want);
            if (!diff.empty()) return "output " + std::to_string(o) + ": " + diff;
        }
    }
    return "";
}

}  // namespace

int main(int argc, char** argv) {
    std::string data = "/usr/share/libonnx-testdata/data";
    const char* table = nullptr;
    const char* only = nullptr;
    bool verbose = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--table") && i + 1 < argc) table = argv[++i];
        else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!std::strcmp(argv[i], "--verbose")) verbose = true;
        else if (argv[i][0] != '-') data = argv[i];
        else { std::fprintf(stderr, "usage: conformance [DATA_DIR] [--table FILE.md] [--verbose] [--only SUBSTRING]\n"); return 2; }
    }
    const char* suites[] = {"node", "pytorch-operator", "pytorch-converted", "simple"};
    std::vector<TestCase> tests;
    std::set<std::string> all_ops;
    for (const char* suite : suites) {
        for (const std::string& name : list_dir(data + "/" + suite)) {
            std::string dir = data + "/" + suite + "/" + name;
            if (!exists(dir + "/model.onnx")) continue;
            if (only && (std::string(suite) + "/" + name).find(only) == std::string::npos) continue;
            TestCase t{std::string(suite) + "/" + name, dir, {}};
            Model model;
            if (model.read_onnx_file((dir + "/model.onnx").c_str()) == Status::Ok)
                for (NodeId v = 0; v < model.graph.node_count(); ++v) {
                    std::string op(model.graph.node(v).op.data, model.graph.node(v).op.size);
                    if (op == "Parameter" || op == "Result" || op == "Absent") continue;
                    if (std::find(t.ops.begin(), t.ops.end(), op) == t.ops.end()) t.ops.push_back(op);
                }
            tests.push_back(t);
        }
    }
    if (tests.empty()) { std::fprintf(stderr, "conformance: no tests under %s\n", data.c_str()); return 2; }
    for (const OpKernel& k : builtin_op_kernels()) all_ops.insert(k.op);
    // TEMPLATE's half of the ops for the HETERO pass (seeded).
    std::vector<std::string> ops(all_ops.begin(), all_ops.end());
    std::mt19937 rng(2026);
    std::shuffle(ops.begin(), ops.end(), rng);
    std::string half;
    for (size_t i = 0; i < ops.size() / 2; ++i) half += (i ? "," : "") + ops[i];

    std::map<std::string, OpCoverage> coverage;
    int exit_code = 0;
    const char* passes[] = {"CPU", "HETERO:TEMPLATE,CPU"};
    for (int pass = 0; pass < 2; ++pass) {
        Totals totals;
        std::vector<ConfigEntry> config;
        if (pass == 1) config.push_back(ConfigEntry{"TEMPLATE:SUPPORTED_OPS", StringView(half.c_str())});
        for (const TestCase& test : tests) {
            std::string missing;
            for (const std::string& op : test.ops)
                if (!all_ops.count(op) && op != "Constant") missing += (missing.empty() ? "" : ",") + op;
            std::string result;
            if (!missing.empty()) result = "skip: op " + missing + " is outside the list";
            else if (test.ops.empty()) result = run_test(test, passes[pass], config);   // unreadable: let run_test say why
            else result = run_test(test, passes[pass], config);
            if (result.rfind("skip: ", 0) == 0) {
                ++totals.skipped;
                std::string reason = result.substr(6);
                // group reasons: drop node names
                if (reason.rfind("op ", 0) == 0) reason = "op outside the list: " + reason.substr(3, reason.find(" is outside") - 3);
                else if (reason.find("imports no opset") != std::string::npos) reason = "no default-domain opset (training-domain models)";
                else if (reason.find("aligned") != std::string::npos || reason.find("broadcast along") != std::string::npos)
                    reason = "legacy (opset < 7) broadcast along an axis";
                else if (reason.find("opset") != std::string::npos) reason = "opset outside 1..17";
                else if (reason.find("data type") != std::string::npos || reason.find("element type") != std::string::npos ||
                         reason.find(" is u8") != std::string::npos || reason.find(" is i8") != std::string::npos ||
                         reason.find(" are u8") != std::string::npos || reason.find(" are i8") != std::string::npos ||
                         reason.find(" are f16") != std::string::npos || reason.find(" is f16") != std::string::npos ||
                         reason.find("(float32 expected)") != std::string::npos)
                    reason = "element type outside the list (" + reason + ")";
                ++totals.skip_reasons[reason];
                if (verbose) std::printf("SKIP %s: %s\n", test.name.c_str(), result.c_str() + 6);
                continue;
            }
            ++totals.attempted;
            bool ok = result.empty();
            if (ok) ++totals.passed;
            else totals.failures.push_back(test.name + ": " + result);
            if (pass == 0)
                for (const std::string& op : test.ops) { ++coverage[op].attempted; if (ok) ++coverage[op].passed; }
            if (verbose) std::printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", test.name.c_str(), ok ? "" : ": ", result.c_str());
        }
        std::printf("[conformance %s] test cases: %d | %d passed | %d failed | (%d skipped of %zu)\n", passes[pass],
                    totals.attempted, totals.passed, totals.attempted - totals.passed, totals.skipped, tests.size());
        for (const std::string& f : totals.failures) std::printf("  FAILED %s\n", f.c_str());
        if (pass == 0)
            for (const auto& r : totals.skip_reasons) std::printf("  skipped %4d: %s\n", r.second, r.first.c_str());
        if (totals.attempted != totals.passed) exit_code = 1;
    }
    if (table) {
        std::FILE* f = std::fopen(table, "w");
        if (!f) { std::fprintf(stderr, "conformance: cannot write %s\n", table); return 2; }
        std::fprintf(f, "| op | tests attempted | passed |\n|---|---:|---:|\n");
        for (const auto& c : coverage) std::fprintf(f, "| %s | %d | %d |\n", c.first.c_str(), c.second.attempted, c.second.passed);
        std::fclose(f);
    }
    return exit_code;
}
