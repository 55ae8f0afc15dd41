// Int8 weights as quantizers write them: int8 constants through DequantizeLinear, one scale per
// tensor or one per output channel, whose maps mostly stay well under |q| = 127. The int8 kernels
// take those integers and scales (prepare keeps them with the folded floats, detail::Int8Origin)
// and the results are bit for bit the integer oracle's; a blob stores the int8 weights, not the
// floats, and its import gives the same bits on the int8 path and on the float path.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "alloc_counter.h"
#include "op_test.h"
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;
using test::count_of;

struct Int8WeightsCase {
    const char* op;       // "Conv", "MatMul" or "Gemm" (transB)
    Shape x, w;           // w: the weights' shape as the op reads them
    int64_t group = 1;
    bool per_tensor = false;
    bool zero_point = false;   // an explicit int8 zero point input (of zeros)
};

struct Outputs {
    std::vector<uint8_t> y;
    std::string kernels;
};

// The weights' maps: a Conv's first dim, MatMul's last, Gemm transB's first.
int64_t maps_of(const Int8WeightsCase& cc) { return std::string(cc.op) == "MatMul" ? cc.w[1] : cc.w[0]; }

// DQ(x) -> op(DQ(q), bias) -> Q(y) on the CPU device.
void build(const Int8WeightsCase& cc, const std::vector<uint8_t>& x, const std::vector<int8_t>& q, const std::vector<float>& sw,
           const std::vector<float>& bias, OpTest& t) {
    const float sx = 0.02f, sy = 0.05f;
    const uint8_t zx = 37, zy = 101;
    const int64_t maps = maps_of(cc);
    t.opset = 13;
    InputRef xin = t.input(cc.x, x);
    NodeId dx = t.op("DequantizeLinear", {xin, t.constant(Shape{}, std::vector<float>{sx}), t.constant(Shape{}, std::vector<uint8_t>{zx})});
    std::vector<InputRef> wq = {t.constant(cc.w, q), cc.per_tensor ? t.constant(Shape{}, sw) : t.constant(Shape{maps}, sw)};
    if (cc.zero_point) wq.push_back(cc.per_tensor ? t.constant(Shape{}, std::vector<int8_t>{0}) : t.constant(Shape{maps}, std::vector<int8_t>((size_t)maps, 0)));
    NodeId dw = t.op("DequantizeLinear", wq);
    if (!cc.per_tensor) t.set_int("axis", std::string(cc.op) == "MatMul" ? 1 : 0);
    const bool matmul = std::string(cc.op) == "MatMul";   // no bias input
    NodeId op = matmul ? t.op(cc.op, {InputRef::by_id(dx), InputRef::by_id(dw)})
                       : t.op(cc.op, {InputRef::by_id(dx), InputRef::by_id(dw), t.constant(Shape{maps}, bias)});
    if (std::string(cc.op) == "Conv") {
        t.set_ints("pads", {1, 1, 1, 1});
        if (cc.group != 1) t.set_int("group", cc.group);
    }
    if (std::string(cc.op) == "Gemm") t.set_int("transB", 1);
    t.op("QuantizeLinear", {InputRef::by_id(op), t.constant(Shape{}, std::vector<float>{sy}), t.constant(Shape{}, std::vector<uint8_t>{zy})});
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
}

Outputs infer(const CompiledModel& compiled, const std::vector<uint8_t>& x) {
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    std::memcpy(request.input(0).data(), x.data(), x.size());
    uint64_t before = tessel_test::allocation_count();
    REQUIRE(request.infer() == Status::Ok);
    CHECK(tessel_test::allocation_count() == before);
    Outputs out;
    const uint8_t* y = request.output(0).data_as<uint8_t>();
    out.y.assign(y, y + request.output(0).bytes());
    for (const ProfileEntry& e : request.profiling_info()) out.kernels += std::string(e.kernel) + " ";
    return out;
}

