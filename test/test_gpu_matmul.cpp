// MatMul on the GPU: the Gemm kernels (direct at 4, 2 or 1 columns per work-item, and 16 x 16
// local-memory tiles) with NumPy's 1-D promotions and broadcast batch dims, against the CPU
// within the rounding bound of a K-term dot product (both sums within K * 2^-24 * sum|terms|
// of the exact one; sum|terms| is the CPU's product of the absolute values), on GPU and on
// HETERO:GPU,CPU, tiles on and off. A MatMul + Add + Relu runs as one kernel.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "alloc_counter.h"
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

using test::kSanitizer;

struct Product {
    std::vector<int64_t> a, b;
    int64_t k;
};

// 1-D x 2-D, 2-D x 1-D, 1-D x 1-D, 2-D x 2-D with M/N/K tails around the 16 tile at 1, 2 and 4
// columns per work-item, 3-D x 2-D, 2-D x 3-D, 3-D x 1-D, batches broadcast both ways.
const Product kProducts[] = {
    {{19}, {19, 18}, 19},
    {{17, 21}, {21}, 21},
    {{4}, {4}, 4},
    {{33, 18}, {18, 35}, 18},
    {{16, 16}, {16, 16}, 16},
    {{17, 31}, {31, 18}, 31},
    {{15, 17}, {17, 20}, 17},
    {{3, 17, 20}, {20, 17}, 20},
    {{20, 17}, {2, 17, 24}, 17},
    {{2, 3, 7}, {7}, 7},
    {{2, 1, 17, 16}, {1, 3, 16, 18}, 16},
    {{2, 1, 5, 6}, {1, 3, 6, 4}, 6},
};

size_t elements(const std::vector<int64_t>& dims) {
    size_t n = 1;
    for (int64_t d : dims) n *= (size_t)d;
    return n;
}

void build(Model* m) {
    m->opset = 17;
    int count = 0;
    for (const Product& p : kProducts) {
        std::string a = "a" + std::to_string(count), b = "b" + std::to_string(count), y = "y" + std::to_string(count);
        NodeId ia, ib, id;
        REQUIRE(m->add_input(StringView(a.data(), a.size()), test::make_desc(ElementType::Float32, p.a), &ia) == Status::Ok);
        REQUIRE(m->add_input(StringView(b.data(), b.size()), test::make_desc(ElementType::Float32, p.b), &ib) == Status::Ok);
        InputRef inputs[] = {InputRef::by_id(ia), InputRef::by_id(ib)};
        REQUIRE(m->add_node("MatMul", StringView(y.data(), y.size()), Span<const InputRef>(inputs, 2), 1, &id) == Status::Ok);
        std::string out = "out_" + y;
        REQUIRE(m->add_output(StringView(out.data(), out.size()), InputRef::by_id(id)) == Status::Ok);
        ++count;
    }
    REQUIRE(m->finalize() == Status::Ok);
}

using test::gpu_tested_here;

}  // namespace

