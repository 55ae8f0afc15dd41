// Small helpers shared by the test suites (tests may use the STL; the library does not).
#pragma once
#include <doctest/doctest.h>

#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hetero.h"
#include "runtime.h"

namespace test {

// Built with ASan or TSan (gcc or clang): tests that load uninstrumented drivers skip or fake them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizer = true;
#else
constexpr bool kSanitizer = false;
#endif
#else
constexpr bool kSanitizer = false;
#endif

inline void append_to_string(void* user, const char* data, size_t size) {
    static_cast<std::string*>(user)->append(data, size);
}

// Rewrites a blob header's checksum (FNV-1a of the payload past the 32-byte header) so a blob
// edited on purpose reaches the payload's parser.
inline void reseal_blob(std::string* blob) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 32; i < blob->size(); ++i) h = (h ^ (uint8_t)(*blob)[i]) * 0x100000001b3ull;
    for (int i = 0; i < 8; ++i) (*blob)[24 + i] = (char)(h >> (8 * i));
}

// A dense desc of `type` with these dims.
inline tessel::TensorDesc make_desc(tessel::ElementType type, const std::vector<int64_t>& dims) {
    tessel::TensorDesc d;
    d.type = type;
    d.rank = (uint8_t)dims.size();
    for (size_t i = 0; i < dims.size(); ++i) d.dims[i] = dims[i];
    return d;
}

inline std::string to_string(tessel::StringView s) { return std::string(s.data, s.size); }

// The element count of a shape.
inline int64_t count_of(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

// Every byte value, as many as the shape holds, in an order that mul and add change (the
// operands of one int8 test differ).
inline std::vector<uint8_t> every_byte(const std::vector<int64_t>& shape, uint32_t mul, uint32_t add) {
    std::vector<uint8_t> v((size_t)count_of(shape));
    for (size_t i = 0; i < v.size(); ++i) v[i] = (uint8_t)((i * mul + add + i / 256) % 256);
    return v;
}

// n floats drawn uniformly from [-scale, scale]; the same seed gives the same floats.
inline std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-scale, scale);
    std::vector<float> v((size_t)n);
    for (float& f : v) f = uniform(rng);
    return v;
}

// n floats from [low, high], drawn from the caller's stream (tests that make many arrays).
inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float low = -1.0f, float high = 1.0f) {
    std::uniform_real_distribution<float> uniform(low, high);
    std::vector<float> v(n);
    for (float& f : v) f = uniform(rng);
    return v;
}

// A float32 tensor of the dims, its values drawn uniformly from [-2, 2]; the same seed gives
// the same values.
inline tessel::Tensor random_tensor(std::initializer_list<int64_t> dims, uint32_t seed) {
    tessel::Tensor t;
    std::vector<int64_t> shape(dims);
    REQUIRE(t.allocate(tessel::ElementType::Float32, tessel::Span<const int64_t>(shape.data(), shape.size())) == tessel::Status::Ok);
    std::vector<float> v = random_floats((int64_t)t.elements(), seed, 2.0f);
    if (!v.empty()) std::memcpy(t.data(), v.data(), t.bytes());
    return t;
}

// Equal bits, or both NaN (of any payload).
inline bool same_bits(float a, float b) { return (a != a && b != b) || std::memcmp(&a, &b, sizeof a) == 0; }

// A float buffer of `count` elements that ends exactly at a PROT_NONE page (end = true) or
// starts exactly after one (end = false): a JIT kernel that touches past its tensor faults.
struct GuardedBuffer {
    void* map = nullptr;
    size_t map_bytes = 0;
    float* data = nullptr;
    GuardedBuffer(size_t count, bool end) {
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t bytes = (count * sizeof(float) + page - 1) / page * page;
        if (!bytes) bytes = page;
        map_bytes = bytes + 2 * page;
        map = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        REQUIRE(map != MAP_FAILED);
        char* base = static_cast<char*>(map);
        REQUIRE(mprotect(base, page, PROT_NONE) == 0);
        REQUIRE(mprotect(base + page + bytes, page, PROT_NONE) == 0);
        data = end ? reinterpret_cast<float*>(base + page + bytes - count * sizeof(float)) : reinterpret_cast<float*>(base + page);
    }
    ~GuardedBuffer() { munmap(map, map_bytes); }
    GuardedBuffer(const GuardedBuffer&) = delete;
    GuardedBuffer& operator=(const GuardedBuffer&) = delete;
};

