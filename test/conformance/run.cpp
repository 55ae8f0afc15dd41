// The ONNX backend conformance run: every test of libonnx-testdata (data/node,
// data/pytorch-operator, data/pytorch-converted, data/simple) whose ops are all in the
// runtime's op list is attempted on CPU and compared with its expected outputs; a second pass
// runs the same tests on HETERO:TEMPLATE,CPU with TEMPLATE supporting a seeded half of the
// ops. A failure of an attempted test fails the run. Skips name their reason.
//   build/conformance [DATA_DIR] [--table FILE.md] [--verbose] [--only SUBSTRING]
// --table writes the results as the Markdown document docs/conformance.md is (per suite and
// per op, with the skip reasons); it holds no dates or timings, so it diffs cleanly.
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
    std::string suite, name, dir;           // name: "suite/test"
    std::vector<std::string> ops;            // of the model, in file order (empty if unreadable)
    std::vector<std::string> missing_ops;    // those outside the runtime's op list
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

// The message without the names of nodes and graph inputs ("Add 'Add_0': ...", "graph input
// 'x' ...", "node 'Loop_8' ..."), which differ from model to model.
std::string drop_names(std::string message) {
    size_t space = message.find(" '");
    if (space != std::string::npos && message.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") == space) {
        size_t end = message.find("': ", space + 2);
        if (end != std::string::npos) message.erase(space, end + 1 - space);
    }
    for (const char* prefix : {"graph input '", "node '"}) {
        size_t at = message.find(prefix);
        if (at == std::string::npos) continue;
        size_t name = at + std::strlen(prefix) - 1, end = message.find("' ", name + 1);
        if (end != std::string::npos) message.erase(name, end + 2 - name);
    }
    return message;
}

// A skip's reason without what varies from test to test (names, the ops of the op list check
// aside), so that tests skipped for one reason count together.
std::string group_skip_reason(const std::string& raw) {
    const std::string reason = drop_names(raw);
    if (reason.rfind("op ", 0) == 0) return "op outside the list: " + reason.substr(3, reason.find(" is outside") - 3);
    if (reason.find("imports no opset") != std::string::npos) return "no default-domain opset (training-domain models)";
    if (reason.find("aligned") != std::string::npos || reason.find("broadcast along") != std::string::npos)
        return "legacy (opset < 7) broadcast along an axis";
    if (reason.find("opset") != std::string::npos) return "opset outside 1..17";
    if (reason.find("data type") != std::string::npos || reason.find("element type") != std::string::npos ||
        reason.find(" is u8") != std::string::npos || reason.find(" is i8") != std::string::npos ||
        reason.find(" are u8") != std::string::npos || reason.find(" are i8") != std::string::npos ||
        reason.find(" are f16") != std::string::npos || reason.find(" is f16") != std::string::npos ||
        reason.find("(float32 expected)") != std::string::npos)
        return "element type outside the list (" + reason + ")";
    return reason;
}

enum class Outcome { Passed, Failed, Skipped };

struct TestResult {
    Outcome outcome = Outcome::Passed;
    std::string detail;   // the failure, or the skip's grouped reason
};

struct Count {
    int tests = 0, attempted = 0, passed = 0, skipped = 0;
    void add(const TestResult& r) {
        ++tests;
        if (r.outcome == Outcome::Skipped) ++skipped;
        else ++attempted;
        if (r.outcome == Outcome::Passed) ++passed;
    }
};

// One pass over every test on one device; results[i] belongs to tests[i].
struct DevicePass {
    const char* device;
    std::vector<TestResult> results;
};

// Markdown table cells: a '|' in a reason would end the cell.
std::string cell(const std::string& text) {
    std::string out;
    for (char c : text) {
        if (c == '|') out += "\\|";
        else if (c == '\n') out += ' ';
        else out += c;
    }
    return out;
}

