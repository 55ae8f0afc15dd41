// The ONNX backend conformance run over one or more test sources: libonnx-testdata (always;
// its data/node, data/pytorch-operator, data/pytorch-converted, data/simple) and any --data
// folder, either one with those suite folders or one of test folders itself (such as ONNX's
// onnx/backend/test/data/node). Every test whose ops are all in the runtime's op list is
// attempted on CPU and compared with its expected outputs; a second pass runs the same tests
// on HETERO:TEMPLATE,CPU with TEMPLATE supporting a seeded half of the ops. A failure of an
// attempted test fails the run. Skips name their reason; those outside Tessel's scope
// (training and ai.onnx.ml ops, strings, image decoding, sequences and optionals,
// float8/float4/int4/int2/complex types) are counted apart from the in-scope ones.
//   build/conformance [--data [LABEL=]DIR]... [--table FILE.md] [--verbose] [--only SUBSTRING] [--device D]
//   (--device D: one pass on D, e.g. GPU or HETERO:GPU,CPU, instead of the CPU and HETERO:TEMPLATE,CPU passes)
// LABEL names the source in the results (default: the folder's name). --table writes the
// results as the Markdown document docs/conformance.md is (per source, suite and op, with the
// skip reasons); it holds no dates, timings or machine paths besides the ones given, so it
// diffs cleanly. Exit 0 when every attempted test passes, 1 otherwise, 2 on usage errors.
// The library's implementation is tools/impl.cpp, linked with this file.
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
    bool exact = got.type() != ElementType::Float32 && got.type() != ElementType::Float16 &&
                 got.type() != ElementType::BFloat16 && got.type() != ElementType::Float64;
    // bfloat16 is spaced 2^-7 apart relatively: a rounding difference (libonnx-testdata's Cast
    // expects truncation, as older ONNX versions did) must not fail it
    const double rtol = got.type() == ElementType::BFloat16 ? 1.0 / 128 : 1e-3, atol = 1e-5;
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

// ONNX before 1.8 wrote bfloat16 test data as UINT16 (libonnx-testdata has such files): where
// the model declares bfloat16, the bits are bfloat16.
void uint16_as_bfloat16(Tensor* t, ElementType declared) {
    if (t->type() != ElementType::UInt16 || declared != ElementType::BFloat16) return;
    Tensor copy;
    if (copy.allocate(ElementType::BFloat16, t->shape()) != Status::Ok) return;
    std::memcpy(copy.data(), t->data(), t->bytes());
    *t = static_cast<Tensor&&>(copy);
}

struct TestCase {
    std::string source;                      // the --data label
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
            const TensorDesc& declared = model.graph.node(model.input(i).node).outputs[0];
            uint32_t rank = inputs[i].rank();
            bool static_shape = true;
            for (uint32_t k = 0; k < declared.rank; ++k) static_shape = static_shape && declared.dims[k] >= 0;
            if (static_shape && declared.rank != rank)   // libonnx-testdata's CastLike 'like' inputs
                return "skip: test data: input '" + std::string(model.input(i).name.data, model.input(i).name.size) +
                       "' has " + std::to_string(rank) + " dims, the model declares " + std::to_string(declared.rank);
            uint16_as_bfloat16(&inputs[i], declared.type);
            shapes.push_back(InputShape{model.input(i).name, inputs[i].shape()});
        }
        Core core;
        CompiledModel compiled;
        s = core.compile_model(model, device, Span<const ConfigEntry>(config.data(), config.size()), &compiled,
                               Span<const InputShape>(shapes.data(), shapes.size()));
        if (s == Status::Unsupported) return std::string("skip: ") + core.last_error();
        if (s != Status::Ok) return std::string("compile: ") + status_name(s) + ": " + core.last_error();
        InferRequest request;
        if (compiled.create_request(&request) != Status::Ok) return "cannot create a request";
        for (uint32_t i = 0; i < compiled.input_count(); ++i) {
            uint32_t k = model.find_input(compiled.input(i).name);
            if (request.set_input(i, inputs[k]) != Status::Ok) return std::string("set_input: ") + request.last_error();
        }
        s = request.infer();
        // A stage planned at run time (after a data-dependent shape) may find an op it cannot run.
        if (s == Status::Unsupported) return std::string("skip: ") + request.last_error();
        if (s != Status::Ok) return std::string("infer: ") + status_name(s) + ": " + request.last_error();
        for (uint32_t o = 0; o < compiled.output_count(); ++o) {
            std::string path = set + "/output_" + std::to_string(o) + ".pb";
            Tensor want;
            s = read_tensor_file(path.c_str(), &want);
            if (s == Status::Unsupported) return "skip: output element type";
            if (s != Status::Ok) return "cannot read " + path;
            uint16_as_bfloat16(&want, request.output(o).type());
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
    if (reason.find("of the default domain is not supported") != std::string::npos) return "default-domain opset outside the supported range";
    if (reason.find("data type") != std::string::npos || reason.find("element type") != std::string::npos ||
        reason.find(" is u8") != std::string::npos || reason.find(" is i8") != std::string::npos ||
        reason.find(" are u8") != std::string::npos || reason.find(" are i8") != std::string::npos ||
        reason.find(" are f16") != std::string::npos || reason.find(" is f16") != std::string::npos ||
        reason.find("(float32 expected)") != std::string::npos)
        return "element type outside the list (" + reason + ")";
    return reason;
}