// x (float, dims x_dims) -> NonZero -> Transpose -> GatherND(x, .) -> Mul(2) -> y, and the
// indices as a second output: a later stage planned per count of non-zeros.
inline void build_nonzero_gather(tessel::Model* m, const std::vector<int64_t>& x_dims) {
    using namespace tessel;
    NodeId x, nz, tr, gather, two, mul;
    REQUIRE(m->add_input("x", make_desc(ElementType::Float32, x_dims), &x) == Status::Ok);
    InputRef in[] = {InputRef::by_id(x)};
    REQUIRE(m->add_node("NonZero", "nz", in, 1, &nz) == Status::Ok);
    InputRef tin[] = {InputRef::by_id(nz)};
    REQUIRE(m->add_node("Transpose", "tr", tin, 1, &tr) == Status::Ok);
    InputRef gin[] = {InputRef::by_id(x), InputRef::by_id(tr)};
    REQUIRE(m->add_node("GatherND", "gather", gin, 1, &gather) == Status::Ok);
    float k = 2.0f;
    REQUIRE(m->add_constant("two", make_desc(ElementType::Float32, {}), &k, &two) == Status::Ok);
    InputRef min[] = {InputRef::by_id(gather), InputRef::by_id(two)};
    REQUIRE(m->add_node("Mul", "mul", min, 1, &mul) == Status::Ok);
    REQUIRE(m->add_output("y", InputRef::by_id(mul)) == Status::Ok);
    REQUIRE(m->add_output("indices", InputRef::by_id(nz)) == Status::Ok);
    m->opset = 17;
    REQUIRE(m->finalize() == Status::Ok);
}

// Reads a graph from text; the status is returned, the message kept in the graph.
inline tessel::Status read(const std::string& text, tessel::Graph* graph) {
    return tessel::read_text(tessel::StringView(text.data(), text.size()), graph);
}

inline std::string write(const tessel::Graph& graph) {
    std::string out;
    tessel::Status status = tessel::write_text(graph, append_to_string, &out);
    if (status != tessel::Status::Ok) return "error: " + std::string(graph.last_error());
    return out;
}

// ---- files -----------------------------------------------------------------------------------

// A new empty folder /tmp/<prefix>XXXXXX.
inline std::string make_temp_dir(const std::string& prefix) {
    std::string pattern = "/tmp/" + prefix + "XXXXXX";
    char* dir = mkdtemp(&pattern[0]);
    REQUIRE(dir != nullptr);
    return pattern;
}

inline void write_file(const std::string& path, const std::string& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
    std::fclose(f);
}