TEST_CASE("gpu matmul: 1-D promotions, tails around the tile, broadcast batches equal CPU within the dot-product bound, tiled and direct") {
    if (!gpu_tested_here()) return;
    std::mt19937 rng(35);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<std::vector<float>> inputs, magnitudes;
    for (const Product& p : kProducts)
        for (const auto* dims : {&p.a, &p.b}) {
            inputs.emplace_back(elements(*dims));
            for (float& v : inputs.back()) v = dist(rng);
            magnitudes.push_back(inputs.back());
            for (float& v : magnitudes.back()) v = std::fabs(v);
        }
    Model model;
    build(&model);
    std::vector<std::vector<float>> cpu = test::compile_and_infer(model, "CPU", inputs);
    std::vector<std::vector<float>> magnitude = test::compile_and_infer(model, "CPU", magnitudes);
    const size_t count = sizeof kProducts / sizeof kProducts[0];
    for (const char* device : {"GPU", "HETERO:GPU,CPU"})
        for (const char* tiles : {"YES", "NO"}) {
            INFO(device << " TILED_KERNELS=" << tiles);
            std::vector<std::string> kernels;
            std::vector<std::vector<float>> gpu = test::compile_and_infer(model, device, inputs, &kernels, tiles);
            // Every MatMul a GPU kernel; tiled where M, N and K fill a tile.
            size_t direct = 0, tiled = 0;
            for (const std::string& k : kernels) {
                direct += k == "opencl:MatMul";
                tiled += k == "opencl:tiled-MatMul";
            }
            CHECK(direct + tiled == count);
            CHECK(tiled == (std::strcmp(tiles, "YES") ? 0u : 6u));
            REQUIRE(gpu.size() == count);
            for (size_t o = 0; o < count; ++o) {
                INFO("product " << o);
                REQUIRE(gpu[o].size() == cpu[o].size());
                for (size_t i = 0; i < cpu[o].size(); ++i) {
                    float bound = 2.0f * (float)kProducts[o].k * std::ldexp(1.0f, -24) * magnitude[o][i] + 1e-30f;
                    INFO("at " << i << ": GPU " << gpu[o][i] << ", CPU " << cpu[o][i] << ", bound " << bound);
                    CHECK(std::fabs(gpu[o][i] - cpu[o][i]) <= bound);
                }
            }
        }
}

TEST_CASE("gpu matmul: MatMul + Add + Relu over broadcast batches is one kernel, tiled and direct") {
    if (!gpu_tested_here()) return;
    std::mt19937 rng(36);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    Model m;
    m.opset = 17;
    NodeId x, w, bias, mm, add, relu;
    REQUIRE(m.add_input("x", test::make_desc(ElementType::Float32, {2, 1, 17, 18}), &x) == Status::Ok);
    std::vector<float> wv(3 * 18 * 20), bv(20), xv(2 * 17 * 18);
    for (float& v : wv) v = dist(rng);
    for (float& v : bv) v = dist(rng);
    for (float& v : xv) v = dist(rng);
    REQUIRE(m.add_constant("w", test::make_desc(ElementType::Float32, {3, 18, 20}), wv.data(), &w) == Status::Ok);
    REQUIRE(m.add_constant("bias", test::make_desc(ElementType::Float32, {20}), bv.data(), &bias) == Status::Ok);
    InputRef mm_in[] = {InputRef::by_id(x), InputRef::by_id(w)};
    REQUIRE(m.add_node("MatMul", "mm", Span<const InputRef>(mm_in, 2), 1, &mm) == Status::Ok);
    InputRef add_in[] = {InputRef::by_id(mm), InputRef::by_id(bias)};
    REQUIRE(m.add_node("Add", "add", Span<const InputRef>(add_in, 2), 1, &add) == Status::Ok);
    InputRef relu_in[] = {InputRef::by_id(add)};
    REQUIRE(m.add_node("Relu", "relu", Span<const InputRef>(relu_in, 1), 1, &relu) == Status::Ok);
    REQUIRE(m.add_output("y", InputRef::by_id(relu)) == Status::Ok);
    REQUIRE(m.finalize() == Status::Ok);
    std::vector<std::vector<float>> cpu = test::compile_and_infer(m, "CPU", {xv});
    for (const char* device : {"GPU", "HETERO:GPU,CPU"})
        for (const char* tiles : {"YES", "NO"}) {
            INFO(device << " TILED_KERNELS=" << tiles);
            std::vector<std::string> kernels;
            std::vector<std::vector<float>> gpu = test::compile_and_infer(m, device, {xv}, &kernels, tiles);
            REQUIRE(kernels.size() == 1);
            CHECK(kernels[0] == (std::strcmp(tiles, "YES") ? "opencl:MatMul+2" : "opencl:tiled-MatMul+2"));
            REQUIRE(gpu.size() == 1);
            REQUIRE(gpu[0].size() == cpu[0].size());
            for (size_t i = 0; i < cpu[0].size(); ++i) {
                INFO("at " << i);
                CHECK(std::fabs(gpu[0][i] - cpu[0][i]) <= 1e-5f + 1e-5f * std::fabs(cpu[0][i]));
            }
        }
}