// Whether a skipped test is outside Tessel's scope, and which part: "" when in scope. `raw`
// is the skip's message; the model file is searched for the domains the reader does not name.
std::string out_of_scope(const TestCase& test, const std::string& raw) {
    std::string bytes;
    if (std::FILE* f = std::fopen((test.dir + "/model.onnx").c_str(), "rb")) {
        char buffer[4096];
        size_t n;
        while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) bytes.append(buffer, n);
        std::fclose(f);
    }
    if (bytes.find("ai.onnx.preview.training") != std::string::npos) return "training ops (ai.onnx.preview.training)";
    if (bytes.find("ai.onnx.ml") != std::string::npos) return "ai.onnx.ml ops";
    static const char* const sequence_ops[] = {
        "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength",
        "SequenceMap", "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement"};
    for (const char* op : sequence_ops)
        if (std::find(test.missing_ops.begin(), test.missing_ops.end(), op) != test.missing_ops.end())
            return "sequences and optionals";
    // missing_ops lists the main graph's ops; a body's (If, Loop, Scan) show in the model's bytes
    if (raw.find("body") != std::string::npos)
        for (const char* op : sequence_ops)
            if (bytes.find(op) != std::string::npos) return "sequences and optionals";
    if (raw.find("is a sequence") != std::string::npos || raw.find("is an optional") != std::string::npos ||
        raw.find("sequence type") != std::string::npos || raw.find("optional type") != std::string::npos)
        return "sequences and optionals";
    static const char* const string_ops[] = {"StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch"};
    for (const char* op : string_ops)
        if (std::find(test.missing_ops.begin(), test.missing_ops.end(), op) != test.missing_ops.end()) return "strings";
    if (std::find(test.missing_ops.begin(), test.missing_ops.end(), "ImageDecoder") != test.missing_ops.end())
        return "image decoding";
    // ONNX data types 8 (string), 14, 15 (complex) and 17-26 (float8, int4, float4, float8e8m0,
    // int2), by name ("element type FLOAT8E4M3FN (17)") or by number ("ONNX data type 17")
    if (raw.find("element type STRING") != std::string::npos) return "strings";
    static const char* const narrow[] = {"COMPLEX", "FLOAT8", "FLOAT4", "INT4", "UINT4", "INT2", "UINT2", "unknown (2"};
    for (const char* name : narrow)
        if (raw.find(std::string("element type ") + name) != std::string::npos) return "float8, float4, int4, int2, complex types";
    size_t at = raw.find("data type ");
    if (at != std::string::npos) {
        int code = std::atoi(raw.c_str() + at + 10);
        if (code == 8) return "strings";
        if (code == 14 || code == 15 || (code >= 17 && code <= 26)) return "float8, float4, int4, int2, complex types";
    }
    return "";
}

enum class Outcome { Passed, Failed, Skipped };

struct TestResult {
    Outcome outcome = Outcome::Passed;
    std::string detail;   // the failure, or the skip's grouped reason
    std::string scope;    // a skip outside Tessel's scope: which part ("" in scope)
};