// Removes `path` and everything below it; links are removed, never followed. True when it is gone.
inline bool remove_tree(const std::string& path) {
    if (DIR* dir = opendir(path.c_str())) {
        while (dirent* e = readdir(dir)) {
            std::string name = e->d_name;
            if (name == "." || name == "..") continue;
            std::string child = path + "/" + name;
            struct stat st;
            if (lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(child);
            else unlink(child.c_str());
        }
        closedir(dir);
    }
    rmdir(path.c_str());
    struct stat st;
    return lstat(path.c_str(), &st) != 0;
}

// ---- running a model ---------------------------------------------------------------------------

// Creates `*request` from `compiled`, lets `fill(*request)` write the inputs and infers; each
// step must succeed.
template <class Fill>
void create_and_infer(const tessel::CompiledModel& compiled, tessel::InferRequest* request, Fill fill) {
    REQUIRE(compiled.create_request(request) == tessel::Status::Ok);
    fill(*request);
    REQUIRE(request->infer() == tessel::Status::Ok);
}

// Compiles `model` for `device` on `core` (no config), then create_and_infer.
template <class Fill>
void compile_and_infer(tessel::Core& core, const tessel::Model& model, const char* device, tessel::CompiledModel* compiled,
                       tessel::InferRequest* request, Fill fill) {
    REQUIRE(core.compile_model(model, device, {}, compiled) == tessel::Status::Ok);
    create_and_infer(*compiled, request, fill);
}

// One infer on a new request of `compiled`: inputs[i] fills input i (float32, exactly its
// size), infer() allocates nothing, the float32 outputs come back by index. `gpu_kernels`
// collects the kernel name of each step the GPU ran (compiled with PERF_COUNT=YES).
inline std::vector<std::vector<float>> infer_floats(const tessel::CompiledModel& compiled, const std::vector<std::vector<float>>& inputs,
                                                    std::vector<std::string>* gpu_kernels = nullptr) {
    tessel::InferRequest request;
    REQUIRE(compiled.create_request(&request) == tessel::Status::Ok);
    for (size_t i = 0; i < inputs.size(); ++i) {
        REQUIRE(request.input((uint32_t)i).bytes() == inputs[i].size() * 4);
        std::memcpy(request.input((uint32_t)i).data(), inputs[i].data(), inputs[i].size() * 4);
    }
    uint64_t before = tessel_test::allocation_count();
    tessel::Status s = request.infer();
    INFO(request.last_error());
    REQUIRE(s == tessel::Status::Ok);
    CHECK(tessel_test::allocation_count() == before);
    if (gpu_kernels)
        for (const tessel::ProfileEntry& p : request.profiling_info())
            if (p.device == tessel::StringView("GPU")) gpu_kernels->push_back(p.kernel);
    std::vector<std::vector<float>> out;
    for (uint32_t i = 0; i < compiled.output_count(); ++i) {
        const float* p = request.output(i).data_as<float>();
        out.emplace_back(p, p + request.output(i).bytes() / 4);
    }
    return out;
}

// A float32 tensor's values, and any tensor's dims.
inline std::vector<float> values_of(const tessel::Tensor& t) {
    std::vector<float> v(t.elements());
    if (!v.empty()) std::memcpy(v.data(), t.data(), t.bytes());
    return v;
}
inline std::vector<int64_t> shape_of(const tessel::Tensor& t) { return std::vector<int64_t>(t.shape().data, t.shape().data + t.rank()); }

// The first `count` outputs of a request that has run, as floats.
inline std::vector<std::vector<float>> outputs_of(const tessel::InferRequest& request, uint32_t count) {
    std::vector<std::vector<float>> out;
    for (uint32_t i = 0; i < count; ++i) out.push_back(values_of(request.output(i)));
    return out;
}

// The outputs of `m` compiled on `device` at the shape of x (its input "x"), run on x.
inline std::vector<std::vector<float>> fixed_shape_outputs(const tessel::Model& m, const char* device, const tessel::Tensor& x,
                                                           std::vector<tessel::ConfigEntry> config = {}) {
    tessel::Core core;
    tessel::CompiledModel compiled;
    tessel::InputShape shape[] = {{"x", x.shape()}};
    tessel::Status s = core.compile_model(m, device, tessel::Span<const tessel::ConfigEntry>(config.data(), config.size()), &compiled, shape);
    INFO(std::string(core.last_error()));
    REQUIRE(s == tessel::Status::Ok);
    REQUIRE(!compiled.has_free_dims());
    tessel::InferRequest request;
    REQUIRE(compiled.create_request(&request) == tessel::Status::Ok);
    REQUIRE(request.set_input(0, x) == tessel::Status::Ok);
    REQUIRE(request.infer() == tessel::Status::Ok);
    return outputs_of(request, compiled.output_count());
}

// `request`, of `model` compiled with free dims, infers at `x` (its one input); a compile of
// `model` fixed at x's shape infers at x too: every output has the same dims and bits.
inline void check_plan_equals_fixed_compile(tessel::Core& core, const tessel::Model& model, const char* device,
                                            tessel::Span<const tessel::ConfigEntry> entries, tessel::InferRequest& request,
                                            const tessel::Tensor& x) {
    REQUIRE(request.set_input(0, x) == tessel::Status::Ok);
    tessel::Status s = request.infer();
    INFO(std::string(request.last_error()));
    REQUIRE(s == tessel::Status::Ok);
    tessel::InputShape shape[] = {{model.input(0).name, x.shape()}};
    tessel::CompiledModel fixed;
    REQUIRE(core.compile_model(model, device, entries, &fixed, shape) == tessel::Status::Ok);
    tessel::InferRequest fixed_request;
    REQUIRE(fixed.create_request(&fixed_request) == tessel::Status::Ok);
    REQUIRE(fixed_request.set_input(0, x) == tessel::Status::Ok);
    REQUIRE(fixed_request.infer() == tessel::Status::Ok);
    for (uint32_t o = 0; o < fixed.output_count(); ++o) {
        CHECK(shape_of(request.output(o)) == shape_of(fixed_request.output(o)));
        CHECK(values_of(request.output(o)) == values_of(fixed_request.output(o)));   // the same kernels: bit for bit
    }
}

// Compiles `model` for `device` with PERF_COUNT=YES (and, where a GPU takes part, its
// TILED_KERNELS as given), then infers once through infer_floats.
inline std::vector<std::vector<float>> compile_and_infer(const tessel::Model& model, const char* device,
                                                         const std::vector<std::vector<float>>& inputs,
                                                         std::vector<std::string>* gpu_kernels = nullptr, const char* tiles = "NO") {
    tessel::Core core;
    tessel::CompiledModel compiled;
    tessel::ConfigEntry config[] = {{"PERF_COUNT", "YES"}, {"GPU:TILED_KERNELS", tiles}};
    tessel::Status s = core.compile_model(model, device, tessel::Span<const tessel::ConfigEntry>(config, std::strstr(device, "GPU") ? 2 : 1), &compiled);
    INFO(core.last_error());
    REQUIRE(s == tessel::Status::Ok);
    return infer_floats(compiled, inputs, gpu_kernels);
}

// Whether this machine's GPU device runs (says why not).
inline bool gpu_here() {
    tessel::Core core;
    if (core.device("GPU")->check_available() == tessel::Status::Ok) return true;
    MESSAGE("GPU unavailable here: " << core.device("GPU")->last_error());
    return false;
}

// gpu_here, at one ISA level of the host suite (unset or ref) and not under the sanitizers:
// the driver is not instrumented, and the GPU's results do not depend on TESSEL_ISA.
inline bool gpu_tested_here() {
    const char* isa = std::getenv("TESSEL_ISA");
    if (kSanitizer || (isa && *isa && std::strcmp(isa, "ref"))) return false;
    return gpu_here();
}

// The VmFlags of the mapping holding `address` in /proc/self/smaps ("" when not found).
inline std::string vm_flags_at(const void* address) {
    std::string flags;
#if defined(__linux__)
    std::FILE* f = std::fopen("/proc/self/smaps", "r");
    if (!f) return flags;
    char line[512];
    bool inside = false;
    const uintptr_t at = reinterpret_cast<uintptr_t>(address);
    while (std::fgets(line, sizeof line, f)) {
        unsigned long long begin = 0, end = 0;
        if (std::sscanf(line, "%llx-%llx ", &begin, &end) == 2 && std::strchr(line, '-') < std::strchr(line, ' ')) {
            inside = at >= begin && at < end;
        } else if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
            flags = line + 8;
            break;
        }
    }
    std::fclose(f);
#else
    (void)address;
#endif
    return flags;
}