// y as the documented arithmetic gives it in integers: sum (x - zx) q + q_b requantized at
// s_x s_w[map] / s_y (float32, onnxruntime's order). Convs: 2-D, pads of 1, stride 1.
std::vector<uint8_t> oracle(const Int8WeightsCase& cc, const std::vector<uint8_t>& x, const std::vector<int8_t>& q,
                            const std::vector<float>& sw, const std::vector<int32_t>& qb) {
    const float sx = 0.02f, sy = 0.05f;
    const int32_t zx = 37, zy = 101;
    const int64_t maps = maps_of(cc);
    auto scale = [&](int64_t m) { return sx * sw[cc.per_tensor ? 0 : (size_t)m] / sy; };
    std::vector<uint8_t> want;
    if (std::string(cc.op) == "Conv") {
        const int64_t n = cc.x[0], c = cc.x[1], h = cc.x[2], w = cc.x[3], cg = cc.w[1], kh = cc.w[2], kw = cc.w[3];
        const int64_t oh = h + 2 - kh + 1, ow = w + 2 - kw + 1, mg = maps / cc.group;
        want.resize((size_t)(n * maps * oh * ow));
        for (int64_t b = 0; b < n; ++b)
            for (int64_t m = 0; m < maps; ++m)
                for (int64_t i = 0; i < oh; ++i)
                    for (int64_t j = 0; j < ow; ++j) {
                        int32_t acc = 0;
                        for (int64_t ci = 0; ci < cg; ++ci)
                            for (int64_t a = 0; a < kh; ++a)
                                for (int64_t e = 0; e < kw; ++e) {
                                    const int64_t r = i - 1 + a, s = j - 1 + e, ch = m / mg * cg + ci;
                                    if (r < 0 || r >= h || s < 0 || s >= w) continue;
                                    acc += ((int32_t)x[(size_t)(((b * c + ch) * h + r) * w + s)] - zx) * q[(size_t)(((m * cg + ci) * kh + a) * kw + e)];
                                }
                        want[(size_t)(((b * maps + m) * oh + i) * ow + j)] = int8_requantize(acc, qb[(size_t)m], scale(m), -(float)zy, 255.0f - zy, zy);
                    }
        return want;
    }
    const int64_t k = cc.x.back(), rows = count_of(cc.x) / k;
    const bool trans_b = std::string(cc.op) == "Gemm";
    want.resize((size_t)(rows * maps));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t m = 0; m < maps; ++m) {
            int32_t acc = 0;
            for (int64_t p = 0; p < k; ++p)
                acc += ((int32_t)x[(size_t)(r * k + p)] - zx) * q[(size_t)(trans_b ? m * k + p : p * maps + m)];
            want[(size_t)(r * maps + m)] = int8_requantize(acc, qb[(size_t)m], scale(m), -(float)zy, 255.0f - zy, zy);
        }
    return want;
}

// Whether the compiled model still holds the floats of its int8 weights (the Constant that
// has int8_values), which compile frees when only int8 kernels read them.
bool keeps_int8_floats(const CompiledModel& compiled) {
    const PreparedModel& pm = *compiled.prepared();
    const Graph& g = pm.model.graph;
    int found = 0;
    bool kept = false;
    for (NodeId c = 0; c < g.node_count(); ++c) {
        if (!g.find_attribute(c, "int8_values")) continue;
        ++found;
        kept = pm.constant(pm.value_id(c, 0)) != nullptr;
    }
    CHECK(found == 1);
    return kept;
}

int64_t differing(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
    REQUIRE(got.size() == want.size());
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
        if (got[i] != want[i] && bad++ < 5) MESSAGE("y[" << i << "] = " << (int)got[i] << ", want " << (int)want[i]);
    return bad;
}
}  // namespace