struct Count {
    int tests = 0, attempted = 0, passed = 0, skipped = 0, out_of_scope = 0;
    void add(const TestResult& r) {
        ++tests;
        if (r.outcome == Outcome::Skipped) ++skipped;
        else ++attempted;
        if (r.outcome == Outcome::Passed) ++passed;
        if (!r.scope.empty()) ++out_of_scope;
    }
    int in_scope() const { return tests - out_of_scope; }
};

// "12.3%" of part in whole (one decimal, so the document stays stable).
std::string percent(int part, int whole) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f%%", whole ? 100.0 * part / whole : 0.0);
    return text;
}

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

// The document of docs/conformance.md: how it was made, then per source, suite and op.
// `command` is how to make it again; `sources` the --data labels in order.
bool write_document(const char* path, const std::string& command, const std::string& template_ops,
                    const std::vector<std::string>& sources, const std::vector<TestCase>& tests,
                    const std::vector<DevicePass>& passes) {
    std::FILE* f = std::fopen(path, "w");
    if (!f) return false;
    std::fprintf(f, "# ONNX conformance\n\n");
    std::fprintf(f, "The ONNX backend tests run on Tessel. This file is written by the conformance runner\n"
                    "(test/conformance/run.cpp); do not edit it by hand. It is made with\n\n"
                    "```sh\n%s\n```\n\n", command.c_str());
    std::fprintf(f, "The sources: libonnx-testdata (Debian's package: data/node, data/pytorch-operator,\n"
                    "data/pytorch-converted and data/simple) and each `--data` folder of ONNX backend tests.\n"
                    "Each test whose ops are all in the runtime's op list is compiled for the device, run on every\n"
                    "data set of the test and compared with the expected outputs: `|got - want| <= 1e-5 + 1e-3 * |want|`\n"
                    "for floats (NaN matches NaN), exact for integers and booleans. The other tests are skipped with\n"
                    "their reason, as are tests the reader or the compiler refuses as Unsupported; a failed test fails\n"
                    "the run. Skipped tests outside Tessel's scope (training and ai.onnx.ml ops, strings, image\n"
                    "decoding, sequences and optionals, float8/float4/int4/int2/complex types) are counted apart. The second pass runs the\n"
                    "same tests on `HETERO:TEMPLATE,CPU`, with `TEMPLATE:SUPPORTED_OPS` set to a seeded half of the\n"
                    "runtime's ops:\n\n`%s`\n\n",
                 template_ops.c_str());

    // In scope: per source, the tests that are not out of scope and how many pass.
    std::fprintf(f, "## In scope\n\n| source | tests | out of scope | in scope | %s passed | %s passed |\n"
                    "|---|---:|---:|---:|---:|---:|\n", passes[0].device, passes[1].device);
    for (const std::string& source : sources) {
        Count first, second;
        for (size_t i = 0; i < tests.size(); ++i) {
            if (tests[i].source != source) continue;
            first.add(passes[0].results[i]);
            second.add(passes[1].results[i]);
        }
        std::fprintf(f, "| %s | %d | %d | %d | %d (%s) | %d (%s) |\n", source.c_str(), first.tests, first.out_of_scope,
                     first.in_scope(), first.passed, percent(first.passed, first.in_scope()).c_str(), second.passed,
                     percent(second.passed, second.in_scope()).c_str());
    }
    for (const std::string& source : sources) {
        Count first;
        for (size_t i = 0; i < tests.size(); ++i)
            if (tests[i].source == source) first.add(passes[0].results[i]);
        std::fprintf(f, "\n%s: %d of its %d in-scope tests pass on %s (%s).\n", source.c_str(), first.passed,
                     first.in_scope(), passes[0].device, percent(first.passed, first.in_scope()).c_str());
    }

    std::fprintf(f, "\n## Suites\n\n| device | suite | tests | attempted | passed | failed | skipped |\n"
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

    // Skip reasons per source: out of scope by part, then the in-scope ones.
    for (const std::string& source : sources) {
        std::map<std::string, int> scope, reasons;
        for (size_t i = 0; i < tests.size(); ++i) {
            const TestResult& r = passes[0].results[i];
            if (tests[i].source != source || r.outcome != Outcome::Skipped) continue;
            if (!r.scope.empty()) ++scope[r.scope];
            else ++reasons[r.detail];
        }
        std::fprintf(f, "\n## Out of scope (%s)\n\n| part | tests |\n|---|---:|\n", source.c_str());
        for (const auto& r : scope) std::fprintf(f, "| %s | %d |\n", cell(r.first).c_str(), r.second);
        std::fprintf(f, "\n## In-scope skip reasons (%s, %s)\n\n| reason | tests |\n|---|---:|\n", source.c_str(), passes[0].device);
        for (const auto& r : reasons) std::fprintf(f, "| %s | %d |\n", cell(r.first).c_str(), r.second);
    }

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
            if (!r.scope.empty()) ++row.skip_reasons["out of scope: " + r.scope];
            else if (missing.empty()) ++row.skip_reasons[r.detail];
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

// One --data source: a label and a folder.
struct Source {
    std::string label, dir;
};

// The tests of one source: its suite folders when it has them, else its own test folders.
void collect_tests(const Source& source, const char* only, const std::set<std::string>& all_ops, std::vector<TestCase>* tests) {
    const char* suites[] = {"node", "pytorch-operator", "pytorch-converted", "simple"};
    std::vector<std::pair<std::string, std::string>> folders;   // suite name, folder
    for (const char* suite : suites)
        if (exists(source.dir + "/" + suite)) folders.push_back({source.label + "/" + suite, source.dir + "/" + suite});
    if (folders.empty()) folders.push_back({source.label, source.dir});
    for (const auto& folder : folders) {
        for (const std::string& name : list_dir(folder.second)) {
            std::string dir = folder.second + "/" + name;
            if (!exists(dir + "/model.onnx")) continue;
            std::string test_name = folder.first + "/" + name;
            if (only && test_name.find(only) == std::string::npos) continue;
            TestCase t{source.label, folder.first, test_name, dir, {}, {}};
            Model model;
            if (model.read_onnx_file((dir + "/model.onnx").c_str()) == Status::Ok)
                for (NodeId v = 0; v < model.graph.node_count(); ++v) {
                    std::string op(model.graph.node(v).op.data, model.graph.node(v).op.size);
                    if (op == "Parameter" || op == "Result" || op == "Absent") continue;
                    if (std::find(t.ops.begin(), t.ops.end(), op) == t.ops.end()) t.ops.push_back(op);
                }
            // Constant and Size have no kernel: the compiler folds them
            for (const std::string& op : t.ops)
                if (!all_ops.count(op) && op != "Constant" && op != "Size") t.missing_ops.push_back(op);
            tests->push_back(t);
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    const std::string default_data = "/usr/share/libonnx-testdata/data";
    std::vector<Source> sources = {{"libonnx-testdata", default_data}};
    std::string data_arguments;   // as given, for the document's command line
    const char* table = nullptr;
    const char* only = nullptr;
    const char* device = nullptr;   // --device D: one pass on D instead of CPU and HETERO:TEMPLATE,CPU
    bool verbose = false;
    for (int i = 1; i < argc; ++i) {
        std::string data;
        if (!std::strcmp(argv[i], "--table") && i + 1 < argc) table = argv[++i];
        else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!std::strcmp(argv[i], "--verbose")) verbose = true;
        else if (!std::strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!std::strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else if (argv[i][0] != '-') data = argv[i];
        else {
            std::fprintf(stderr, "usage: conformance [--data [LABEL=]DIR]... [--table FILE.md] [--verbose] [--only SUBSTRING] [--device D]\n");
            return 2;
        }
        if (data.empty()) continue;
        Source source;
        size_t equals = data.find('=');
        source.dir = equals == std::string::npos ? data : data.substr(equals + 1);
        while (source.dir.size() > 1 && source.dir.back() == '/') source.dir.pop_back();
        source.label = equals == std::string::npos ? source.dir.substr(source.dir.rfind('/') + 1) : data.substr(0, equals);
        if (source.dir == default_data) continue;   // always there
        bool taken = false;
        for (const Source& s : sources) taken = taken || s.label == source.label;
        if (taken || source.label.empty()) {
            std::fprintf(stderr, "conformance: the label '%s' is taken or empty: give --data LABEL=DIR\n", source.label.c_str());
            return 2;
        }
        sources.push_back(source);
        data_arguments += " --data " + data;
    }
    std::set<std::string> all_ops;
    for (const OpKernel& k : builtin_op_kernels()) all_ops.insert(k.op);
    std::vector<TestCase> tests;
    std::vector<std::string> labels;
    for (const Source& source : sources) {
        size_t before = tests.size();
        collect_tests(source, only, all_ops, &tests);
        if (tests.size() == before && !only) {
            std::fprintf(stderr, "conformance: no tests under %s\n", source.dir.c_str());
            return 2;
        }
        labels.push_back(source.label);
    }
    if (tests.empty()) { std::fprintf(stderr, "conformance: no tests\n"); return 2; }
    // TEMPLATE's half of the ops for the HETERO pass (seeded).
    std::vector<std::string> ops(all_ops.begin(), all_ops.end());
    std::mt19937 rng(2026);
    std::shuffle(ops.begin(), ops.end(), rng);
    std::string half;
    for (size_t i = 0; i < ops.size() / 2; ++i) half += (i ? "," : "") + ops[i];

    int exit_code = 0;
    std::vector<DevicePass> passes = {{"CPU", {}}, {"HETERO:TEMPLATE,CPU", {}}};
    if (device) {
        if (table) { std::fprintf(stderr, "conformance: --table needs the default passes, not --device\n"); return 2; }
        passes = {{device, {}}};
    }
    for (size_t pass = 0; pass < passes.size(); ++pass) {
        DevicePass& device_pass = passes[pass];
        std::vector<ConfigEntry> config;
        if (pass == 1 && !device) config.push_back(ConfigEntry{"TEMPLATE:SUPPORTED_OPS", StringView(half.c_str())});
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
                r.scope = out_of_scope(test, result.substr(6));
                ++skip_reasons[r.scope.empty() ? r.detail : "out of scope: " + r.scope];
                if (verbose) std::printf("SKIP %s: %s%s%s\n", test.name.c_str(), result.c_str() + 6, r.scope.empty() ? "" : " [out of scope: ",
                                         r.scope.empty() ? "" : (r.scope + "]").c_str());
            } else {
                r.outcome = result.empty() ? Outcome::Passed : Outcome::Failed;
                r.detail = result;
                if (!result.empty()) failures.push_back(test.name + ": " + result);
                if (verbose) std::printf("%s %s%s%s\n", result.empty() ? "PASS" : "FAIL", test.name.c_str(), result.empty() ? "" : ": ",
                                         result.c_str());
            }
            device_pass.results.push_back(r);
        }
        Count all;
        for (const TestResult& r : device_pass.results) all.add(r);
        for (const std::string& label : labels) {
            Count c;
            for (size_t i = 0; i < tests.size(); ++i)
                if (tests[i].source == label) c.add(device_pass.results[i]);
            // Not a "test cases:" line: scripts/summary.sh adds those up, and the device's line below counts these.
            std::printf("[conformance %s %s] attempted %d, passed %d, failed %d (%d skipped of %d; in scope %d, passed %s)\n",
                        device_pass.device, label.c_str(), c.attempted, c.passed, c.attempted - c.passed, c.skipped, c.tests,
                        c.in_scope(), percent(c.passed, c.in_scope()).c_str());
        }
        std::printf("[conformance %s] test cases: %d | %d passed | %d failed | (%d skipped of %zu)\n", device_pass.device,
                    all.attempted, all.passed, all.attempted - all.passed, all.skipped, tests.size());
        for (const std::string& f : failures) std::printf("  FAILED %s\n", f.c_str());
        if (pass == 0)
            for (const auto& r : skip_reasons) std::printf("  skipped %4d: %s\n", r.second, r.first.c_str());
        if (all.attempted != all.passed) exit_code = 1;
    }
    if (table) {
        // How docs/conformance.md is made: the options that change what it holds, not the file name.
        std::string command = "make build/conformance && build/conformance" + data_arguments;
        if (only) command += std::string(" --only ") + only;
        command += " --table docs/conformance.md";
        if (!write_document(table, command, half, labels, tests, passes)) {
            std::fprintf(stderr, "conformance: cannot write %s\n", table);
            return 2;
        }
    }
    return exit_code;
}