// The first 2 MiB boundary at or after p.
inline void* first_huge_page(const void* p) {
    return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(p) + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
}

// Whether smaps shows huge page advice here: a kernel without transparent huge pages refuses it
// and qemu's user mode drops it (its suites skip the look), so an advice given directly
// calibrates the tests that look.
inline bool huge_advice_visible() {
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(__x86_64__)   // AArch64 runs under qemu here
    std::vector<char> probe(6u << 20);
    void* page = first_huge_page(probe.data());
    return madvise(page, 2u << 20, MADV_HUGEPAGE) == 0 && vm_flags_at(page).find(" hg") != std::string::npos;
#else
    return false;
#endif
}

// Resets the process's peak resident size to its current size (Linux: a write of 5 to
// /proc/self/clear_refs); false where it cannot.
inline bool reset_peak_resident() {
#if defined(__linux__)
    std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    const bool ok = std::fputs("5", f) >= 0;
    return std::fclose(f) == 0 && ok;
#else
    return false;
#endif
}
// The process's peak resident bytes since the last reset (VmHWM); 0 where it cannot be read.
inline uint64_t peak_resident() {
    uint64_t kb = 0;
#if defined(__linux__)
    std::FILE* f = std::fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    while (std::fgets(line, sizeof line, f))
        if (std::strncmp(line, "VmHWM:", 6) == 0) kb = std::strtoull(line + 6, nullptr, 10);
    std::fclose(f);
#endif
    return kb * 1024;
}