TEST_CASE("int8 weights: DequantizeLinear of int8 constants, per tensor and per channel, bit for bit the integer oracle; blobs keep the integers") {
    const std::vector<Int8WeightsCase> cases = {
        {"Conv", {1, 16, 9, 13}, {32, 16, 3, 3}, 1, true, true},      // 3x3, one scale (the pixel tiles where the CPU has them)
        {"Conv", {2, 16, 7, 10}, {48, 16, 3, 3}, 1, false, false},    // 3x3, a scale per map
        {"Conv", {1, 24, 6, 11}, {20, 24, 1, 1}, 1, true, false},     // 1x1 (no pads: 1 + 2 - 1 wide)
        {"Conv", {1, 8, 12, 12}, {16, 4, 3, 3}, 2, false, true},      // 2 groups
        {"Conv", {1, 16, 10, 14}, {16, 1, 3, 3}, 16, true, false},    // depthwise, one scale
        {"Conv", {1, 12, 8, 9}, {12, 1, 3, 3}, 12, false, false},     // depthwise, a scale per channel
        {"MatMul", {3, 40}, {40, 24}, 1, false, true},                // a scale per column (axis 1)
        {"MatMul", {2, 5, 33}, {33, 70}, 1, true, false},             // one scale, rows of a batch
        {"Gemm", {2, 40}, {24, 40}, 1, false, false},                 // transB: a scale per row of B (axis 0)
        {"Gemm", {3, 64}, {17, 64}, 1, true, true},
    };
    uint32_t seed = 4100;
    for (const Int8WeightsCase& cc : cases) {
        const std::string op = cc.op;
        CAPTURE(op); CAPTURE(seed); CAPTURE(cc.per_tensor);
        std::mt19937 rng(seed++);
        const int64_t maps = maps_of(cc);
        std::vector<uint8_t> x((size_t)count_of(cc.x));
        for (uint8_t& v : x) v = (uint8_t)(rng() % 256);
        // |q| up to 40 but 127 in the first map only: a scale per map taken from each map's
        // largest weight (floats made int8 again) would differ from the model's
        std::vector<int8_t> q((size_t)count_of(cc.w));
        for (int8_t& v : q) v = (int8_t)((int)(rng() % 81) - 40);
        q[0] = -127;
        std::vector<float> sw(cc.per_tensor ? 1 : (size_t)maps), bias((size_t)maps);
        for (float& s : sw) s = std::ldexp(1.0f + (float)(rng() % 100) / 100.0f, -8);
        std::vector<int32_t> qb((size_t)maps);
        for (int64_t m = 0; m < maps; ++m) {
            qb[(size_t)m] = (int32_t)(rng() % 2001) - 1000;
            bias[(size_t)m] = (float)((double)qb[(size_t)m] * 0.02 * (double)sw[cc.per_tensor ? 0 : (size_t)m]);
        }
        if (std::string(cc.op) == "MatMul") std::fill(qb.begin(), qb.end(), 0);   // no bias
        const std::vector<uint8_t> want = oracle(cc, x, q, sw, qb);
        OpTest t;
        build(cc, x, q, sw, bias, t);
        Core core;
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(threads);
            std::string count = std::to_string(threads);
            ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}};
            CompiledModel compiled;
            REQUIRE(core.compile_model(t.model, "CPU", Span<const ConfigEntry>(config, 2), &compiled) == Status::Ok);
            Outputs fast = infer(compiled, x);
            INFO(fast.kernels);
            CHECK(fast.kernels.find(std::string(":") + (std::string(cc.op) == "Conv" && cc.group == cc.x[1] ? "DepthwiseConv" : cc.op)) != std::string::npos);
            CHECK(fast.kernels.find("DequantizeLinear") == std::string::npos);
            CHECK(differing(fast.y, want) == 0);
            CHECK(!keeps_int8_floats(compiled));
            if (threads == 2) continue;
            // The blob: the int8 weights and scales in place of the floats, the same bits after import.
            std::string blob;
            REQUIRE(compiled.export_model(test::append_to_string, &blob) == Status::Ok);
            CHECK(blob.size() < q.size() * sizeof(float) + 3000);
            // the weights' value as a desc made from the int8 weights ("value", kind 0x80), not as floats
            CHECK(blob.find(std::string("\x05\0\0\0value\x80", 10)) != std::string::npos);
            CompiledModel imported;
            REQUIRE(core.import_model(blob.data(), blob.size(), &imported) == Status::Ok);
            Outputs again = infer(imported, x);
            CHECK(again.kernels == fast.kernels);
            CHECK(differing(again.y, want) == 0);
            CHECK(!keeps_int8_floats(imported));
            // The float path (FUSION=NO) reads the floats the import made from the integers: the
            // bits of the same path compiled from the model.
            ConfigEntry no_fusion[] = {{"FUSION", "NO"}};
            CompiledModel floats, floats_imported;
            REQUIRE(core.compile_model(t.model, "CPU", Span<const ConfigEntry>(no_fusion, 1), &floats) == Status::Ok);
            REQUIRE(core.import_model(blob.data(), blob.size(), &floats_imported, Span<const ConfigEntry>(no_fusion, 1)) == Status::Ok);
            Outputs slow = infer(floats, x), slow_imported = infer(floats_imported, x);
            CHECK(slow.kernels.find("int8:") == std::string::npos);
            CHECK(differing(slow_imported.y, slow.y) == 0);
            CHECK(keeps_int8_floats(floats));   // the float kernels read them
            CHECK(keeps_int8_floats(floats_imported));
            // The op on another device (TEMPLATE, the reference kernels): its floats stay, its bits are the float path's.
            std::string supported = std::string(cc.op) + ",DequantizeLinear,QuantizeLinear";
            ConfigEntry on_template[] = {{"TEMPLATE:SUPPORTED_OPS", StringView(supported.c_str())}};
            CompiledModel hetero;
            REQUIRE(core.compile_model(t.model, "HETERO:TEMPLATE,CPU", Span<const ConfigEntry>(on_template, 1), &hetero) == Status::Ok);
            CHECK(keeps_int8_floats(hetero));
            CHECK(differing(infer(hetero, x).y, slow.y) == 0);
            int64_t far = 0;   // the float path within one step of the integers
            for (size_t i = 0; i < want.size(); ++i) far += std::abs((int)slow.y[i] - (int)want[i]) > 1;
            CHECK(far == 0);
        }
    }
}