// The document of docs/conformance.md: how it was made, then per suite and per op. `command`
// is how to make it again.
bool write_document(const char* path, const std::string& command, const std::string& template_ops,
                    const std::vector<TestCase>& tests, const std::vector<DevicePass>& passes) {
    std::FILE* f = std::fopen(path, "w");
    if (!f) return false;
    std::fprintf(f, "# ONNX conformance\n\n");
    std::fprintf(f, "The ONNX backend tests of libonnx-testdata run on Tessel. This file is written by the\n"
                    "conformance runner (test/conformance/run.cpp); do not edit it by hand. It is made with\n\n"
                    "```sh\n%s\n```\n\n", command.c_str());
    std::fprintf(f, "The tests are those of data/node, data/pytorch-operator, data/pytorch-converted and data/simple.\n"
                    "Each test whose ops are all in the runtime's op list is compiled for the device, run on every\n"
                    "data set of the test and compared with the expected outputs: `|got - want| <= 1e-5 + 1e-3 * |want|`\n"
                    "for floats (NaN matches NaN), exact for integers and booleans. The other tests are skipped with\n"
                    "their reason, as are tests the reader or the compiler refuses as Unsupported; a failed test fails\n"
                    "the run. The second pass runs the same tests on `HETERO:TEMPLATE,CPU`, with\n"
                    "`TEMPLATE:SUPPORTED_OPS` set to a seeded half of the runtime's ops:\n\n`%s`\n\n",
                 template_ops.c_str());

    std::fprintf(f, "## Suites\n\n| device | suite | tests | attempted | passed | failed | skipped |\n"
                    "|---|---|---:|---:|---:|---:|---:|\n");
    for (const DevicePass& pass : passes) {
        std::map<std::string, Count> by_suite;
        std::vector<std::string> order;
        Count all;
        for (size_t i = 0; i < tests.size(); ++i) {
            if (!by_suite.count(tests[i].suite)) order.push_back(tests[i].suite);
            by_suite[tests[i].suite].add(pass.results[i]);
            all.add(pass.results[i]);
        }
        auto row = [&](const std::string& suite, const Count& c) {
            std::fprintf(f, "| %s | %s | %d | %d | %d | %d | %d |\n", pass.device, suite.c_str(), c.tests, c.attempted, c.passed,
                         c.attempted - c.passed, c.skipped);
        };
        for (const std::string& suite : order) row(suite, by_suite[suite]);
        row("**all**", all);
    }

    bool any_failure = false;
    for (const DevicePass& pass : passes)
        for (size_t i = 0; i < tests.size(); ++i) {
            const TestResult& r = pass.results[i];
            if (r.outcome != Outcome::Failed) continue;
            if (!any_failure) std::fprintf(f, "\n## Failures\n\n");
            any_failure = true;
            std::fprintf(f, "- %s, %s: %s\n", pass.device, tests[i].name.c_str(), r.detail.c_str());
        }

    std::map<std::string, int> reasons;
    for (const TestResult& r : passes[0].results)
        if (r.outcome == Outcome::Skipped) ++reasons[r.detail];
    std::fprintf(f, "\n## Skip reasons (%s)\n\n| reason | tests |\n|---|---:|\n", passes[0].device);
    for (const auto& r : reasons) std::fprintf(f, "| %s | %d |\n", cell(r.first).c_str(), r.second);

    // Per op: every test whose model has the op counts for it.
    struct OpRow {
        Count first, second;
        std::map<std::string, int> skip_reasons;   // of the first pass
    };
    std::map<std::string, OpRow> ops;
    for (size_t i = 0; i < tests.size(); ++i)
        for (const std::string& op : tests[i].ops) {
            OpRow& row = ops[op];
            row.first.add(passes[0].results[i]);
            row.second.add(passes[1].results[i]);
            const TestResult& r = passes[0].results[i];
            if (r.outcome != Outcome::Skipped) continue;
            const std::vector<std::string>& missing = tests[i].missing_ops;
            if (missing.empty()) ++row.skip_reasons[r.detail];
            else if (std::find(missing.begin(), missing.end(), op) != missing.end()) ++row.skip_reasons["not in the op list"];
            else ++row.skip_reasons["another op of the test is outside the list"];
        }
    std::fprintf(f, "\n## Ops\n\nEach op found in the tests' models: how many tests have it, passed / attempted on each\n"
                    "device, and the skipped tests (%s) by reason. \"not in the op list\": the op itself is outside\n"
                    "the runtime's list; \"another op of the test is outside the list\": the op is in it, the test\n"
                    "has one that is not.\n\n"
                    "| op | tests | %s | %s | skipped | skip reasons |\n|---|---:|---:|---:|---:|---|\n",
                 passes[0].device, passes[0].device, passes[1].device);
    for (const auto& entry : ops) {
        const OpRow& row = entry.second;
        std::string why;
        for (const auto& r : row.skip_reasons) why += (why.empty() ? "" : "; ") + r.first + " (" + std::to_string(r.second) + ")";
        std::fprintf(f, "| %s | %d | %d / %d | %d / %d | %d | %s |\n", entry.first.c_str(), row.first.tests, row.first.passed,
                     row.first.attempted, row.second.passed, row.second.attempted, row.first.skipped, cell(why).c_str());
    }
    return std::fclose(f) == 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string default_data = "/usr/share/libonnx-testdata/data";
    std::string data = default_data;
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
    std::set<std::string> all_ops;
    for (const OpKernel& k : builtin_op_kernels()) all_ops.insert(k.op);
    const char* suites[] = {"node", "pytorch-operator", "pytorch-converted", "simple"};
    std::vector<TestCase> tests;
    for (const char* suite : suites) {
        for (const std::string& name : list_dir(data + "/" + suite)) {
            std::string dir = data + "/" + suite + "/" + name;
            if (!exists(dir + "/model.onnx")) continue;
            if (only && (std::string(suite) + "/" + name).find(only) == std::string::npos) continue;
            TestCase t{suite, std::string(suite) + "/" + name, dir, {}, {}};
            Model model;
            if (model.read_onnx_file((dir + "/model.onnx").c_str()) == Status::Ok)
                for (NodeId v = 0; v < model.graph.node_count(); ++v) {
                    std::string op(model.graph.node(v).op.data, model.graph.node(v).op.size);
                    if (op == "Parameter" || op == "Result" || op == "Absent") continue;
                    if (std::find(t.ops.begin(), t.ops.end(), op) == t.ops.end()) t.ops.push_back(op);
                }
            for (const std::string& op : t.ops)
                if (!all_ops.count(op) && op != "Constant") t.missing_ops.push_back(op);
            tests.push_back(t);
        }
    }
    if (tests.empty()) { std::fprintf(stderr, "conformance: no tests under %s\n", data.c_str()); return 2; }
    // TEMPLATE's half of the ops for the HETERO pass (seeded).
    std::vector<std::string> ops(all_ops.begin(), all_ops.end());
    std::mt19937 rng(2026);
    std::shuffle(ops.begin(), ops.end(), rng);
    std::string half;
    for (size_t i = 0; i < ops.size() / 2; ++i) half += (i ? "," : "") + ops[i];

    int exit_code = 0;
    std::vector<DevicePass> passes = {{"CPU", {}}, {"HETERO:TEMPLATE,CPU", {}}};
    for (size_t pass = 0; pass < passes.size(); ++pass) {
        DevicePass& device_pass = passes[pass];
        std::vector<ConfigEntry> config;
        if (pass == 1) config.push_back(ConfigEntry{"TEMPLATE:SUPPORTED_OPS", StringView(half.c_str())});
        int attempted = 0, passed = 0, skipped = 0;
        std::map<std::string, int> skip_reasons;
        std::vector<std::string> failures;
        for (const TestCase& test : tests) {
            std::string missing;
            for (const std::string& op : test.missing_ops) missing += (missing.empty() ? "" : ",") + op;
            // An unreadable model has no ops: run_test says why it is refused.
            std::string result = missing.empty() ? run_test(test, device_pass.device, config)
                                                  : "skip: op " + missing + " is outside the list";
            TestResult r;
            if (result.rfind("skip: ", 0) == 0) {
                r.outcome = Outcome::Skipped;
                r.detail = group_skip_reason(result.substr(6));
                ++skipped;
                ++skip_reasons[r.detail];
                if (verbose) std::printf("SKIP %s: %s\n", test.name.c_str(), result.c_str() + 6);
            } else {
                ++attempted;
                r.outcome = result.empty() ? Outcome::Passed : Outcome::Failed;
                r.detail = result;
                if (result.empty()) ++passed;
                else failures.push_back(test.name + ": " + result);
                if (verbose) std::printf("%s %s%s%s\n", result.empty() ? "PASS" : "FAIL", test.name.c_str(), result.empty() ? "" : ": ",
                                         result.c_str());
            }
            device_pass.results.push_back(r);
        }
        std::printf("[conformance %s] test cases: %d | %d passed | %d failed | (%d skipped of %zu)\n", device_pass.device,
                    attempted, passed, attempted - passed, skipped, tests.size());
        for (const std::string& f : failures) std::printf("  FAILED %s\n", f.c_str());
        if (pass == 0)
            for (const auto& r : skip_reasons) std::printf("  skipped %4d: %s\n", r.second, r.first.c_str());
        if (attempted != passed) exit_code = 1;
    }
    if (table) {
        // How docs/conformance.md is made: the options that change what it holds, not the file name.
        std::string command = "make build/conformance && build/conformance";
        if (data != default_data) command += " " + data;
        if (only) command += std::string(" --only ") + only;
        command += " --table docs/conformance.md";
        if (!write_document(table, command, half, tests, passes)) {
            std::fprintf(stderr, "conformance: cannot write %s\n", table);
            return 2;
        }
    }
    return exit_code;
}