// How many pages of [p, p + bytes) are in this process's memory (/proc/self/pagemap's present
// bit); -1 where that cannot be read.
inline int64_t resident_pages(const void* p, size_t bytes) {
#if defined(__linux__)
    const long page = sysconf(_SC_PAGESIZE);
    std::FILE* f = std::fopen("/proc/self/pagemap", "rb");
    if (!f || page <= 0) {
        if (f) std::fclose(f);
        return -1;
    }
    const uintptr_t first = reinterpret_cast<uintptr_t>(p) / (uintptr_t)page;
    const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + bytes + (uintptr_t)page - 1) / (uintptr_t)page;
    int64_t present = 0;
    std::vector<uint64_t> entries(last - first);
    const bool read = std::fseek(f, (long)(first * 8), SEEK_SET) == 0 &&
                      std::fread(entries.data(), 8, entries.size(), f) == entries.size();
    std::fclose(f);
    if (!read) return -1;
    for (uint64_t e : entries) present += (int64_t)(e >> 63);
    return present;
#else
    (void)p, (void)bytes;
    return -1;
#endif
}

// Whether `kernels` names the int8 step `what` on the target its table lookups run on at this
// ISA level (avx512 or avx2 on x86, neon, else ref); a step without a table is named ref.
inline bool has_int8_step(const std::string& kernels, const char* what, bool looks_up = true) {
    const tessel::Isa isa = tessel::default_isa();
    const char* target = "ref";
#if defined(__x86_64__)
    if (looks_up && (isa == tessel::Isa::Avx512 || isa == tessel::Isa::Avx2)) target = tessel::isa_name(isa);   // VBMI's kernel or AVX2's
#endif
    if (looks_up && isa == tessel::Isa::Neon) target = "neon";
    return kernels.find(std::string("int8:") + target + ":" + what) != std::string::npos;
}

// A 2-D Conv of x by w (its kernel w[2] x w[3]), group, strides, dilations and pads (empty: the
// defaults), for the Conv tests' double-precision reference.
struct Conv2dCase {
    std::vector<int64_t> x, w;
    int64_t group;
    std::vector<int64_t> strides, dilations, pads;
};

inline std::vector<int64_t> conv2d_output_shape(const Conv2dCase& cc) {
    std::vector<int64_t> out = {cc.x[0], cc.w[0]};
    for (size_t i = 0; i + 2 < cc.x.size(); ++i) {
        const int64_t s = cc.strides.empty() ? 1 : cc.strides[i], d = cc.dilations.empty() ? 1 : cc.dilations[i];
        const int64_t pads = cc.pads.empty() ? 0 : cc.pads[i] + cc.pads[cc.x.size() - 2 + i];
        out.push_back((cc.x[2 + i] + pads - ((cc.w[2 + i] - 1) * d + 1)) / s + 1);
    }
    return out;
}

// The naive 2-D convolution in double and each element's bound (1e-5 sum |w||x| + |bias|).
inline void reference_conv2d(const Conv2dCase& cc, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& bias, std::vector<double>* want, std::vector<double>* bound) {
    const std::vector<int64_t> out = conv2d_output_shape(cc);
    const int64_t maps = cc.w[0], cg = cc.w[1], mg = maps / cc.group, h = cc.x[2], wd = cc.x[3];
    const int64_t sy = cc.strides.empty() ? 1 : cc.strides[0], sx = cc.strides.empty() ? 1 : cc.strides[1];
    const int64_t dy = cc.dilations.empty() ? 1 : cc.dilations[0], dx = cc.dilations.empty() ? 1 : cc.dilations[1];
    const int64_t top = cc.pads.empty() ? 0 : cc.pads[0], left = cc.pads.empty() ? 0 : cc.pads[1];
    want->clear();
    bound->clear();
    for (int64_t n = 0; n < out[0]; ++n)
        for (int64_t m = 0; m < maps; ++m)
            for (int64_t oy = 0; oy < out[2]; ++oy)
                for (int64_t ox = 0; ox < out[3]; ++ox) {
                    double sum = bias[(size_t)m], mag = std::fabs(sum);
                    const int64_t g = m / mg;
                    for (int64_t c = 0; c < cg; ++c)
                        for (int64_t ky = 0; ky < cc.w[2]; ++ky)
                            for (int64_t kx = 0; kx < cc.w[3]; ++kx) {
                                const int64_t iy = oy * sy - top + ky * dy, ix = ox * sx - left + kx * dx;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                                const double term = (double)x[(size_t)(((n * cc.x[1] + g * cg + c) * h + iy) * wd + ix)] *
                                                    (double)w[(size_t)(((m * cg + c) * cc.w[2] + ky) * cc.w[3] + kx)];
                                sum += term;
                                mag += std::fabs(term);
                            }
                    want->push_back(sum);
                    bound->push_back(1e-5 * mag + 1e-30);
                }
}

}  // namespace test