TEST_CASE("int8 weights: a blob whose int8-made floats disagree with the int8 weights is ParseError") {
    const Int8WeightsCase cc = {"Conv", {1, 16, 6, 6}, {16, 16, 3, 3}, 1, true, false};
    std::vector<uint8_t> x((size_t)count_of(cc.x), 7);
    std::vector<int8_t> q((size_t)count_of(cc.w), 3);
    OpTest t;
    build(cc, x, q, {0.01f}, std::vector<float>(16, 0.0f), t);
    Core core;
    CompiledModel compiled;
    REQUIRE(core.compile_model(t.model, "CPU", {}, &compiled) == Status::Ok);
    std::string blob;
    REQUIRE(compiled.export_model(test::append_to_string, &blob) == Status::Ok);
    // "value" (u32 length 5), kind 0x80, then the floats' desc: Float32 (1), rank 4, dims 16, 16, 3, 3
    const std::string marker("\x05\0\0\0value\x80\x01\x04\x10\0\0\0\0\0\0\0", 19);
    const size_t at = blob.find(marker);
    REQUIRE(at != std::string::npos);
    struct Edit { size_t offset; char value; const char* what; };
    for (const Edit& e : {Edit{11, 2, "the floats' type"}, Edit{13, 17, "the first dim"}}) {
        CAPTURE(e.what);
        std::string bad = blob;
        bad[at + e.offset] = e.value;
        test::reseal_blob(&bad);
        CompiledModel imported;
        CHECK(core.import_model(bad.data(), bad.size(), &imported) == Status::ParseError);
        CHECK(std::string(core.last_error()) == "blob: the model section is malformed");
    }
    CompiledModel imported;
    CHECK(core.import_model(blob.data(), blob.size(), &imported) == Status::Ok);
}

TEST_CASE("int8 weights: a model with a free batch runs each batch's plan on the model's int8 weights") {
    const Int8WeightsCase cc = {"Conv", {1, 16, 6, 7}, {32, 16, 3, 3}, 1, true, false};
    std::mt19937 rng(4200);
    std::vector<int8_t> q((size_t)count_of(cc.w));
    for (int8_t& v : q) v = (int8_t)((int)(rng() % 81) - 40);
    const std::vector<float> sw = {0.004f};
    std::vector<float> bias(32, 0.0f);
    const std::vector<int32_t> qb(32, 0);
    Int8WeightsCase free_batch = cc;
    free_batch.x[0] = -1;
    OpTest t;
    build(free_batch, {}, q, sw, bias, t);
    Core core;
    CompiledModel compiled;
    ConfigEntry config[] = {{"PERF_COUNT", "YES"}};
    REQUIRE(core.compile_model(t.model, "CPU", Span<const ConfigEntry>(config, 1), &compiled) == Status::Ok);
    REQUIRE(compiled.has_free_dims());
    CHECK(!keeps_int8_floats(compiled));
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    for (int64_t batch : {3, 1, 2, 3}) {
        CAPTURE(batch);
        Int8WeightsCase at = cc;
        at.x[0] = batch;
        std::vector<uint8_t> x((size_t)count_of(at.x));
        for (uint8_t& v : x) v = (uint8_t)(rng() % 256);
        Tensor input;
        REQUIRE(input.allocate(ElementType::UInt8, Span<const int64_t>(at.x.data(), at.x.size())) == Status::Ok);
        std::memcpy(input.data(), x.data(), x.size());
        REQUIRE(request.set_input(0, input) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
        std::string kernels;
        for (const ProfileEntry& e : request.profiling_info()) kernels += std::string(e.kernel) + " ";
        INFO(kernels);
        CHECK(kernels.find("DequantizeLinear") == std::string::npos);
        const uint8_t* y = request.output(0).data_as<uint8_t>();
        CHECK(differing(std::vector<uint8_t>(y, y + request.output(0).bytes()), oracle(at, x, q, sw, qb)) == 0);
    }
    CHECK(compiled.cached_shape_plans() == 2);   // batches 3 and 2 (batch 1 is the compiled model's own plan)
}

TEST_CASE("int8 weights: the floats of weights only int8 kernels read are never made (the compile's peak memory)") {
    // MatMul by 16 MB of int8 weights (64 MB as floats): on CPU the int8 kernel takes the
    // integers and the floats stay unmade address space; TEMPLATE reads the floats, which
    // calibrates the measure (a sanitizer's or an emulator's process may count otherwise)
    const Int8WeightsCase cc = {"MatMul", {1, 4096}, {4096, 4096}, 1, true, false};
    std::mt19937 rng(4300);
    std::vector<int8_t> q((size_t)count_of(cc.w));
    for (int8_t& v : q) v = (int8_t)((int)(rng() % 255) - 127);
    std::vector<uint8_t> x((size_t)count_of(cc.x));
    for (uint8_t& v : x) v = (uint8_t)(rng() % 256);
    const std::vector<float> sw = {0.002f};
    OpTest t;
    build(cc, x, q, sw, std::vector<float>(4096, 0.0f), t);
    Core core;
    const uint64_t floats = (uint64_t)q.size() * sizeof(float);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    const bool sanitized = true;
#elif defined(__has_feature)
    const bool sanitized = __has_feature(address_sanitizer) || __has_feature(thread_sanitizer);
#else
    const bool sanitized = false;
#endif
    uint64_t growth[2] = {};
    const char* devices[2] = {"TEMPLATE", "CPU"};
    std::vector<uint8_t> y[2];
    for (int d = 0; d < 2; ++d) {
        CAPTURE(devices[d]);
        const bool measured = test::reset_peak_resident();
        const uint64_t before = test::peak_resident();
        CompiledModel compiled;
        REQUIRE(core.compile_model(t.model, devices[d], {}, &compiled) == Status::Ok);
        growth[d] = measured && before ? test::peak_resident() - before : 0;
        y[d] = infer(compiled, x).y;
        CHECK(keeps_int8_floats(compiled) == (d == 0));
    }
    int64_t far = 0;   // the float path within one step of the integers
    for (size_t i = 0; i < y[0].size(); ++i) far += std::abs((int)y[0][i] - (int)y[1][i]) > 1;
    CHECK(far == 0);
    MESSAGE("compile's peak growth: TEMPLATE " << growth[0] / 1048576 << " MB, CPU " << growth[1] / 1048576 << " MB");
    // CPU holds the weights transposed (their rows per output column) and packed for the
    // kernel the runtime picks; made floats would add 64 MB, a copy of the integers 16 MB
    Int8Gemv gemv;
    Int8Gemm gemm;
    uint64_t packed = 0;
    if (gemv.init() == Status::Ok) packed = Int8Gemv::packed_bytes(4096, 4096);
    else if (gemm.init(Isa::Auto, true, Int8Gemm::amx_pays(4096, 4096)) == Status::Ok || gemm.init(Isa::Ref) == Status::Ok)
        packed = gemm.packed_a_bytes(4096, 4096);
    const uint64_t held = q.size() + packed;
    MESSAGE("CPU's transposed and packed weights: " << held / 1048576 << " MB");
    if (growth[0] >= floats && !sanitized) {
        CHECK(growth[1] < floats);
        CHECK(growth[1] < held + q.size() / 2);
    } else MESSAGE("peak resident memory not measurable here (or a sanitizer's shadow memory counts in it): not checked");
}

TEST_CASE("int8 weights: a model read from a file gives back the file's pages of the weights its int8 kernels packed") {
    // MatMul by 8 MB of int8 weights, written as ONNX and read with read_onnx_file
    const Int8WeightsCase cc = {"MatMul", {2, 2048}, {2048, 4096}, 1, false, false};
    std::mt19937 rng(4400);
    std::vector<int8_t> q((size_t)count_of(cc.w));
    for (int8_t& v : q) v = (int8_t)((int)(rng() % 255) - 127);
    std::vector<uint8_t> x((size_t)count_of(cc.x));
    for (uint8_t& v : x) v = (uint8_t)(rng() % 256);
    std::vector<float> sw(4096);
    for (size_t m = 0; m < sw.size(); ++m) sw[m] = 0.0004f + 0.0001f * (float)(m % 7);
    OpTest t;
    build(cc, x, q, sw, {}, t);
    std::string bytes;
    REQUIRE(write_onnx(t.model, test::append_to_string, &bytes) == Status::Ok);
    const std::string dir = test::make_temp_dir("tessel-weights-"), path = dir + "/model.onnx";
    test::write_file(path, bytes);
    Model model;
    REQUIRE(model.read_onnx_file(path.c_str()) == Status::Ok);
    const int64_t pages = test::resident_pages(model.file_data(), bytes.size());
    Core core;
    CompiledModel cpu;
    REQUIRE(core.compile_model(model, "CPU", {}, &cpu) == Status::Ok);
    const int64_t left = test::resident_pages(model.file_data(), bytes.size());
    const Outputs y = infer(cpu, x);
    CHECK(differing(y.y, oracle(cc, x, q, sw, std::vector<int32_t>(4096, 0))) == 0);
    const int64_t weight_pages = (int64_t)(q.size() / 4096);
    MESSAGE("file pages in memory: " << pages << " read, " << left << " compiled (the weights: " << weight_pages << ")");
#if defined(__linux__) && defined(TESSEL_MALLOC_IS_MALLOC)
    if (pages >= weight_pages) CHECK(left < pages - weight_pages * 9 / 10);
    else MESSAGE("the pages in memory are not measurable here: not checked");
#endif
    // What reads the integers again has them from the file: TEMPLATE's floats, an export
    CompiledModel from_file, from_memory;
    REQUIRE(core.compile_model(model, "TEMPLATE", {}, &from_file) == Status::Ok);
    REQUIRE(core.compile_model(t.model, "TEMPLATE", {}, &from_memory) == Status::Ok);
    CHECK(infer(from_file, x).y == infer(from_memory, x).y);
    std::string blob;
    REQUIRE(cpu.export_model(test::append_to_string, &blob) == Status::Ok);
    CompiledModel imported;
    REQUIRE(core.import_model(blob.data(), blob.size(), &imported) == Status::Ok);
    CHECK(infer(imported, x).y == y.y);
    // A file replaced since it was read (a new one renamed over it) is not mapped: the pages stay
    Model replaced;
    REQUIRE(replaced.read_onnx_file(path.c_str()) == Status::Ok);
    test::write_file(dir + "/new.onnx", bytes);
    REQUIRE(std::rename((dir + "/new.onnx").c_str(), path.c_str()) == 0);
    CHECK(!replaced.release_file_pages(replaced.file_data(), bytes.size()));
    CompiledModel kept;
    REQUIRE(core.compile_model(replaced, "CPU", {}, &kept) == Status::Ok);
    const int64_t stayed = test::resident_pages(replaced.file_data(), bytes.size());
    if (pages >= weight_pages) CHECK(stayed >= pages - 2);
    CHECK(infer(kept, x).y == y.y);
    // Only the file's own bytes, and only a model read from a file
    Model current;
    REQUIRE(current.read_onnx_file(path.c_str()) == Status::Ok);
    CHECK(!current.release_file_pages(bytes.data(), bytes.size()));
    CHECK(!current.release_file_pages(static_cast<const char*>(current.file_data()) + 4096, bytes.size()));
#if defined(__linux__) && defined(TESSEL_MALLOC_IS_MALLOC)
    CHECK(current.release_file_pages(current.file_data(), bytes.size()));   // all of it: the file pages it in as read
    CompiledModel paged_in;
    REQUIRE(core.compile_model(current, "CPU", {}, &paged_in) == Status::Ok);
    CHECK(infer(paged_in, x).y == y.y);
#endif
    Model from_bytes;
    REQUIRE(from_bytes.read_onnx(bytes.data(), bytes.size()) == Status::Ok);
    CHECK(!from_bytes.release_file_pages(bytes.data(), bytes.size()));
    CHECK(test::remove_tree(dir));
}

TEST_CASE("model file: the file's pages of float weights the CPU packed are given back too") {
    // MatMul by 8 MB of float weights read from a file: the CPU's GEMM packs them, so the file's
    // pages of them go (HETERO:TEMPLATE,CPU: TEMPLATE reads its own copy of them, the file's bytes
    // being unaligned floats)
    std::mt19937 rng(4500);
    std::vector<float> x(2 * 2048), w(2048 * 1024);
    for (float& v : x) v = (float)((int)(rng() % 200) - 100) / 64.0f;
    for (float& v : w) v = (float)((int)(rng() % 200) - 100) / 256.0f;
    OpTest t;
    t.opset = 13;
    InputRef xin = t.input({2, 2048}, x);
    t.op("MatMul", {xin, t.constant(Shape{2048, 1024}, w)});
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    std::string bytes;
    REQUIRE(write_onnx(t.model, test::append_to_string, &bytes) == Status::Ok);
    const std::string dir = test::make_temp_dir("tessel-floats-"), path = dir + "/model.onnx";
    test::write_file(path, bytes);
    auto run = [&](const CompiledModel& compiled) {
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        std::memcpy(request.input(0).data(), x.data(), x.size() * sizeof(float));
        REQUIRE(request.infer() == Status::Ok);
        const float* y = request.output(0).data_as<float>();
        return std::vector<float>(y, y + request.output(0).elements());
    };
    Core core;
    CompiledModel from_memory;
    REQUIRE(core.compile_model(t.model, "CPU", {}, &from_memory) == Status::Ok);
    const std::vector<float> want = run(from_memory);
    const int64_t weight_pages = (int64_t)(w.size() * sizeof(float) / 4096);
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        CAPTURE(device);
        const bool cpu = std::string(device) == "CPU";
        Model model;
        REQUIRE(model.read_onnx_file(path.c_str()) == Status::Ok);
        const int64_t pages = test::resident_pages(model.file_data(), bytes.size());
        CompiledModel compiled;
        ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", "MatMul"}};
        REQUIRE(core.compile_model(model, device, Span<const ConfigEntry>(config, cpu ? 0 : 1), &compiled) == Status::Ok);
        const int64_t left = test::resident_pages(model.file_data(), bytes.size());
        MESSAGE("file pages in memory: " << pages << " read, " << left << " compiled (the weights: " << weight_pages << ")");
#if defined(__linux__) && defined(TESSEL_MALLOC_IS_MALLOC)
        if (pages >= weight_pages) CHECK(left < pages - weight_pages * 9 / 10);
#endif
        const std::vector<float> y = run(compiled);
        if (cpu) CHECK(y == want);
        else for (size_t i = 0; i < y.size(); ++i) CHECK(std::fabs(y[i] - want[i]) <= 1e-3f * (1.0f + std::fabs(want[i])));
    }
    CHECK(test::remove_tree(dir));
}

// uint8 weights and int8 weights with a zero point (onnxruntime's QUInt8) are not the tiles'
// integers: the group makes symmetric int8 weights of their floats (>>int8 cpu). Pinned here:
// the int8 kernels run, and every result is within one step of the float path's.
TEST_CASE("int8 weights: uint8 and zero-pointed weights run the int8 conv, within one step of the float path") {
    struct Asymmetric {
        bool uint8_weights;
        int zero_point;
    };
    for (const Asymmetric a : {Asymmetric{true, 90}, Asymmetric{true, 128}, Asymmetric{false, 20}}) {
        CAPTURE(a.uint8_weights);
        CAPTURE(a.zero_point);
        auto run = [&](bool fusion) {
            OpTest t;
            std::mt19937 rng(5);
            const int64_t channels = 64, maps = 32, side = 10;
            std::vector<uint8_t> x((size_t)(channels * side * side));
            for (uint8_t& v : x) v = (uint8_t)(rng() % 256);
            NodeId dx = t.op("DequantizeLinear", {t.input(Shape{1, channels, side, side}, x), t.constant(Shape{}, std::vector<float>{0.02f}),
                                                  t.constant(Shape{}, std::vector<uint8_t>{120})});
            std::vector<float> scales((size_t)maps);
            for (float& s : scales) s = 0.003f + 0.001f * (float)(rng() % 10);
            const Shape w_shape = {maps, channels, 3, 3};
            std::vector<uint8_t> u((size_t)count_of(w_shape));
            for (uint8_t& v : u) v = (uint8_t)(rng() % 256);
            InputRef w = a.uint8_weights ? t.constant(w_shape, u) : t.constant(w_shape, std::vector<int8_t>(u.begin(), u.end()));
            InputRef zero = a.uint8_weights ? t.constant(Shape{maps}, std::vector<uint8_t>((size_t)maps, (uint8_t)a.zero_point))
                                            : t.constant(Shape{maps}, std::vector<int8_t>((size_t)maps, (int8_t)a.zero_point));
            NodeId dw = t.op("DequantizeLinear", {w, t.constant(Shape{maps}, scales), zero});
            t.set_int("axis", 0);
            NodeId conv = t.op("Conv", {InputRef::by_id(dx), InputRef::by_id(dw)});
            t.set_ints("pads", {1, 1, 1, 1});
            t.op("QuantizeLinear", {InputRef::by_id(conv), t.constant(Shape{}, std::vector<float>{0.5f}), t.constant(Shape{}, std::vector<uint8_t>{128})});
            return test::run_last_node_on_cpu(t, 1, fusion);
        };
        const test::CpuRun fast = run(true), reference = run(false);
        INFO(fast.kernels);
        CHECK(fast.kernels.find("int8:") != std::string::npos);
        CHECK(fast.kernels.find("Conv") != std::string::npos);
        REQUIRE(fast.bytes.size() == reference.bytes.size());
        int64_t far = 0;
        for (size_t i = 0; i < fast.bytes.size(); ++i) far += std::abs((int)fast.bytes[i] - (int)reference.bytes[i]) > 1;
        CHECK(far == 0);
    }
}
