// snippets.h: body IR, interpreter, lowering, emitters, kernel cache, tokenizer.
// The target under test comes from TESSEL_ISA (the Makefile runs the suite once per ISA):
// every JIT result must equal the interpreter run in the same FMA mode, bit for bit (NaNs
// compare as NaN), and the interpreter itself is checked against independent references.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "snippets.h"
#include "test_helpers.h"
#include "reference_math.h"

using namespace tessel;
using StreamingStores = SnippetTuning::StreamingStores;
using PageLanes = SnippetTuning::PageLanes;

namespace {

Isa target() { return default_isa(); }

std::string op_name(SnippetOp op) { return snippet_op_name(op); }

uint64_t shape_size(const SnippetShape& s) {
    uint64_t n = 1;
    for (int i = 0; i < s.rank; ++i) n *= (uint64_t)s.dims[i];
    return n;
}

float test_bits_to_float(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

bool same(float a, float b) {
    if (a != a && b != b) return true;
    return std::memcmp(&a, &b, 4) == 0;
}

// Interesting floats: specials, denormals, boundaries of the approximations.
std::vector<float> special_values() {
    return {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f, 1e-45f,
            3.4e38f, -3.4e38f, 88.72f, -87.5f, -103.9f, 0.625f, -0.625f, 0.927734375f,
            -0.927734375f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, 20.0f, -20.0f, 3.0f, -3.0f};
}

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 8.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-scale, scale);
    std::vector<float> specials = special_values();
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = (rng() % 8 == 0) ? specials[rng() % specials.size()] : uniform(rng);
    return v;
}

struct Built {
    Arena arena;
    SnippetBody body{&arena};
};

// A one-operation body over parameters of the given shapes.
void build_op(SnippetBody* body, SnippetOp op, const std::vector<std::vector<int64_t>>& shapes) {
    ValueId args[3];
    for (size_t i = 0; i < shapes.size(); ++i)
        REQUIRE(body->parameter(Span<const int64_t>(shapes[i].data(), shapes[i].size()), &args[i]) == Status::Ok);
    float alpha, beta;
    snippet_op_default_attributes(op, &alpha, &beta);
    if (op == SnippetOp::Clip) { alpha = -1.5f; beta = 2.25f; }
    ValueId y;
    REQUIRE(body->add(op, Span<const ValueId>(args, shapes.size()), alpha, beta, &y) == Status::Ok);
    REQUIRE(body->result(y) == Status::Ok);
}

uint64_t count(const std::vector<int64_t>& shape) {
    uint64_t n = 1;
    for (int64_t d : shape) n *= (uint64_t)d;
    return n;
}

// Runs a body on the target (JIT or interpreter) and on the interpreter with the target's FMA
// mode, over the given inputs; checks bitwise equality. `offset` shifts every buffer by that
// many floats (misalignment); in_place makes result 0 overwrite parameter 0.
void check_against_interpreter(const SnippetBody& body, const std::vector<std::vector<float>>& inputs,
                               const std::vector<uint64_t>& output_sizes, Isa isa, uint32_t max_registers = 0,
                               size_t offset = 0, bool in_place = false, KernelCache* cache = nullptr,
                               StreamingStores streaming_stores = StreamingStores::Auto, uint8_t lanes = 0,
                               PageLanes page_lanes = PageLanes::Auto) {
    std::vector<std::vector<float>> in_buffers(inputs.size());
    std::vector<const float*> in_ptrs;
    for (size_t i = 0; i < inputs.size(); ++i) {
        in_buffers[i].assign(inputs[i].size() + offset + 1, 0.0f);
        std::copy(inputs[i].begin(), inputs[i].end(), in_buffers[i].begin() + offset);
        in_ptrs.push_back(in_buffers[i].data() + offset);
    }
    std::vector<std::vector<float>> expected(output_sizes.size()), actual(output_sizes.size());
    std::vector<float*> expected_ptrs, actual_ptrs;
    for (size_t r = 0; r < output_sizes.size(); ++r) {
        expected[r].assign(output_sizes[r] + 1, 0.0f);
        actual[r].assign(output_sizes[r] + offset + 1, -7.0f);
        expected_ptrs.push_back(expected[r].data());
        actual_ptrs.push_back(actual[r].data() + offset);
    }
    REQUIRE(interpret(body, Span<const float* const>(in_ptrs.data(), in_ptrs.size()),
                      Span<float* const>(expected_ptrs.data(), expected_ptrs.size()), isa_uses_fma(isa)) == Status::Ok);
    std::vector<float> in_place_buffer;
    if (in_place) {  // result 0 written over a copy of parameter 0
        in_place_buffer = in_buffers[0];
        in_ptrs[0] = in_place_buffer.data() + offset;
        actual_ptrs[0] = in_place_buffer.data() + offset;
    }
    Snippet snippet;
    SnippetOptions options;
    options.isa = isa;
    options.tuning.max_registers = max_registers;
    options.cache = cache;
    options.tuning.streaming_stores = streaming_stores;
    options.tuning.lanes = lanes;
    options.tuning.page_lanes = page_lanes;
    Status s = snippet.compile(body, options);
    INFO("compile: " << snippet.last_error());
    REQUIRE(s == Status::Ok);
    REQUIRE(snippet.run(Span<const float* const>(in_ptrs.data(), in_ptrs.size()),
                        Span<float* const>(actual_ptrs.data(), actual_ptrs.size())) == Status::Ok);
    for (size_t r = 0; r < output_sizes.size(); ++r) {
        const float* got = actual_ptrs[r];
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < output_sizes[r]; ++i)
            if (!same(got[i], expected[r][i])) { if (!bad) first = i; ++bad; }
        INFO("isa " << std::string(isa_name(isa)) << " result " << r << " first mismatch at " << first << ": " << got[first]
                    << " vs " << expected[r][first]);
        CHECK(bad == 0);
        if (!in_place) CHECK(actual[r][output_sizes[r] + offset] == -7.0f);  // nothing written past the end
    }
}

std::vector<SnippetOp> computing_ops() {
    std::vector<SnippetOp> ops;
    for (int i = (int)SnippetOp::Add; i < (int)SnippetOp::Count; ++i) ops.push_back((SnippetOp)i);
    return ops;
}

}  // namespace

TEST_CASE("snippets: ISA names, TESSEL_ISA and availability") {
    Isa isa;
    CHECK(parse_isa("avx2", &isa) == Status::Ok);
    CHECK(isa == Isa::Avx2);
    CHECK(parse_isa("avx3", &isa) == Status::NotFound);
    CHECK(isa_available(Isa::Ref));
    CHECK(isa_vector_floats(Isa::Avx512) == 16);
    CHECK(!isa_uses_fma(Isa::Sse41));
    CHECK(parse_isa("neon", &isa) == Status::Ok);
    CHECK(isa == Isa::Neon);
    CHECK(std::string(isa_name(Isa::Neon)) == "neon");
    CHECK(isa_vector_floats(Isa::Neon) == 4);
    CHECK(isa_uses_fma(Isa::Neon));
#if defined(__aarch64__)
    CHECK(isa_available(Isa::Neon));
    CHECK(best_isa() == Isa::Neon);
    CHECK(!isa_available(Isa::Avx2));
#else
    CHECK(!isa_available(Isa::Neon));
#endif
    const char* env = std::getenv("TESSEL_ISA");
    if (env && parse_isa(env, &isa) == Status::Ok) {
        CHECK(target() == (isa_available(isa) ? isa : best_isa()));
    } else {
        CHECK(target() == best_isa());
    }
    MESSAGE("target under test: " << isa_name(target()));
}

TEST_CASE("snippets: op names map both ways; ops outside the list stay out") {
    SnippetOp op;
    CHECK(snippet_op_from_name("Gelu", &op) == Status::Ok);
    CHECK(op == SnippetOp::GeluErf);
    CHECK(snippet_op_from_name("Where", &op) == Status::Ok);
    CHECK(op == SnippetOp::Select);
    CHECK(snippet_op_from_name("HardSwish", &op) == Status::Ok);
    CHECK(snippet_op_from_name("Conv", &op) == Status::NotFound);
    CHECK(snippet_op_from_name("PowerStatic", &op) == Status::NotFound);
    for (SnippetOp o : computing_ops()) {
        if (o == SnippetOp::PowerStatic) continue;
        REQUIRE(snippet_op_from_name(snippet_op_name(o), &op) == Status::Ok);
        CHECK(op == o);
    }
}

TEST_CASE("snippets: bad input returns the exact status") {
    Arena arena;
    SnippetBody body(&arena);
    int64_t bad_dim[] = {3, -1};
    int64_t rank7[] = {1, 1, 1, 1, 1, 1, 1};
    int64_t s3[] = {3}, s4[] = {4};
    ValueId x, y, z;
    CHECK(body.parameter(bad_dim, &x) == Status::InvalidArgument);
    CHECK(body.parameter(rank7, &x) == Status::LimitExceeded);
    REQUIRE(body.parameter(s3, &x) == Status::Ok);
    REQUIRE(body.parameter(s4, &y) == Status::Ok);
    CHECK(body.binary(SnippetOp::Add, x, y, &z) == Status::InvalidArgument);  // 3 vs 4
    CHECK(std::string(body.last_error()).find("broadcast") != std::string::npos);
    CHECK(body.binary(SnippetOp::Add, x, 99, &z) == Status::InvalidArgument);
    CHECK(body.unary(SnippetOp::Add, x, &z) == Status::InvalidArgument);       // arity
    CHECK(body.unary(SnippetOp::Parameter, x, &z) == Status::InvalidArgument);
    CHECK(body.unary(SnippetOp::Elu, x, NAN, 0, &z) == Status::InvalidArgument);
    CHECK(body.result(42) == Status::InvalidArgument);

    Snippet snippet;
    const float* no_inputs[1] = {nullptr};
    float* no_outputs[1] = {nullptr};
    CHECK(snippet.run(Span<const float* const>(no_inputs, 0), Span<float* const>(no_outputs, 0)) == Status::NotFinalized);
    CHECK(snippet.compile(body) == Status::InvalidArgument);  // no result
    REQUIRE(body.unary(SnippetOp::Exp, x, &z) == Status::Ok);
    REQUIRE(body.result(z) == Status::Ok);
    SnippetOptions options;
    options.isa = target();
    CHECK(snippet.compile(body, options) == Status::InvalidArgument);  // y [4] outside domain [3]
    Arena arena_ok;
    SnippetBody ok(&arena_ok);
    REQUIRE(ok.parameter(s4, &x) == Status::Ok);
    REQUIRE(ok.parameter(s4, &y) == Status::Ok);
    REQUIRE(ok.binary(SnippetOp::Mul, x, y, &z) == Status::Ok);
    REQUIRE(ok.result(z) == Status::Ok);
    options.isa = (Isa)9;
    CHECK(snippet.compile(ok, options) == Status::InvalidArgument);
    options.isa = target();
    REQUIRE(snippet.compile(ok, options) == Status::Ok);
    float in[4] = {1, 2, 3, 4}, out[4];
    const float* inputs[] = {in, in};
    float* outputs[] = {out};
    CHECK(snippet.run(Span<const float* const>(inputs, 1), Span<float* const>(outputs, 1)) == Status::InvalidArgument);
    CHECK(snippet.run(Span<const float* const>(inputs, 2), Span<float* const>(outputs, 0)) == Status::InvalidArgument);
    const float* null_inputs[] = {in, nullptr};
    CHECK(snippet.run(Span<const float* const>(null_inputs, 2), Span<float* const>(outputs, 1)) == Status::InvalidArgument);
    CHECK(snippet.run(Span<const float* const>(inputs, 2), Span<float* const>(outputs, 1)) == Status::Ok);
    CHECK(out[3] == 16.0f);

    // Thirty-three arguments: one more than a kernel takes.
    Arena arena2;
    SnippetBody wide(&arena2);
    ValueId acc, p;
    REQUIRE(wide.parameter(s3, &acc) == Status::Ok);
    for (uint32_t i = 2; i < kSnippetMaxArgs; ++i) {
        REQUIRE(wide.parameter(s3, &p) == Status::Ok);
        REQUIRE(wide.binary(SnippetOp::Add, acc, p, &acc) == Status::Ok);
    }
    REQUIRE(wide.result(acc) == Status::Ok);
    CHECK(snippet.compile(wide, options) == Status::Ok);  // 31 + 1
    REQUIRE(wide.parameter(s3, &p) == Status::Ok);
    CHECK(snippet.compile(wide, options) == Status::LimitExceeded);
    CHECK(std::string(snippet.last_error()) == "compile: more than 32 parameters + results");

    // A fixed buffer too small for the body.
    alignas(16) unsigned char buffer[256];
    Arena tiny(buffer, sizeof buffer);
    SnippetBody small(&tiny);
    Status s = Status::Ok;
    for (int i = 0; i < 100 && s == Status::Ok; ++i) s = small.parameter(s3, &p);
    CHECK(s == Status::OutOfMemory);

    // A parameter that does not broadcast to the results' domain.
    Arena arena3;
    SnippetBody odd(&arena3);
    int64_t s5[] = {5};
    REQUIRE(odd.parameter(s3, &x) == Status::Ok);
    REQUIRE(odd.parameter(s5, &y) == Status::Ok);
    REQUIRE(odd.unary(SnippetOp::Neg, x, &z) == Status::Ok);
    REQUIRE(odd.result(z) == Status::Ok);
    CHECK(snippet.compile(odd, options) == Status::InvalidArgument);
}

TEST_CASE("snippets: interpreter matches independent references on exact ops") {
    std::vector<float> a = random_values(257, 1), b = random_values(257, 2);
    struct Case { SnippetOp op; float (*f)(float, float); };
    const Case cases[] = {
        {SnippetOp::Add, [](float x, float y) { return x + y; }},
        {SnippetOp::Sub, [](float x, float y) { return x - y; }},
        {SnippetOp::Mul, [](float x, float y) { return x * y; }},
        {SnippetOp::Div, [](float x, float y) { return x / y; }},
        {SnippetOp::Max, [](float x, float y) { return x > y ? x : y; }},
        {SnippetOp::Min, [](float x, float y) { return x < y ? x : y; }},
        {SnippetOp::Less, [](float x, float y) { return x < y ? 1.0f : 0.0f; }},
        {SnippetOp::GreaterOrEqual, [](float x, float y) { return x >= y ? 1.0f : 0.0f; }},
        {SnippetOp::Equal, [](float x, float y) { return x == y ? 1.0f : 0.0f; }},
        {SnippetOp::PRelu, [](float x, float y) { return x < 0 ? x * y : x; }},
    };
    for (const Case& c : cases) {
        Built b1;
        build_op(&b1.body, c.op, {{257}, {257}});
        std::vector<float> out(257);
        const float* in[] = {a.data(), b.data()};
        float* outs[] = {out.data()};
        REQUIRE(interpret(b1.body, in, outs) == Status::Ok);
        for (size_t i = 0; i < 257; ++i) {
            INFO(op_name(c.op) << " " << a[i] << " " << b[i]);
            CHECK(same(out[i], c.f(a[i], b[i])));
        }
    }
    struct Unary { SnippetOp op; float (*f)(float); };
    const Unary unary[] = {
        {SnippetOp::Sqrt, [](float x) { return std::sqrt(x); }},
        {SnippetOp::Abs, [](float x) { return std::fabs(x); }},
        {SnippetOp::Neg, [](float x) { return -x; }},
        {SnippetOp::Reciprocal, [](float x) { return 1.0f / x; }},
        {SnippetOp::Relu, [](float x) { return x != x ? x : (x > 0 ? x : (x == 0 ? x : 0.0f)); }},
        {SnippetOp::Floor, [](float x) { return std::floor(x); }},
        {SnippetOp::Ceil, [](float x) { return std::ceil(x); }},
        {SnippetOp::Round, [](float x) { return std::nearbyint(x); }},
        {SnippetOp::Sign, [](float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f); }},
        {SnippetOp::Clip, [](float x) { return x != x ? x : std::fmin(2.25f, std::fmax(-1.5f, x)); }},
        {SnippetOp::Softsign, [](float x) { return x / (1.0f + std::fabs(x)); }},
    };
    for (const Unary& u : unary) {
        Built b1;
        build_op(&b1.body, u.op, {{257}});
        std::vector<float> out(257);
        const float* in[] = {a.data()};
        float* outs[] = {out.data()};
        REQUIRE(interpret(b1.body, in, outs) == Status::Ok);
        for (size_t i = 0; i < 257; ++i) {
            INFO(op_name(u.op) << " " << a[i]);
            CHECK(same(out[i], u.f(a[i])));
        }
    }
    CHECK(std::nearbyint(2.5f) == 2.0f);  // Round is half to even
}

TEST_CASE("snippets: interpreter broadcasting matches an index-by-index reference") {
    struct Case { std::vector<int64_t> a, b; };
    const Case cases[] = {
        {{3, 5, 7}, {3, 1, 7}}, {{3, 5, 7}, {1, 5, 1}}, {{4, 33}, {4, 1}}, {{33}, {5, 33}},
        {{2, 3, 4, 5, 6, 7}, {1, 3, 1, 5, 1, 7}}, {{1}, {6, 1, 9}}, {{2, 1, 3}, {1, 4, 1}},
    };
    for (const Case& c : cases) {
        Built b;
        build_op(&b.body, SnippetOp::Sub, {c.a, c.b});
        const SnippetShape& out_shape = b.body.instruction(2).shape;
        std::vector<int64_t> o(out_shape.dims, out_shape.dims + out_shape.rank);
        std::vector<float> x = random_values(count(c.a), 3), y = random_values(count(c.b), 4);
        std::vector<float> got(count(o)), want(count(o));
        const float* in[] = {x.data(), y.data()};
        float* outs[] = {got.data()};
        REQUIRE(interpret(b.body, in, outs) == Status::Ok);
        // Reference: unravel each output index, broadcast into each input.
        auto offset = [&](const std::vector<int64_t>& shape, const std::vector<int64_t>& index) {
            int64_t off = 0;
            size_t shift = o.size() - shape.size();
            for (size_t d = 0; d < shape.size(); ++d) off = off * shape[d] + (shape[d] == 1 ? 0 : index[d + shift]);
            return off;
        };
        std::vector<int64_t> index(o.size(), 0);
        for (uint64_t i = 0; i < count(o); ++i) {
            uint64_t rest = i;
            for (size_t d = o.size(); d-- > 0;) { index[d] = (int64_t)(rest % o[d]); rest /= o[d]; }
            want[i] = x[offset(c.a, index)] - y[offset(c.b, index)];
        }
        size_t bad = 0;
        for (size_t i = 0; i < want.size(); ++i) bad += !same(got[i], want[i]);
        CHECK(bad == 0);
        // And the target agrees with the interpreter on the same shapes.
        check_against_interpreter(b.body, {x, y}, {count(o)}, target());
    }
}

TEST_CASE("snippets: domain normalization collapses contiguous dimensions") {
    struct Case { std::vector<int64_t> a, b; uint32_t rank; int64_t last; };
    const Case cases[] = {
        {{2, 3, 4}, {2, 3, 4}, 1, 24},
        {{2, 3, 4}, {2, 1, 4}, 3, 4},
        {{2, 3, 4}, {1, 1, 4}, 2, 4},
        {{2, 3, 4}, {2, 3, 1}, 2, 1},
        {{1, 1, 5}, {1}, 1, 5},
        {{1}, {1}, 1, 1},
    };
    for (const Case& c : cases) {
        Built b;
        build_op(&b.body, SnippetOp::Add, {c.a, c.b});
        Snippet s;
        SnippetOptions options;
        options.isa = target();
        REQUIRE(s.compile(b.body, options) == Status::Ok);
        CHECK(s.normalized_rank() == c.rank);
        CHECK(s.normalized_dim(s.normalized_rank() - 1) == (c.last == 1 ? s.normalized_dim(s.normalized_rank() - 1) : c.last));
    }
}

TEST_CASE("snippets: every op, every length 0..2W+1 and large ones, equals the interpreter") {
    Isa isa = target();
    uint32_t w = isa_vector_floats(isa);
    std::vector<uint64_t> lengths;
    for (uint64_t n = 0; n <= 2 * w + 1; ++n) lengths.push_back(n);
    lengths.push_back(1000);
    lengths.push_back(4099);
    for (SnippetOp op : computing_ops()) {
        uint32_t arity = snippet_op_arity(op);
        for (uint64_t n : lengths) {
            Built b;
            std::vector<std::vector<int64_t>> shapes(arity, std::vector<int64_t>{(int64_t)n});
            build_op(&b.body, op, shapes);
            std::vector<std::vector<float>> inputs;
            for (uint32_t i = 0; i < arity; ++i) inputs.push_back(random_values(n, (uint32_t)(n * 7 + i + (int)op * 101), op == SnippetOp::Pow ? 3.0f : 8.0f));
            if (op == SnippetOp::Select)
                for (float& c : inputs[0]) c = (c > 0) ? 1.0f : (c < -4 ? NAN : 0.0f);
            INFO(op_name(op) << " n=" << n);
            check_against_interpreter(b.body, inputs, {n}, isa);
        }
    }
}

TEST_CASE("snippets: broadcast on each axis, scalars, misaligned and in-place buffers") {
    Isa isa = target();
    const std::vector<int64_t> full = {3, 4, 5, 19};
    for (size_t axis = 0; axis < full.size(); ++axis) {
        std::vector<int64_t> narrow = full;
        narrow[axis] = 1;
        for (int variant = 0; variant < 3; ++variant) {
            Built b;
            ValueId x, y, k, t, u, r;
            REQUIRE(b.body.parameter(Span<const int64_t>(full.data(), full.size()), &x) == Status::Ok);
            REQUIRE(b.body.parameter(Span<const int64_t>(narrow.data(), narrow.size()), &y) == Status::Ok);
            REQUIRE(b.body.scalar(0.75f, &k) == Status::Ok);
            REQUIRE(b.body.binary(SnippetOp::Mul, x, y, &t) == Status::Ok);
            REQUIRE(b.body.binary(SnippetOp::Add, t, k, &u) == Status::Ok);
            REQUIRE(b.body.unary(SnippetOp::Tanh, u, &r) == Status::Ok);
            REQUIRE(b.body.result(r) == Status::Ok);
            std::vector<float> xv = random_values(count(full), 11), yv = random_values(count(narrow), 12);
            INFO("axis " << axis << " variant " << variant);
            check_against_interpreter(b.body, {xv, yv}, {count(full)}, isa, 0, variant == 1 ? 1 : (variant == 2 ? 3 : 0),
                                      variant == 2);
        }
    }
    // A result broadcast along the row (its value does not depend on the row's axis).
    Built b;
    int64_t full_shape[] = {6, 37}, col_shape[] = {6, 1};
    ValueId x, c, y, z;
    REQUIRE(b.body.parameter(full_shape, &x) == Status::Ok);
    REQUIRE(b.body.parameter(col_shape, &c) == Status::Ok);
    REQUIRE(b.body.binary(SnippetOp::Mul, x, c, &y) == Status::Ok);
    REQUIRE(b.body.unary(SnippetOp::Exp, c, &z) == Status::Ok);
    REQUIRE(b.body.result(y) == Status::Ok);
    REQUIRE(b.body.result(z) == Status::Ok);
    check_against_interpreter(b.body, {random_values(222, 5), random_values(6, 6)}, {222, 6}, isa);
}

TEST_CASE("snippets: in place equals out of place") {
    Isa isa = target();
    Built b;
    int64_t shape[] = {1003};
    ValueId x, y;
    REQUIRE(b.body.parameter(shape, &x) == Status::Ok);
    REQUIRE(b.body.unary(SnippetOp::GeluErf, x, &y) == Status::Ok);
    REQUIRE(b.body.result(y) == Status::Ok);
    std::vector<float> data = random_values(1003, 77), out(1003);
    const float* in[] = {data.data()};
    float* outs[] = {out.data()};
    Snippet s;
    SnippetOptions options;
    options.isa = isa;
    REQUIRE(s.compile(b.body, options) == Status::Ok);
    REQUIRE(s.run(in, outs) == Status::Ok);
    float* same_buffer[] = {data.data()};
    REQUIRE(s.run(in, same_buffer) == Status::Ok);
    size_t bad = 0;
    for (size_t i = 0; i < 1003; ++i) bad += !same(data[i], out[i]);
    CHECK(bad == 0);
}

namespace {
// A random body: `params` parameters of broadcast-compatible shapes, a DAG of random ops,
// scalars, and several results (some intermediates, to keep many values live).
struct RandomBody {
    Arena arena;
    SnippetBody body{&arena};
    std::vector<std::vector<int64_t>> param_shapes;
    std::vector<uint64_t> result_sizes;
};

void make_random_body(RandomBody* rb, std::mt19937& rng, int ops_count) {
    std::vector<int64_t> domain = {(int64_t)(1 + rng() % 3), (int64_t)(1 + rng() % 4), (int64_t)(1 + rng() % 40)};
    int params = 1 + (int)(rng() % 3);
    std::vector<ValueId> values;
    for (int p = 0; p < params; ++p) {
        std::vector<int64_t> shape = domain;
        for (auto& d : shape) if (rng() % 3 == 0) d = 1;
        if (p == 0) shape = domain;
        rb->param_shapes.push_back(shape);
        ValueId v;
        REQUIRE(rb->body.parameter(Span<const int64_t>(rb->param_shapes.back().data(), shape.size()), &v) == Status::Ok);
        values.push_back(v);
    }
    std::vector<SnippetOp> ops = computing_ops();
    for (int i = 0; i < ops_count; ++i) {
        SnippetOp op = ops[rng() % ops.size()];
        if (op == SnippetOp::PowerStatic) op = SnippetOp::Pow;
        uint32_t arity = snippet_op_arity(op);
        ValueId args[3];
        for (uint32_t a = 0; a < arity; ++a) {
            if (rng() % 6 == 0) {
                float scalar_values[] = {2.0f, 0.5f, -1.0f, 3.0f, 1.7f, 0.0f};
                REQUIRE(rb->body.scalar(scalar_values[rng() % 6], &args[a]) == Status::Ok);
            } else {
                args[a] = values[values.size() - 1 - rng() % std::min<size_t>(values.size(), 6)];
            }
        }
        float alpha, beta;
        snippet_op_default_attributes(op, &alpha, &beta);
        if (op == SnippetOp::Clip) { alpha = -2.0f; beta = 3.0f; }
        ValueId v;
        REQUIRE(rb->body.add(op, Span<const ValueId>(args, arity), alpha, beta, &v) == Status::Ok);
        values.push_back(v);
    }
    int results = 1 + (int)(rng() % 3);
    for (int r = 0; r < results; ++r) {
        ValueId v = r == 0 ? values.back() : values[params + rng() % (values.size() - params)];
        REQUIRE(rb->body.result(v) == Status::Ok);
        const SnippetShape& s = rb->body.instruction(v).shape;
        rb->result_sizes.push_back(shape_size(s));
    }
}

// Inputs for a random body (parameter p seeded seed + p), or false for the rare body whose
// results leave a parameter's axis out: results must broadcast to one domain and parameters
// into it, and compile rejects the others (tested elsewhere).
bool compilable_with_inputs(const RandomBody& rb, Isa isa, uint32_t seed, std::vector<std::vector<float>>* inputs) {
    Snippet probe;
    SnippetOptions options;
    options.isa = isa;
    Status s = probe.compile(rb.body, options);
    if (s == Status::InvalidArgument) return false;
    REQUIRE(s == Status::Ok);
    for (size_t p = 0; p < rb.param_shapes.size(); ++p)
        inputs->push_back(random_values(count(rb.param_shapes[p]), seed + (uint32_t)p, 2.0f));
    return true;
}
}  // namespace

TEST_CASE("snippets: random fused bodies equal the interpreter, with and without spills") {
    Isa isa = target();
    std::mt19937 rng(20261122);
    for (int trial = 0; trial < 60; ++trial) {
        RandomBody rb;
        make_random_body(&rb, rng, 4 + trial % 20);
        std::vector<std::vector<float>> inputs;
        if (!compilable_with_inputs(rb, isa, (uint32_t)trial * 31, &inputs)) continue;
        INFO("trial " << trial);
        for (uint32_t registers : {0u, 1u, 2u, 3u}) {
            INFO("max_registers " << registers);
            check_against_interpreter(rb.body, inputs, rb.result_sizes, isa, registers, trial % 2);
        }
    }
}

// Lanes (tiles in lockstep, AVX-512) and non-temporal stores change only the code shape: every
// op and random bodies stay bitwise equal, misaligned (the peel) and in place.
TEST_CASE("snippets: streaming stores and one to four lanes equal the interpreter") {
    Isa isa = target();
    if (isa == Isa::Ref) return;
    uint32_t w = isa_vector_floats(isa);
    for (SnippetOp op : computing_ops()) {
        uint32_t arity = snippet_op_arity(op);
        for (uint64_t n : {(uint64_t)1, (uint64_t)w - 1, (uint64_t)2 * w + 1, (uint64_t)4 * w + 3, (uint64_t)1000}) {
            Built b;
            build_op(&b.body, op, std::vector<std::vector<int64_t>>(arity, std::vector<int64_t>{(int64_t)n}));
            std::vector<std::vector<float>> inputs;
            for (uint32_t i = 0; i < arity; ++i) inputs.push_back(random_values(n, (uint32_t)(n * 5 + i + (int)op * 37), 8.0f));
            for (int variant = 0; variant < 8; ++variant) {
                uint8_t lanes = (uint8_t)(1 + variant % 4);
                INFO(op_name(op) << " n=" << n << " lanes " << (int)lanes << " variant " << variant);
                check_against_interpreter(b.body, inputs, {n}, isa, 0, variant >= 4 ? 3 : 0, variant >= 6, nullptr, StreamingStores::Always, lanes);
            }
        }
    }
    std::mt19937 rng(77);
    for (int trial = 0; trial < 30; ++trial) {
        RandomBody rb;
        make_random_body(&rb, rng, 4 + trial % 20);
        std::vector<std::vector<float>> inputs;
        if (!compilable_with_inputs(rb, isa, (uint32_t)trial * 13, &inputs)) continue;
        for (uint32_t registers : {0u, 2u})
            for (uint8_t lanes : {(uint8_t)1, (uint8_t)2, (uint8_t)3, (uint8_t)4}) {
                INFO("trial " << trial << " max_registers " << registers << " lanes " << (int)lanes);
                check_against_interpreter(rb.body, inputs, rb.result_sizes, isa, registers, trial % 2, false, nullptr, StreamingStores::Always, lanes);
            }
    }
    // The choice is reported: on AVX-512, three lanes for GeluErf in cache (a lane needs more
    // than the 8 registers of four) and two beyond the caches (three would leave fewer than 8
    // registers for pinned constants), four for Tanh (8 registers a lane), one when forced.
    Built big;
    build_op(&big.body, SnippetOp::GeluErf, {{1 << 22}});
    Snippet s;
    SnippetOptions options;
    options.isa = isa;
    REQUIRE(s.compile(big.body, options) == Status::Ok);
    CHECK(s.stats().lanes == (isa == Isa::Avx512 ? 2u : 1u));
    Built b;
    build_op(&b.body, SnippetOp::GeluErf, {{4096}});
    options.tuning.streaming_stores = StreamingStores::Always;
    REQUIRE(s.compile(b.body, options) == Status::Ok);
    CHECK(s.stats().lanes == (isa == Isa::Avx512 ? 3u : 1u));
    if (isa != Isa::Ref) {  // a cached kernel of the small shape is not taken for the large one
        KernelCache cache;
        SnippetOptions cached;
        cached.isa = isa;
        cached.cache = &cache;
        Snippet small_kernel, large_kernel;
        REQUIRE(small_kernel.compile(b.body, cached) == Status::Ok);
        REQUIRE(large_kernel.compile(big.body, cached) == Status::Ok);
        CHECK(!large_kernel.stats().cache_hit);
        CHECK(large_kernel.stats().lanes == (isa == Isa::Avx512 ? 2u : 1u));
        Snippet capped, free_lanes;   // nor a kernel whose lanes a caller capped for one without a cap
        cached.tuning.lanes = 2;
        REQUIRE(capped.compile(b.body, cached) == Status::Ok);
        cached.tuning.lanes = 0;
        REQUIRE(free_lanes.compile(b.body, cached) == Status::Ok);
        CHECK(capped.stats().lanes == (isa == Isa::Avx512 ? 2u : 1u));
        CHECK(free_lanes.stats().lanes == (isa == Isa::Avx512 ? 3u : 1u));
        CHECK(free_lanes.stats().cache_hit);   // the kernel small_kernel compiled
    }
    CHECK(s.stats().streaming_stores == (isa != Isa::Neon));
    options.tuning.lanes = 1;
    options.tuning.streaming_stores = StreamingStores::Never;
    REQUIRE(s.compile(b.body, options) == Status::Ok);
    CHECK(s.stats().lanes == 1u);
    CHECK(!s.stats().streaming_stores);
    Built t;
    build_op(&t.body, SnippetOp::Tanh, {{4096}});
    options.tuning.lanes = 0;
    REQUIRE(s.compile(t.body, options) == Status::Ok);
    CHECK(s.stats().lanes == (isa == Isa::Avx512 ? 4u : 1u));
    options.tuning.lanes = 3;
    REQUIRE(s.compile(t.body, options) == Status::Ok);
    CHECK(s.stats().lanes == (isa == Isa::Avx512 ? 3u : 1u));
    // Short rows: the lanes that walk a row in the fewest iterations (whole tiles, then one
    // partial tile per vector left over; ties to more lanes), unless the caller chose. Rows
    // of x + per-row value, n vectors long, with a partial vector in some.
    struct RowCase { int64_t floats; uint32_t lanes; };
    const RowCase rows[] = {{16, 1}, {20, 1}, {32, 2}, {48, 3}, {64, 4}, {80, 4}, {96, 3}, {112, 3}, {160, 4}, {768, 4}};
    for (const RowCase& c : rows) {
        const int64_t n = c.floats * (int64_t)isa_vector_floats(isa) / 16;  // the same vector counts on every target
        Built r;
        build_op(&r.body, SnippetOp::Add, {{5, n}, {5, 1}});
        std::vector<std::vector<float>> row_inputs = {random_values((uint64_t)(5 * n), (uint32_t)n, 4.0f), random_values(5, 3, 4.0f)};
        INFO("row of " << n << " floats");
        options.tuning.lanes = 0;
        options.tuning.streaming_stores = StreamingStores::Auto;
        REQUIRE(s.compile(r.body, options) == Status::Ok);
        CHECK(s.stats().lanes == (isa == Isa::Avx512 ? c.lanes : 1u));
        check_against_interpreter(r.body, row_inputs, {(uint64_t)(5 * n)}, isa);
        check_against_interpreter(r.body, row_inputs, {(uint64_t)(5 * n)}, isa, 0, 1);  // misaligned rows
        // With lanes, the row's value is loaded once per row into a register they share.
        CHECK(s.stats().shared_invariants == (s.stats().lanes > 1 ? 1u : 0u));
        options.tuning.lanes = 4;
        REQUIRE(s.compile(r.body, options) == Status::Ok);
        CHECK(s.stats().lanes == (isa == Isa::Avx512 ? 4u : 1u));
        CHECK(s.stats().shared_invariants == (isa == Isa::Avx512 ? 1u : 0u));
        check_against_interpreter(r.body, row_inputs, {(uint64_t)(5 * n)}, isa, 0, 1, false, nullptr, StreamingStores::Auto, 4);
        {   // served from a cache, the kernel still reports its shared register
            KernelCache cache;
            SnippetOptions cached = options;
            cached.cache = &cache;
            Snippet first, second;
            REQUIRE(first.compile(r.body, cached) == Status::Ok);
            REQUIRE(second.compile(r.body, cached) == Status::Ok);
            CHECK(second.stats().cache_hit);
            CHECK(second.stats().shared_invariants == (isa == Isa::Avx512 ? 1u : 0u));
            CHECK(second.stats().pinned_constants == first.stats().pinned_constants);
        }
    }
}

// A body over `params` parameters of shapes {rows, n} (full), {rows, 1} (one value per row,
// loaded once per row) and {1, n} (one row for all), folded into an accumulator, with
// `results` results along the way: past 11 arguments the kernel keeps the rest of its
// pointers in its frame ("cold"), those read once per row first.
void build_wide_body(SnippetBody* body, uint32_t params, uint32_t results, int64_t rows, int64_t n,
                     std::vector<std::vector<float>>* inputs, std::vector<uint64_t>* output_sizes) {
    const SnippetOp ops[] = {SnippetOp::Add, SnippetOp::Mul, SnippetOp::Sub, SnippetOp::Max};
    ValueId acc = kNoValue;
    uint32_t emitted = 0;
    for (uint32_t i = 0; i < params; ++i) {
        std::vector<int64_t> shape = i % 3 == 1 ? std::vector<int64_t>{rows, 1}
                                   : i % 3 == 2 ? std::vector<int64_t>{1, n} : std::vector<int64_t>{rows, n};
        if (i == 0) shape = {rows, n};
        ValueId p;
        REQUIRE(body->parameter(Span<const int64_t>(shape.data(), shape.size()), &p) == Status::Ok);
        inputs->push_back(random_values(count(shape), 100 + i, 1.5f));
        if (acc == kNoValue) { acc = p; continue; }
        REQUIRE(body->binary(ops[i % 4], acc, p, &acc) == Status::Ok);
        // Results spread over the chain, the last one at its end.
        if (emitted + 1 < results && i == (emitted + 1) * params / results) {
            REQUIRE(body->result(acc) == Status::Ok);
            output_sizes->push_back((uint64_t)(rows * n));
            ++emitted;
        }
    }
    for (; emitted < results; ++emitted) {
        REQUIRE(body->unary(SnippetOp::Tanh, acc, &acc) == Status::Ok);
        REQUIRE(body->result(acc) == Status::Ok);
        output_sizes->push_back((uint64_t)(rows * n));
    }
}

// Three and four lanes run as a software pipeline (emit_pipelined_tiles): the skewed lanes
// start the next tile while the others finish this one, across a prologue, the loop and an
// epilogue. Bitwise equal at every boundary between them, per row (a row starts the pipeline
// again), misaligned (the peel runs first) and in place; with a cold argument, lockstep.
TEST_CASE("snippets: lanes in a software pipeline equal the interpreter at every boundary") {
    Isa isa = target();
    if (isa == Isa::Ref) return;
    const uint64_t w = isa_vector_floats(isa);
    for (uint8_t lanes : {(uint8_t)2, (uint8_t)3, (uint8_t)4}) {
        const uint64_t t = w * lanes;   // floats per loop iteration
        for (uint64_t n : {(uint64_t)1, t - 1, t, t + 1, 2 * t - 1, 2 * t, 2 * t + 1, 3 * t + w + 1, 5 * t + 7}) {
            // Two bodies: Tanh alone (8 registers a lane: up to 4 lanes), and two results with
            // a per-row broadcast (a register more: up to 3).
            for (int rich = 0; rich < 2; ++rich) {
                Built b;
                const int64_t rows = 2;
                int64_t full[] = {rows, (int64_t)n}, per_row[] = {rows, 1};
                ValueId x, scale, one, tanh, gated, erf;
                REQUIRE(b.body.parameter(full, &x) == Status::Ok);
                std::vector<std::vector<float>> inputs = {random_values(rows * n, (uint32_t)n * 3 + lanes, 4.0f)};
                std::vector<uint64_t> sizes = {rows * n};
                if (rich) {
                    REQUIRE(b.body.parameter(per_row, &scale) == Status::Ok);
                    REQUIRE(b.body.scalar(1.0f, &one) == Status::Ok);
                    REQUIRE(b.body.binary(SnippetOp::Mul, x, scale, &tanh) == Status::Ok);
                    REQUIRE(b.body.unary(SnippetOp::Tanh, tanh, &tanh) == Status::Ok);
                    REQUIRE(b.body.binary(SnippetOp::Add, tanh, one, &gated) == Status::Ok);
                    REQUIRE(b.body.binary(SnippetOp::Mul, gated, x, &gated) == Status::Ok);
                    REQUIRE(b.body.binary(SnippetOp::Sub, x, scale, &erf) == Status::Ok);
                    REQUIRE(b.body.unary(SnippetOp::Erf, erf, &erf) == Status::Ok);
                    REQUIRE(b.body.result(gated) == Status::Ok);
                    REQUIRE(b.body.result(erf) == Status::Ok);
                    inputs.push_back(random_values(rows, (uint32_t)n + 11, 2.0f));
                    sizes.push_back(rows * n);
                } else {
                    REQUIRE(b.body.unary(SnippetOp::Tanh, x, &tanh) == Status::Ok);
                    REQUIRE(b.body.result(tanh) == Status::Ok);
                }
                INFO("lanes " << (int)lanes << " n " << n << " rich " << rich);
                for (size_t offset : {(size_t)0, (size_t)1}) {
                    check_against_interpreter(b.body, inputs, sizes, isa, 0, offset, false, nullptr, StreamingStores::Auto, lanes);
                    check_against_interpreter(b.body, inputs, sizes, isa, 0, offset, true, nullptr, StreamingStores::Auto, lanes);
                }
                check_against_interpreter(b.body, inputs, sizes, isa, 0, 0, false, nullptr, StreamingStores::Always, lanes);   // non-temporal
                Snippet s;
                SnippetOptions options;
                options.isa = isa;
                options.tuning.lanes = lanes;
                REQUIRE(s.compile(b.body, options) == Status::Ok);
                const uint32_t expected = isa != Isa::Avx512 ? 1u : rich && lanes == 4 ? 3u : lanes;
                CHECK(s.stats().lanes == expected);
                CHECK(s.stats().software_pipelined == (expected >= 3));
            }
        }
    }
    if (isa != Isa::Avx512) return;
    // Beyond 4 MiB a run gets 3 lanes only when a lane needs at most 8 registers (Tanh), so
    // that 8 remain for pinned constants; the GeluTanh op (10) keeps 2 in lockstep.
    for (SnippetOp op : {SnippetOp::Tanh, SnippetOp::GeluTanh}) {
        for (int64_t n : {(int64_t)4096, (int64_t)1 << 20}) {
            Built big;
            build_op(&big.body, op, {{n}});
            Snippet s;
            SnippetOptions options;
            options.isa = isa;
            REQUIRE(s.compile(big.body, options) == Status::Ok);
            INFO(op_name(op) << " n " << n);
            CHECK(s.stats().lanes == (op == SnippetOp::Tanh ? (n == 4096 ? 4u : 3u) : n == 4096 ? 3u : 2u));
            CHECK(s.stats().software_pipelined == (s.stats().lanes >= 3));
        }
    }
    // Past 11 arguments a tile loads cold pointers outside the recorded instructions: lockstep.
    Built wide;
    std::vector<std::vector<float>> inputs;
    std::vector<uint64_t> sizes;
    build_wide_body(&wide.body, 12, 1, 2, 200, &inputs, &sizes);
    check_against_interpreter(wide.body, inputs, sizes, isa, 0, 1, false, nullptr, StreamingStores::Auto, 4);
    Snippet s;
    SnippetOptions options;
    options.isa = isa;
    options.tuning.lanes = 4;
    REQUIRE(s.compile(wide.body, options) == Status::Ok);
    CHECK(s.stats().cold_arguments == 3u);
    CHECK(s.stats().lanes == 4u);
    CHECK(!s.stats().software_pipelined);
}

// Page lanes (emit_page_blocks): while a row has a 4 KiB page per lane left, lane k walks
// page k of the block. Bitwise equal just below, at and past a block, over several blocks
// and the rest after them, per row (each row starts its blocks again), misaligned (the peel
// first) and in place, non-temporal or not; pipelined (3 and 4 lanes), in lockstep (2 lanes,
// and a wide body whose cold pointers keep it out of the pipeline).
TEST_CASE("snippets: lanes on different pages equal the interpreter") {
    Isa isa = target();
    if (isa == Isa::Ref) return;
    for (uint8_t lanes : {(uint8_t)2, (uint8_t)3, (uint8_t)4}) {
        const uint64_t block = 1024 * lanes;   // floats in a block of pages
        for (uint64_t n : {block - 1, block, block + 1, 2 * block + 16 * lanes + 5, 3 * block + 1023}) {
            Built b;
            const int64_t rows = 2;
            int64_t full[] = {rows, (int64_t)n}, per_row[] = {rows, 1};
            ValueId x, scale, y;
            REQUIRE(b.body.parameter(full, &x) == Status::Ok);
            REQUIRE(b.body.parameter(per_row, &scale) == Status::Ok);
            REQUIRE(b.body.binary(SnippetOp::Mul, x, scale, &y) == Status::Ok);
            REQUIRE(b.body.unary(SnippetOp::Tanh, y, &y) == Status::Ok);
            REQUIRE(b.body.binary(SnippetOp::Add, y, x, &y) == Status::Ok);
            REQUIRE(b.body.result(y) == Status::Ok);
            std::vector<std::vector<float>> inputs = {random_values(rows * n, (uint32_t)n + lanes, 4.0f),
                                                      random_values(rows, (uint32_t)n + 5, 2.0f)};
            INFO("lanes " << (int)lanes << " n " << n);
            for (size_t offset : {(size_t)0, (size_t)1})
                for (StreamingStores streaming : {StreamingStores::Never, StreamingStores::Always}) {
                    check_against_interpreter(b.body, inputs, {rows * n}, isa, 0, offset, false, nullptr, streaming, lanes, PageLanes::Always);
                    check_against_interpreter(b.body, inputs, {rows * n}, isa, 0, offset, true, nullptr, streaming, lanes, PageLanes::Always);
                }
            Snippet s;
            SnippetOptions options;
            options.isa = isa;
            options.tuning.lanes = lanes;
            options.tuning.page_lanes = PageLanes::Always;
            REQUIRE(s.compile(b.body, options) == Status::Ok);
            CHECK(s.stats().page_lanes == (isa == Isa::Avx512));
            CHECK(s.stats().page_prefetch == (isa == Isa::Avx512));   // tanh: the next block is prefetched
            CHECK(s.stats().software_pipelined == (isa == Isa::Avx512 && lanes >= 3));
        }
    }
    Built wide;   // 12 arguments: cold pointers, lockstep
    std::vector<std::vector<float>> inputs;
    std::vector<uint64_t> sizes;
    build_wide_body(&wide.body, 12, 1, 2, 3 * 4096 + 100, &inputs, &sizes);
    for (size_t offset : {(size_t)0, (size_t)1})
        check_against_interpreter(wide.body, inputs, sizes, isa, 0, offset, false, nullptr, StreamingStores::Always, 4, PageLanes::Always);
    // By default page lanes come with non-temporal stores (compiled, not run: 384 MiB).
    Built big;
    build_op(&big.body, SnippetOp::Add, {{1 << 25}, {1 << 25}});
    Snippet s;
    SnippetOptions options;
    options.isa = isa;
    REQUIRE(s.compile(big.body, options) == Status::Ok);
    CHECK(s.stats().streaming_stores == (isa != Isa::Neon));
    CHECK(s.stats().page_lanes == (isa == Isa::Avx512));
    CHECK(!s.stats().page_prefetch);   // memory-bound: no prefetches
    options.tuning.page_lanes = PageLanes::Never;
    REQUIRE(s.compile(big.body, options) == Status::Ok);
    CHECK(!s.stats().page_lanes);
    // A transcendental body streams only in page lanes: blocks of pages (rows of 3072 floats
    // or more) or row groups (48 rows a kernel call or more).
    for (int64_t row : {(int64_t)4096, (int64_t)1024}) {
        for (int64_t rows : {(int64_t)0, (int64_t)40}) {
            Built gelu;   // x times a per-row value: the rows stay rows (no collapse)
            ValueId x, scale, y;
            if (rows == 0) {          // (1 << 25) / row rows a call
                int64_t full[] = {(1 << 25) / row, row}, per_row[] = {(1 << 25) / row, 1};
                REQUIRE(gelu.body.parameter(full, &x) == Status::Ok);
                REQUIRE(gelu.body.parameter(per_row, &scale) == Status::Ok);
            } else {                  // 40 rows a call: a per-row value shared by the outer dimension
                int64_t full[] = {(1 << 25) / row / rows, rows, row}, per_row[] = {rows, 1};
                REQUIRE(gelu.body.parameter(full, &x) == Status::Ok);
                REQUIRE(gelu.body.parameter(per_row, &scale) == Status::Ok);
            }
            REQUIRE(gelu.body.binary(SnippetOp::Mul, x, scale, &y) == Status::Ok);
            REQUIRE(gelu.body.unary(SnippetOp::GeluTanh, y, &y) == Status::Ok);
            REQUIRE(gelu.body.result(y) == Status::Ok);
            for (PageLanes page : {PageLanes::Auto, PageLanes::Never}) {
                options.tuning.page_lanes = page;
                REQUIRE(s.compile(gelu.body, options) == Status::Ok);
                INFO("row " << row << " rows " << rows << " page_lanes " << (page == PageLanes::Auto ? "auto" : "never"));
                const bool expected = isa == Isa::Avx512 && (row == 4096 || rows == 0) && page == PageLanes::Auto;
                CHECK(s.stats().streaming_stores == expected);
                CHECK(s.stats().page_lanes == expected);
                CHECK(s.stats().row_groups == (expected && row == 1024));
            }
        }
    }
}

// Row groups: rows shorter than a block of pages, lane k on rows 16k.. of each group of
// lanes * 16 rows, with its own row values (mean, a per-row scale) and the shared column
// values (gamma); a compare and select exercise each lane's masks in the partial tiles.
void build_row_group_body(SnippetBody* body, int64_t rows, int64_t n) {
    int64_t full[] = {rows, n}, per_row[] = {rows, 1}, per_column[] = {n};
    ValueId x, mean, scale, gamma, centred, scaled, above, y;
    REQUIRE(body->parameter(full, &x) == Status::Ok);
    REQUIRE(body->parameter(per_row, &mean) == Status::Ok);
    REQUIRE(body->parameter(per_row, &scale) == Status::Ok);
    REQUIRE(body->parameter(per_column, &gamma) == Status::Ok);
    REQUIRE(body->binary(SnippetOp::Sub, x, mean, &centred) == Status::Ok);
    REQUIRE(body->binary(SnippetOp::Mul, centred, scale, &scaled) == Status::Ok);
    REQUIRE(body->binary(SnippetOp::Mul, scaled, gamma, &scaled) == Status::Ok);
    REQUIRE(body->binary(SnippetOp::Greater, x, mean, &above) == Status::Ok);
    REQUIRE(body->select(above, scaled, centred, &y) == Status::Ok);
    REQUIRE(body->result(y) == Status::Ok);
}

TEST_CASE("snippets: lanes on different row groups equal the interpreter") {
    Isa isa = target();
    if (isa == Isa::Ref) return;
    KernelCache cache;   // one cache for every shape: a kernel's row strides and row-group decision are part of its key
    for (uint8_t lanes : {(uint8_t)2, (uint8_t)3, (uint8_t)4}) {
        const int64_t group = 16 * lanes;
        for (int64_t rows : {group - 1, group, group + 5, 2 * group + 17})
            for (int64_t n : {(int64_t)1, (int64_t)16, (int64_t)17, (int64_t)33, (int64_t)768, (int64_t)1000}) {
                Built b;
                build_row_group_body(&b.body, rows, n);
                std::vector<std::vector<float>> inputs = {
                    random_values((size_t)(rows * n), (uint32_t)(rows * 7 + n), 4.0f), random_values((size_t)rows, (uint32_t)n + 1, 1.0f),
                    random_values((size_t)rows, (uint32_t)n + 2, 2.0f), random_values((size_t)n, (uint32_t)rows + 3, 2.0f)};
                INFO("lanes " << (int)lanes << " rows " << rows << " n " << n);
                const uint64_t size = (uint64_t)(rows * n);
                for (size_t offset : {(size_t)0, (size_t)1})
                    for (StreamingStores streaming : {StreamingStores::Never, StreamingStores::Always}) {
                        check_against_interpreter(b.body, inputs, {size}, isa, 0, offset, false, &cache, streaming, lanes, PageLanes::Always);
                        check_against_interpreter(b.body, inputs, {size}, isa, 0, offset, true, &cache, streaming, lanes, PageLanes::Always);
                    }
                check_against_interpreter(b.body, inputs, {size}, isa, 3, 1, false, nullptr, StreamingStores::Always, lanes, PageLanes::Always);   // spills
                Snippet s;
                SnippetOptions options;
                options.isa = isa;
                options.tuning.lanes = lanes;
                options.tuning.page_lanes = PageLanes::Always;
                const bool grouped = isa == Isa::Avx512 && rows >= group && n >= 16;
                REQUIRE(s.compile(b.body, options) == Status::Ok);
                CHECK(s.stats().row_groups == grouped);
                options.cache = &cache;   // what the runs above got from the cache
                for (StreamingStores streaming : {StreamingStores::Never, StreamingStores::Always}) {
                    Snippet cached;
                    options.tuning.streaming_stores = streaming;
                    REQUIRE(cached.compile(b.body, options) == Status::Ok);
                    CHECK(cached.stats().cache_hit);
                    CHECK(cached.stats().row_groups == grouped);
                }
                options.cache = nullptr;
                options.tuning.streaming_stores = StreamingStores::Auto;
                if (rows < group || n != 33) continue;
                // Run in 2 parts, as the runtime's threads do: 2 * group + 17 rows leave each
                // part a group and more.
                std::vector<float> expected(size), actual(size, -7.0f);
                std::vector<const float*> in;
                for (const std::vector<float>& v : inputs) in.push_back(v.data());
                float* expected_ptr = expected.data();
                float* actual_ptr = actual.data();
                REQUIRE(interpret(b.body, Span<const float* const>(in.data(), in.size()), Span<float* const>(&expected_ptr, 1),
                                  isa_uses_fma(isa)) == Status::Ok);
                for (uint32_t part = 0; part < 2; ++part)
                    REQUIRE(s.run(Span<const float* const>(in.data(), in.size()), Span<float* const>(&actual_ptr, 1), nullptr,
                                  part, 2) == Status::Ok);
                size_t bad = 0;
                for (size_t i = 0; i < size; ++i) bad += !same(actual[i], expected[i]);
                CHECK(bad == 0);
            }
    }
    // By default row groups come with non-temporal stores: the layer-norm tail of the bench
    // (compiled, not run: 256 MiB).
    Built tail;
    build_row_group_body(&tail.body, (1 << 24) / 768, 768);
    Snippet s;
    SnippetOptions options;
    options.isa = isa;
    REQUIRE(s.compile(tail.body, options) == Status::Ok);
    CHECK(s.stats().row_groups == (isa == Isa::Avx512 && s.stats().lanes >= 2));
    CHECK(s.stats().streaming_stores == (isa != Isa::Neon));
    options.tuning.page_lanes = PageLanes::Never;
    REQUIRE(s.compile(tail.body, options) == Status::Ok);
    CHECK(!s.stats().row_groups);
}

void check_parts(const SnippetBody& body, const std::vector<std::vector<float>>& inputs, const std::vector<uint64_t>& result_sizes, Isa isa);

TEST_CASE("snippets: short rows run as straight code and equal the interpreter") {
    Isa isa = target();
    if (isa != Isa::Sse41 && isa != Isa::Avx2 && isa != Isa::Avx512) return;   // the x86 emitter's path
    const int64_t w = isa_vector_floats(isa);
    KernelCache cache;   // a short-row kernel's row length and strides are part of its key
    for (int64_t n = 1; n <= 4 * w + 1; ++n)
        for (int64_t rows : {(int64_t)1, (int64_t)2, (int64_t)5}) {
            Built b;
            build_row_group_body(&b.body, rows, n);   // per-row and per-column values, a compare, a select
            std::vector<std::vector<float>> inputs = {
                random_values((size_t)(rows * n), (uint32_t)(rows * 5 + n), 4.0f), random_values((size_t)rows, (uint32_t)n + 1, 1.0f),
                random_values((size_t)rows, (uint32_t)n + 2, 2.0f), random_values((size_t)n, (uint32_t)rows + 3, 2.0f)};
            INFO("rows " << rows << " n " << n);
            const uint64_t size = (uint64_t)(rows * n);
            for (size_t offset : {(size_t)0, (size_t)1})
                for (bool in_place : {false, true}) check_against_interpreter(b.body, inputs, {size}, isa, 0, offset, in_place, &cache);
            check_against_interpreter(b.body, inputs, {size}, isa, 3, 1);   // spills
            check_parts(b.body, inputs, {size}, isa);   // 1 row: column slices, shorter than the compiled rows
            Snippet s;
            SnippetOptions options;
            options.isa = isa;
            REQUIRE(s.compile(b.body, options) == Status::Ok);
            CHECK(s.stats().short_rows == (n <= 4 * w && n <= 35));   // at most 4 vectors, and never a row the peel takes
            options.tuning.streaming_stores = StreamingStores::Always;   // non-temporal stores keep the loop (and its peel)
            REQUIRE(s.compile(b.body, options) == Status::Ok);
            CHECK(!s.stats().short_rows);
        }
    // A short-row kernel serves any row count of its row length and strides: 4 rows hit the
    // kernels compiled above for 1, 2 and 5.
    for (int64_t n : {(int64_t)3, (int64_t)5, (int64_t)3}) {
        Built b;
        build_row_group_body(&b.body, 4, n);
        Snippet s;
        SnippetOptions options;
        options.isa = isa;
        options.cache = &cache;
        const uint32_t hits = cache.hits();
        REQUIRE(s.compile(b.body, options) == Status::Ok);
        CHECK(s.stats().short_rows);
        CHECK(cache.hits() == hits + 1);
    }
    // The same program over other strides: y broadcast over the rows, then over the outer
    // dimension. The immediates that move the pointers differ, so the kernels must too, in
    // short rows and in the loop.
    for (int64_t n : {(int64_t)5, (int64_t)100})
        for (const std::vector<int64_t>& y_shape : {std::vector<int64_t>{2, 1, n}, std::vector<int64_t>{1, 3, n}}) {
            Built b;
            build_op(&b.body, SnippetOp::Sub, {{2, 3, n}, y_shape});
            INFO("y " << y_shape[0] << "x" << y_shape[1] << "x" << y_shape[2]);
            check_against_interpreter(b.body, {random_values((size_t)(6 * n), 1), random_values(count(y_shape), 2)}, {(uint64_t)(6 * n)},
                                      isa, 0, 0, false, &cache);
        }
}

TEST_CASE("snippets: a streaming kernel's in-place twin (ordinary stores) equals the interpreter") {
    Isa isa = target();
    if (isa == Isa::Ref) return;
    const bool streams = isa != Isa::Neon;
    for (int64_t rows : {(int64_t)1, (int64_t)97}) {
        for (int64_t n : {(int64_t)37, (int64_t)5000}) {
            Built b;   // GELU(tanh) of x times a per-row value, then plus x
            int64_t full[] = {rows, n}, per_row[] = {rows, 1};
            ValueId x, scale, y;
            REQUIRE(b.body.parameter(full, &x) == Status::Ok);
            REQUIRE(b.body.parameter(per_row, &scale) == Status::Ok);
            REQUIRE(b.body.binary(SnippetOp::Mul, x, scale, &y) == Status::Ok);
            REQUIRE(b.body.unary(SnippetOp::GeluTanh, y, &y) == Status::Ok);
            REQUIRE(b.body.binary(SnippetOp::Add, y, x, &y) == Status::Ok);
            REQUIRE(b.body.result(y) == Status::Ok);
            std::vector<std::vector<float>> inputs = {random_values((size_t)(rows * n), (uint32_t)(rows + n), 4.0f),
                                                      random_values((size_t)rows, 7, 2.0f)};
            INFO("rows " << rows << " n " << n);
            for (size_t offset : {(size_t)0, (size_t)3})
                for (bool in_place : {false, true})
                    for (uint8_t lanes : {(uint8_t)0, (uint8_t)3, (uint8_t)4})
                        check_against_interpreter(b.body, inputs, {(uint64_t)(rows * n)}, isa, 0, offset, in_place, nullptr, StreamingStores::AlwaysWithInPlaceTwin,
                                                  lanes);
            Snippet s;
            SnippetOptions options;
            options.isa = isa;
            options.tuning.streaming_stores = StreamingStores::AlwaysWithInPlaceTwin;   // which kernel run() takes
            REQUIRE(s.compile(b.body, options) == Status::Ok);
            std::vector<float> other(inputs[0].size());
            const float* in[] = {inputs[0].data(), inputs[1].data()};
            float* apart[] = {other.data()};
            float* over[] = {const_cast<float*>(inputs[0].data())};
            CHECK(!s.takes_in_place_kernel(in, apart));
            CHECK(s.takes_in_place_kernel(in, over) == streams);
            for (StreamingStores streaming : {StreamingStores::Never, StreamingStores::Always, StreamingStores::AlwaysWithInPlaceTwin}) {
                options.tuning.streaming_stores = streaming;
                REQUIRE(s.compile(b.body, options) == Status::Ok);
                CHECK(s.stats().streaming_stores == (streams && streaming != StreamingStores::Never));
                CHECK(s.stats().in_place_kernel == (streams && streaming == StreamingStores::AlwaysWithInPlaceTwin));
            }
        }
    }
    // No parameter of the output's shape: no run can be in place, no twin.
    Built broadcast;
    build_op(&broadcast.body, SnippetOp::Add, {{64, 1}, {1, 64}});
    Snippet s;
    SnippetOptions options;
    options.isa = isa;
    options.tuning.streaming_stores = StreamingStores::AlwaysWithInPlaceTwin;
    REQUIRE(s.compile(broadcast.body, options) == Status::Ok);
    CHECK(s.stats().streaming_stores == streams);
    CHECK(!s.stats().in_place_kernel);
    // By default, where a kernel streams (compiled, not run: 384 MiB); a cache hit keeps it.
    Built big;
    build_op(&big.body, SnippetOp::Add, {{1 << 25}, {1 << 25}});
    KernelCache cache;
    options.tuning.streaming_stores = StreamingStores::Auto;
    options.cache = &cache;
    for (int pass = 0; pass < 2; ++pass) {
        Snippet cached;   // (a snippet must not outlive its cache)
        REQUIRE(cached.compile(big.body, options) == Status::Ok);
        CHECK(cached.stats().cache_hit == (pass == 1));
        CHECK(cached.stats().in_place_kernel == streams);
    }
}

TEST_CASE("snippets: wide bodies, up to 32 arguments with cold pointers, equal the interpreter") {
    Isa isa = target();
    const uint32_t w = isa_vector_floats(isa);
    const uint32_t shapes[][2] = {{10, 1}, {11, 1}, {10, 2}, {12, 1}, {17, 3}, {24, 8}, {31, 1}, {30, 2}};
    for (const auto& pr : shapes) {
        for (int64_t n : {(int64_t)1, (int64_t)w - 1 > 0 ? (int64_t)w - 1 : 1, (int64_t)2 * w + 1, (int64_t)37, (int64_t)1000}) {
            Built b;
            std::vector<std::vector<float>> inputs;
            std::vector<uint64_t> sizes;
            build_wide_body(&b.body, pr[0], pr[1], 3, n, &inputs, &sizes);
            REQUIRE(b.body.parameter_count() + b.body.result_count() == pr[0] + pr[1]);
            INFO("parameters " << pr[0] << " results " << pr[1] << " n " << n);
            check_against_interpreter(b.body, inputs, sizes, isa);
            check_against_interpreter(b.body, inputs, sizes, isa, 0, 1);            // misaligned (the peel)
            check_against_interpreter(b.body, inputs, sizes, isa, 0, 0, true);      // result 0 over parameter 0
            check_against_interpreter(b.body, inputs, sizes, isa, 2);               // spills as well
            check_against_interpreter(b.body, inputs, sizes, isa, 0, 0, false, nullptr, StreamingStores::Always);   // non-temporal stores
            if (isa != Isa::Ref) {
                Snippet s;
                SnippetOptions options;
                options.isa = isa;
                REQUIRE(s.compile(b.body, options) == Status::Ok);
                const uint32_t args = pr[0] + pr[1], keep = isa == Isa::Neon ? 11 : 10;
                CHECK(s.stats().cold_arguments == (args > 11 ? args - keep : 0));
            }
            if (isa == Isa::Avx512)
                for (uint8_t lanes : {1, 4}) check_against_interpreter(b.body, inputs, sizes, isa, 0, 3, false, nullptr, StreamingStores::Always, lanes);
        }
    }
}

TEST_CASE("snippets: table lookups stay exact when many values are live (NEON's tbx fallback)") {
    // 21 values live across an Erf and a Tanh; on NEON, then, the four-step lookup path on
    // its own (SnippetTuning::neon_table_registers = false).
    Isa isa = target();
    if (isa == Isa::Ref) return;
    Built b;
    int64_t shape[] = {41};
    ValueId x, v[21], e, acc;
    REQUIRE(b.body.parameter(shape, &x) == Status::Ok);
    for (int i = 0; i < 21; ++i) {
        ValueId k;
        REQUIRE(b.body.scalar(0.25f * (float)(i + 1), &k) == Status::Ok);
        REQUIRE(b.body.binary(SnippetOp::Mul, x, k, &v[i]) == Status::Ok);
    }
    REQUIRE(b.body.unary(SnippetOp::Erf, x, &e) == Status::Ok);
    REQUIRE(b.body.unary(SnippetOp::Tanh, e, &acc) == Status::Ok);
    for (int i = 0; i < 21; ++i) REQUIRE(b.body.binary(i % 2 ? SnippetOp::Sub : SnippetOp::Add, acc, v[i], &acc) == Status::Ok);
    REQUIRE(b.body.result(acc) == Status::Ok);
    check_against_interpreter(b.body, {random_values(41, 21)}, {41}, isa);
    if (isa != Isa::Neon) return;
    // And the four-step path on its own, for every op that looks tables up.
    for (SnippetOp op : {SnippetOp::Erf, SnippetOp::Tanh}) {
        Built one;
        build_op(&one.body, op, {{1031}});
        std::vector<float> in = random_values(1031, 5), expected(1031), got(1031);
        const float* ins[] = {in.data()};
        float* want[] = {expected.data()};
        float* outs[] = {got.data()};
        REQUIRE(interpret(one.body, ins, want, true) == Status::Ok);
        Snippet s;
        SnippetOptions options;
        options.isa = isa;
        options.tuning.neon_table_registers = false;
        REQUIRE(s.compile(one.body, options) == Status::Ok);
        CHECK(s.stats().saved_vector_registers == 0);   // v12-v15 untouched
        REQUIRE(s.run(ins, outs) == Status::Ok);
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) bad += !same(got[i], expected[i]);
        CHECK(bad == 0);
    }
}

TEST_CASE("snippets: spilling happens under register pressure and stays exact") {
    Isa isa = target();
    if (isa == Isa::Ref) return;
    Built b;
    int64_t shape[] = {67};
    ValueId x, v[12], acc;
    REQUIRE(b.body.parameter(shape, &x) == Status::Ok);
    for (int i = 0; i < 12; ++i) {  // twelve values live at once, combined at the end
        ValueId k;
        REQUIRE(b.body.scalar(1.0f + (float)i, &k) == Status::Ok);
        REQUIRE(b.body.binary(SnippetOp::Mul, x, k, &v[i]) == Status::Ok);
    }
    acc = v[0];
    for (int i = 1; i < 12; ++i) REQUIRE(b.body.binary(i % 2 ? SnippetOp::Sub : SnippetOp::Add, v[i], acc, &acc) == Status::Ok);
    REQUIRE(b.body.result(acc) == Status::Ok);
    Snippet s;
    SnippetOptions options;
    options.isa = isa;
    options.tuning.max_registers = 2;
    REQUIRE(s.compile(b.body, options) == Status::Ok);
    CHECK(s.stats().spilled_values > 0);
    CHECK(s.stats().registers_used <= 2);
    check_against_interpreter(b.body, {random_values(67, 9)}, {67}, isa, 2);
    options.tuning.max_registers = 0;
    REQUIRE(s.compile(b.body, options) == Status::Ok);
    if (isa == Isa::Avx512) CHECK(s.stats().spilled_values == 0);
}

using reference_math::reference;
using reference_math::ulp_error;

// math_tanh picks its polynomial by the quarter binade of |x| + 1, and that sum rounds: just
// below an interval's lower edge t + 1 can round up into the next interval. The 64 floats on
// each side of every edge (both signs), the clamp at 9.1, where tanh rounds to 1, tiny and
// special values: within the bound of double tanh, and the same bits as the interpreter.
TEST_CASE("snippets: tanh at every edge of its intervals") {
    const float edges[] = {0.25f, 0.5f, 0.75f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 9.0f, 9.1f, 9.010914f};
    std::vector<float> in;
    for (float edge : edges) {
        float below = edge, above = edge;
        for (int i = 0; i < 64; ++i) {
            below = std::nextafter(below, 0.0f);
            above = std::nextafter(above, 100.0f);
            for (float v : {below, above}) { in.push_back(v); in.push_back(-v); }
        }
        in.push_back(edge);
        in.push_back(-edge);
    }
    for (float v : {1e-45f, 1e-38f, 1e-30f, 1e-10f, 1e-4f, 0.125f, 20.0f, 3.4e38f}) { in.push_back(v); in.push_back(-v); }
    const size_t finite = in.size();
    for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN}) in.push_back(v);
    const Isa isa = target();
    Built b;
    build_op(&b.body, SnippetOp::Tanh, {{(int64_t)in.size()}});
    std::vector<float> out(in.size()), ref(in.size());
    Snippet jit, interpreter;
    SnippetOptions options;
    options.isa = isa;
    REQUIRE(jit.compile(b.body, options) == Status::Ok);
    options.isa = Isa::Ref;
    options.tuning.reference_fma = isa_uses_fma(isa);
    REQUIRE(interpreter.compile(b.body, options) == Status::Ok);
    const float* ins[] = {in.data()};
    float* outs[] = {out.data()};
    float* refs[] = {ref.data()};
    REQUIRE(jit.run(ins, outs) == Status::Ok);
    REQUIRE(interpreter.run(ins, refs) == Status::Ok);
    double worst = 0;
    for (size_t i = 0; i < in.size(); ++i) {
        INFO("x = " << in[i] << " (" << std::string(isa_name(isa)) << ")");
        CHECK(same(out[i], ref[i]));
        if (i < finite) worst = std::max(worst, ulp_error(out[i], std::tanh((double)in[i])));
    }
    CHECK(worst <= snippet_op_ulp_bound(SnippetOp::Tanh, isa_uses_fma(isa)));
    const size_t k = finite;
    CHECK(out[k] == 0.0f); CHECK(!std::signbit(out[k]));
    CHECK(out[k + 1] == 0.0f); CHECK(std::signbit(out[k + 1]));
    CHECK(out[k + 2] == 1.0f);
    CHECK(out[k + 3] == -1.0f);
    CHECK(std::isnan(out[k + 4]));
    CHECK(std::fabs(out[finite - 1]) == 1.0f);  // -3.4e38
}

TEST_CASE("snippets: accuracy of every approximation against double precision") {
    struct Sweep { SnippetOp op; float lo, hi; };
    // The GELU sweeps reach far into the tail where the results are denormal.
    const Sweep sweeps[] = {
        {SnippetOp::Exp, -104.0f, 89.0f}, {SnippetOp::Tanh, -10.0f, 10.0f},
        {SnippetOp::Sigmoid, -100.0f, 100.0f}, {SnippetOp::Erf, -6.0f, 6.0f},
        {SnippetOp::GeluErf, -20.0f, 10.0f}, {SnippetOp::GeluTanh, -20.0f, 10.0f},
        {SnippetOp::Swish, -80.0f, 80.0f}, {SnippetOp::Softplus, -20.0f, 20.0f},
        {SnippetOp::Mish, -20.0f, 20.0f}, {SnippetOp::Elu, -10.0f, 10.0f}, {SnippetOp::Selu, -10.0f, 10.0f},
        {SnippetOp::HardSwish, -10.0f, 10.0f}, {SnippetOp::HardSigmoid, -10.0f, 10.0f},
        {SnippetOp::Softsign, -100.0f, 100.0f},
    };
    const size_t n = 200003;
    Isa isa = target();
    for (const Sweep& sweep : sweeps) {
        std::vector<float> in(n), out(n);
        for (size_t i = 0; i < n; ++i) in[i] = sweep.lo + (sweep.hi - sweep.lo) * (float)((double)i / (n - 1));
        Built b;
        build_op(&b.body, sweep.op, {{(int64_t)n}});
        Snippet s;
        SnippetOptions options;
        options.isa = isa;
        REQUIRE(s.compile(b.body, options) == Status::Ok);
        const float* ins[] = {in.data()};
        float* outs[] = {out.data()};
        REQUIRE(s.run(ins, outs) == Status::Ok);
        double worst = 0;
        float at = 0;
        for (size_t i = 0; i < n; ++i) {
            double e = ulp_error(out[i], reference(sweep.op, in[i]));
            if (e > worst) { worst = e; at = in[i]; }
        }
        MESSAGE(std::string(snippet_op_name(sweep.op)) << " max " << worst << " ulp at " << at << " (" << std::string(isa_name(isa)) << ")");
        CHECK(worst <= snippet_op_ulp_bound(sweep.op, isa_uses_fma(isa)));
    }
    // log over every exponent: a strided walk through all positive float bit patterns.
    std::vector<float> in, out;
    for (uint32_t bits = 1; bits < 0x7f800000u; bits += 4099) in.push_back(test_bits_to_float(bits));
    out.resize(in.size());
    Built b;
    build_op(&b.body, SnippetOp::Log, {{(int64_t)in.size()}});
    Snippet s;
    SnippetOptions options;
    options.isa = isa;
    REQUIRE(s.compile(b.body, options) == Status::Ok);
    const float* ins[] = {in.data()};
    float* outs[] = {out.data()};
    REQUIRE(s.run(ins, outs) == Status::Ok);
    double worst = 0;
    for (size_t i = 0; i < in.size(); ++i) worst = std::max(worst, ulp_error(out[i], std::log((double)in[i])));
    MESSAGE("Log max " << worst << " ulp over all exponents");
    CHECK(worst <= snippet_op_ulp_bound(SnippetOp::Log, isa_uses_fma(isa)));
    // Special values of exp and log.
    float specials[] = {0.0f, -0.0f, -1.0f, INFINITY, -INFINITY, NAN};
    float logs[6], exps[6];
    const float* sp[] = {specials};
    float* lo[] = {logs};
    float* eo[] = {exps};
    Built bl, be;
    build_op(&bl.body, SnippetOp::Log, {{6}});
    build_op(&be.body, SnippetOp::Exp, {{6}});
    REQUIRE(s.compile(bl.body, options) == Status::Ok);
    REQUIRE(s.run(sp, lo) == Status::Ok);
    CHECK(logs[0] == -INFINITY);
    CHECK(logs[1] == -INFINITY);
    CHECK(std::isnan(logs[2]));
    CHECK(logs[3] == INFINITY);
    CHECK(std::isnan(logs[4]));
    CHECK(std::isnan(logs[5]));
    REQUIRE(s.compile(be.body, options) == Status::Ok);
    REQUIRE(s.run(sp, eo) == Status::Ok);
    CHECK(exps[0] == 1.0f);
    CHECK(exps[3] == INFINITY);
    CHECK(exps[4] == 0.0f);
    CHECK(std::isnan(exps[5]));
}

TEST_CASE("snippets: statistics count bytes walked, kernels are cached by body and target") {
    // GELU decomposed: x*0.7071 -> Erf -> +1 -> *x -> *0.5 over N elements.
    Built b;
    const int64_t n = 1024;
    int64_t shape[] = {n};
    ValueId x, k1, k2, k3, t1, t2, t3, t4, t5;
    REQUIRE(b.body.parameter(shape, &x) == Status::Ok);
    REQUIRE(b.body.scalar(0.70710678f, &k1) == Status::Ok);
    REQUIRE(b.body.scalar(1.0f, &k2) == Status::Ok);
    REQUIRE(b.body.scalar(0.5f, &k3) == Status::Ok);
    REQUIRE(b.body.binary(SnippetOp::Mul, x, k1, &t1) == Status::Ok);
    REQUIRE(b.body.unary(SnippetOp::Erf, t1, &t2) == Status::Ok);
    REQUIRE(b.body.binary(SnippetOp::Add, t2, k2, &t3) == Status::Ok);
    REQUIRE(b.body.binary(SnippetOp::Mul, t3, x, &t4) == Status::Ok);
    REQUIRE(b.body.binary(SnippetOp::Mul, t4, k3, &t5) == Status::Ok);
    REQUIRE(b.body.result(t5) == Status::Ok);
    KernelCache cache;
    Snippet s1, s2;
    SnippetOptions options;
    options.isa = target();
    options.cache = &cache;
    REQUIRE(s1.compile(b.body, options) == Status::Ok);
    const SnippetStats& st = s1.stats();
    CHECK(st.bytes_fused == (uint64_t)n * 4 * 2);
    CHECK(st.bytes_unfused == (uint64_t)n * 4 * (2 + 2 + 2 + 3 + 2));
    CHECK(st.shrinkage == doctest::Approx(5.5));
    CHECK(st.elements == (uint64_t)n);
    std::string text;
    write_statistics(st, test::append_to_string, &text);
    CHECK(text.find("shrinkage=5.50") != std::string::npos);
    if (target() == Isa::Ref) return;
    CHECK(!st.cache_hit);
    CHECK(st.code_size > 0);
    CHECK(st.registers_used >= 1);
    REQUIRE(s2.compile(b.body, options) == Status::Ok);
    CHECK(s2.stats().cache_hit);
    // A hit reports the reused kernel's statistics, not the defaults.
    CHECK(st.pinned_constants + st.scratch_registers > 0);
    CHECK(s2.stats().code_size == st.code_size);
    CHECK(s2.stats().lanes == st.lanes);
    CHECK(s2.stats().scratch_registers == st.scratch_registers);
    CHECK(s2.stats().pinned_constants == st.pinned_constants);
    CHECK(s2.stats().shared_invariants == st.shared_invariants);
    CHECK(s2.stats().saved_vector_registers == st.saved_vector_registers);
    CHECK(s2.stats().registers_used == st.registers_used);
    CHECK(cache.size() == 1);
    CHECK(cache.hits() == 1);
    check_against_interpreter(b.body, {random_values(n, 3)}, {(uint64_t)n}, target(), 0, 0, false, &cache);
    CHECK(cache.hits() == 2);
    if (target() != Isa::Sse41 && isa_available(Isa::Sse41)) {  // another target: another kernel
        Snippet s3;
        options.isa = Isa::Sse41;
        REQUIRE(s3.compile(b.body, options) == Status::Ok);
        CHECK(!s3.stats().cache_hit);
        CHECK(cache.size() == 2);
    }
}

// >>tokenizer
namespace {
void set_shape(Graph* g, NodeId id, std::vector<int64_t> dims, ElementType type = ElementType::Float32) {
    REQUIRE(g->set_output_desc(id, 0, test::make_desc(type, dims)) == Status::Ok);
}

NodeId add(Graph* g, const char* name, const char* op, std::vector<NodeId> inputs, std::vector<int64_t> dims = {8, 16}) {
    std::vector<InputRef> refs;
    for (NodeId i : inputs) refs.push_back(InputRef::by_id(i));
    NodeId id;
    REQUIRE(g->add_node(NodeSpec{name, op, "", Span<const InputRef>(refs.data(), refs.size()), 1}, &id) == Status::Ok);
    set_shape(g, id, dims);
    return id;
}

// Checks the invariants of a tokenization: the graph of islands (and of the other nodes) is
// acyclic, each island keeps within the argument budget, no keep-apart edge is inside.
void check_tokenization(const Graph& g, const Tokenization& t, uint32_t budget) {
    uint32_t n = g.node_count();
    // Quotient graph: one vertex per island, one per other node.
    std::vector<uint32_t> vertex(n);
    for (uint32_t v = 0; v < n; ++v) vertex[v] = t.island_of[v] != kNoIsland ? t.island_of[v] : t.island_count + v;
    uint32_t vertices = t.island_count + n;
    std::vector<std::vector<uint32_t>> edges(vertices);
    std::vector<uint32_t> indegree(vertices, 0);
    for (uint32_t v = 0; v < n; ++v)
        for (NodeId s : g.successors(v))
            if (vertex[s] != vertex[v]) { edges[vertex[v]].push_back(vertex[s]); ++indegree[vertex[s]]; }
    std::vector<uint32_t> ready;
    for (uint32_t q = 0; q < vertices; ++q) if (!indegree[q]) ready.push_back(q);
    uint32_t seen = 0;
    while (!ready.empty()) {
        uint32_t q = ready.back();
        ready.pop_back();
        ++seen;
        for (uint32_t s : edges[q]) if (--indegree[s] == 0) ready.push_back(s);
    }
    CHECK(seen == vertices);
    for (uint32_t island = 0; island < t.island_count; ++island) {
        std::vector<std::pair<NodeId, uint32_t>> inputs;
        uint32_t outputs = 0, members = 0;
        for (uint32_t v = 0; v < n; ++v) {
            if (t.island_of[v] != island) continue;
            ++members;
            CHECK(node_is_fusible(g, v));
            const Node& node = g.node(v);
            for (uint32_t e = 0; e < node.num_inputs; ++e) {
                NodeId p = node.inputs[e].producer;
                if (t.island_of[p] == island) { CHECK(!node.inputs[e].keep_apart); continue; }
                std::pair<NodeId, uint32_t> key(p, node.inputs[e].port);
                if (std::find(inputs.begin(), inputs.end(), key) == inputs.end()) inputs.push_back(key);
            }
            bool out = g.successors(v).size == 0;
            for (NodeId s : g.successors(v)) if (t.island_of[s] != island) out = true;
            outputs += out;
        }
        CHECK(members > 0);
        CHECK(inputs.size() + outputs <= budget);
    }
}
}  // namespace

TEST_CASE("tokenize: the seed's GeLU/Add/Clamp example becomes one subgraph") {
    Arena arena;
    Graph g(&arena);
    NodeId x = add(&g, "x", "Input", {});
    NodeId bias = add(&g, "bias", "Input", {}, {1, 16});
    NodeId three = add(&g, "three", "Constant", {}, {1});
    NodeId add1 = add(&g, "add1", "Add", {x, bias});
    NodeId add2 = add(&g, "add2", "Add", {add1, three});
    NodeId clamp = add(&g, "clamp", "Clamp", {add2});
    NodeId mul = add(&g, "mul", "Multiply", {add1, clamp});
    NodeId out = add(&g, "out", "Output", {mul});
    Attribute value;
    value.name = "value_float";
    value.kind = AttributeKind::Float;
    value.f = 3.0f;
    REQUIRE(g.add_attribute(three, value) == Status::Ok);
    Attribute lo, hi;
    lo.name = "min";
    lo.kind = AttributeKind::Float;
    lo.f = 0.0f;
    hi.name = "max";
    hi.kind = AttributeKind::Float;
    hi.f = 6.0f;
    REQUIRE(g.add_attribute(clamp, lo) == Status::Ok);
    REQUIRE(g.add_attribute(clamp, hi) == Status::Ok);
    REQUIRE(g.finalize() == Status::Ok);
    Tokenization t;
    REQUIRE(tokenize(g, TokenizeOptions(), &arena, &t) == Status::Ok);
    CHECK(t.island_count == 1);
    for (NodeId v : {three, add1, add2, clamp, mul}) CHECK(t.island_of[v] == 0);
    for (NodeId v : {x, bias, out}) CHECK(t.island_of[v] == kNoIsland);
    check_tokenization(g, t, kSnippetMaxArgs);

    // The island's body computes (x + bias) * clamp(x + bias + 3, 0, 6) in one kernel.
    SnippetBody body(&arena);
    NodeId in_nodes[kSnippetMaxArgs], out_nodes[kSnippetMaxArgs];
    uint32_t ins = 0, outs = 0;
    REQUIRE(build_island_body(g, t, 0, &body, in_nodes, &ins, out_nodes, &outs) == Status::Ok);
    REQUIRE(ins == 2);
    CHECK(in_nodes[0] == x);
    CHECK(in_nodes[1] == bias);
    REQUIRE(outs == 1);
    CHECK(out_nodes[0] == mul);
    std::vector<float> xv = random_values(128, 21), bv = random_values(16, 22), got(128);
    Snippet snippet;
    SnippetOptions options;
    options.isa = target();
    REQUIRE(snippet.compile(body, options) == Status::Ok);
    CHECK(snippet.stats().shrinkage > 1.0);
    const float* in_ptrs[] = {xv.data(), bv.data()};
    float* out_ptrs[] = {got.data()};
    REQUIRE(snippet.run(in_ptrs, out_ptrs) == Status::Ok);
    size_t bad = 0;
    for (int i = 0; i < 128; ++i) {
        float a = xv[i] + bv[i % 16];
        float c = a + 3.0f;
        c = c != c ? c : std::fmin(6.0f, std::fmax(0.0f, c));
        bad += !same(got[i], a * c);
    }
    CHECK(bad == 0);
    NodeId unused[kSnippetMaxArgs];
    uint32_t count_unused;
    CHECK(build_island_body(g, t, 1, &body, unused, &count_unused, unused, &count_unused) == Status::InvalidArgument);
}

TEST_CASE("tokenize: a merge that would close a cycle through another op is refused") {
    Arena arena;
    Graph g(&arena);
    NodeId in = add(&g, "in", "Input", {});
    NodeId a = add(&g, "a", "Relu", {in});
    NodeId conv = add(&g, "conv", "Conv", {a});     // not fusible
    NodeId d = add(&g, "d", "Add", {a, conv});      // joining a's island would loop through conv
    NodeId e = add(&g, "e", "Sigmoid", {d});
    REQUIRE(g.finalize() == Status::Ok);
    Tokenization t;
    REQUIRE(tokenize(g, TokenizeOptions(), &arena, &t) == Status::Ok);
    CHECK(t.island_of[conv] == kNoIsland);
    CHECK(t.island_of[a] != t.island_of[d]);
    CHECK(t.island_of[d] == t.island_of[e]);
    check_tokenization(g, t, kSnippetMaxArgs);
}

TEST_CASE("tokenize: each island's nodes listed in topological order; bodies the same without the lists") {
    Arena arena;
    Graph g(&arena);
    NodeId in = add(&g, "in", "Input", {});
    NodeId a = add(&g, "a", "Relu", {in});
    NodeId conv = add(&g, "conv", "Conv", {a});
    NodeId d = add(&g, "d", "Add", {a, conv});
    NodeId e = add(&g, "e", "Sigmoid", {d});
    NodeId f = add(&g, "f", "Mul", {e, d});
    REQUIRE(g.finalize() == Status::Ok);
    Tokenization t;
    REQUIRE(tokenize(g, TokenizeOptions(), &arena, &t) == Status::Ok);
    REQUIRE(t.island_count == 2);
    REQUIRE(t.island_start.size == 3);
    CHECK(t.island_start[0] == 0);
    CHECK(t.island_start[1] == 1);
    CHECK(t.island_start[2] == 4);
    REQUIRE(t.island_nodes.size == 4);
    CHECK(t.island_nodes[0] == a);
    CHECK(t.island_nodes[1] == d);
    CHECK(t.island_nodes[2] == e);
    CHECK(t.island_nodes[3] == f);
    Tokenization bare;  // island_of only: build_island_body walks the graph instead
    bare.island_of = t.island_of;
    bare.island_count = t.island_count;
    for (uint32_t k = 0; k < t.island_count; ++k) {
        SnippetBody listed(&arena), walked(&arena);
        NodeId in_nodes[2][kSnippetMaxArgs], out_nodes[2][kSnippetMaxArgs];
        uint32_t in_count[2], out_count[2];
        REQUIRE(build_island_body(g, t, k, &listed, in_nodes[0], &in_count[0], out_nodes[0], &out_count[0]) == Status::Ok);
        REQUIRE(build_island_body(g, bare, k, &walked, in_nodes[1], &in_count[1], out_nodes[1], &out_count[1]) == Status::Ok);
        CHECK(listed.hash() == walked.hash());
        CHECK(in_count[0] == in_count[1]);
        CHECK(out_count[0] == out_count[1]);
    }
    // Lists that disagree with island_of are refused, as is an island id past the count.
    Tokenization wrong = t;
    NodeId swapped[] = {d, e, a, f};   // island 0 lists d, of island 1; island 1 lists a, of island 0
    wrong.island_nodes = Span<const NodeId>(swapped, 4);
    NodeId in_nodes[kSnippetMaxArgs], out_nodes[kSnippetMaxArgs];
    uint32_t in_count, out_count;
    for (uint32_t k = 0; k < 2; ++k) {
        SnippetBody body(&arena);
        CHECK(build_island_body(g, wrong, k, &body, in_nodes, &in_count, out_nodes, &out_count) == Status::InvalidArgument);
    }
    NodeId late[] = {a, e, d, f};   // island 1 lists e before its producer d
    wrong.island_nodes = Span<const NodeId>(late, 4);
    SnippetBody body(&arena);
    CHECK(build_island_body(g, wrong, 1, &body, in_nodes, &in_count, out_nodes, &out_count) == Status::InvalidArgument);
    uint32_t too_big[6] = {kNoIsland, 0, kNoIsland, 1, 1, 2};
    Tokenization bad;
    bad.island_of = Span<const uint32_t>(too_big, 6);
    bad.island_count = 2;
    CHECK(list_island_nodes(g, &arena, &bad) == Status::InvalidArgument);
}

TEST_CASE("tokenize: budget, shapes, element types and keep-apart edges limit islands") {
    Arena arena;
    Graph g(&arena);
    std::vector<NodeId> inputs;
    for (int i = 0; i < 6; ++i) inputs.push_back(add(&g, ("in" + std::to_string(i)).c_str(), "Input", {}));
    NodeId acc = add(&g, "s0", "Add", {inputs[0], inputs[1]});
    for (int i = 2; i < 6; ++i) acc = add(&g, ("s" + std::to_string(i)).c_str(), "Add", {acc, inputs[i]});
    NodeId i32 = add(&g, "int", "Relu", {acc});
    set_shape(&g, i32, {8, 16}, ElementType::Int32);   // not float: stays out
    NodeId unknown = add(&g, "unknown", "Relu", {acc}, {-1, 16});
    NodeId rank7 = add(&g, "rank7", "Relu", {acc}, {1, 1, 1, 1, 1, 8, 16});
    (void)unknown; (void)rank7;
    REQUIRE(g.finalize() == Status::Ok);
    TokenizeOptions options;
    options.max_arguments = 4;
    Tokenization t;
    REQUIRE(tokenize(g, options, &arena, &t) == Status::Ok);
    CHECK(t.island_of[i32] == kNoIsland);
    CHECK(t.island_of[unknown] == kNoIsland);
    CHECK(t.island_of[rank7] == kNoIsland);
    CHECK(t.island_count >= 2);  // 6 inputs + 1 output do not fit in 4 arguments
    check_tokenization(g, t, 4);
    options.max_arguments = 1;
    CHECK(tokenize(g, options, &arena, &t) == Status::InvalidArgument);
    options.max_arguments = kSnippetMaxArgs + 1;  // a kernel could not take such an island
    CHECK(tokenize(g, options, &arena, &t) == Status::InvalidArgument);
    Arena arena2;
    Graph raw(&arena2);
    CHECK(tokenize(raw, TokenizeOptions(), &arena2, &t) == Status::NotFinalized);

    // A keep-apart edge between two fusible nodes keeps them in different islands.
    Arena arena3;
    Graph h(&arena3);
    NodeId p = add(&h, "p", "Input", {});
    NodeId q = add(&h, "q", "Exp", {p});
    InputRef apart[] = {InputRef::by_id(q, 0, true)};
    NodeId r;
    REQUIRE(h.add_node(NodeSpec{"r", "Neg", "", apart, 1}, &r) == Status::Ok);
    set_shape(&h, r, {8, 16});
    REQUIRE(h.finalize() == Status::Ok);
    REQUIRE(tokenize(h, TokenizeOptions(), &arena3, &t) == Status::Ok);
    CHECK(t.island_of[q] != kNoIsland);
    CHECK(t.island_of[q] != t.island_of[r]);

    // Two ports of one producer are two arguments, one port read twice is one: Add(split:0,
    // split:1) and its result need 3 arguments, Mul(split:0, split:0) 2.
    Arena arena4;
    Graph two(&arena4);
    NodeId x = add(&two, "x", "Input", {});
    InputRef xin[] = {InputRef::by_id(x)};
    NodeId split;
    REQUIRE(two.add_node(NodeSpec{"split", "Split", "", xin, 2}, &split) == Status::Ok);
    set_shape(&two, split, {8, 16});
    REQUIRE(two.set_output_desc(split, 1, test::make_desc(ElementType::Float32, {8, 16})) == Status::Ok);
    InputRef ports[] = {InputRef::by_id(split, 0), InputRef::by_id(split, 1)};
    InputRef same[] = {InputRef::by_id(split, 0), InputRef::by_id(split, 0)};
    NodeId sum, square;
    REQUIRE(two.add_node(NodeSpec{"sum", "Add", "", ports, 1}, &sum) == Status::Ok);
    REQUIRE(two.add_node(NodeSpec{"square", "Mul", "", same, 1}, &square) == Status::Ok);
    set_shape(&two, sum, {8, 16});
    set_shape(&two, square, {8, 16});
    REQUIRE(two.finalize() == Status::Ok);
    options.max_arguments = 2;
    REQUIRE(tokenize(two, options, &arena4, &t) == Status::Ok);
    CHECK(t.island_of[sum] == kNoIsland);
    CHECK(t.island_of[square] != kNoIsland);
    options.max_arguments = 3;
    REQUIRE(tokenize(two, options, &arena4, &t) == Status::Ok);
    CHECK(t.island_of[sum] != kNoIsland);
}

TEST_CASE("tokenize: a chain over 24 inputs is one island by default, split at max_arguments") {
    Arena arena;
    Graph g(&arena);
    NodeId acc = add(&g, "in0", "Input", {});
    std::vector<NodeId> chain;
    for (int i = 1; i < 24; ++i) {
        NodeId x = add(&g, ("in" + std::to_string(i)).c_str(), "Input", {});
        acc = add(&g, ("s" + std::to_string(i)).c_str(), i % 2 ? "Add" : "Mul", {acc, x});
        chain.push_back(acc);
    }
    REQUIRE(g.finalize() == Status::Ok);
    Tokenization t;
    REQUIRE(tokenize(g, TokenizeOptions(), &arena, &t) == Status::Ok);
    CHECK(t.island_count == 1);   // 24 inputs + 1 output = 25 arguments
    for (NodeId n : chain) CHECK(t.island_of[n] == 0);
    check_tokenization(g, t, kSnippetMaxArgs);
    TokenizeOptions narrow;
    narrow.max_arguments = 11;   // what a kernel held in registers before cold pointers
    REQUIRE(tokenize(g, narrow, &arena, &t) == Status::Ok);
    CHECK(t.island_count == 3);   // 10 inputs + 1 output, then 9 more + the first island's output, ...
    check_tokenization(g, t, 11);
}

TEST_CASE("tokenize: an island stops at max_island_nodes, so a long chain is cut in order") {
    // x -> a1 -> ... -> a600, each a_i = a_{i-1} + x: one input and one output throughout, so
    // only the node cap cuts it: [a1..a256], [a257..a512], [a513..a600].
    Arena arena;
    Graph g(&arena);
    NodeId x = add(&g, "x", "Input", {});
    std::vector<NodeId> chain;
    NodeId previous = x;
    for (int i = 1; i <= 600; ++i) chain.push_back(previous = add(&g, ("a" + std::to_string(i)).c_str(), "Add", {previous, x}));
    REQUIRE(g.finalize() == Status::Ok);
    Tokenization t;
    REQUIRE(tokenize(g, TokenizeOptions(), &arena, &t) == Status::Ok);
    CHECK(t.island_count == 3);
    for (int i = 0; i < 600; ++i) CHECK(t.island_of[chain[i]] == (uint32_t)(i / 256));
    check_tokenization(g, t, kSnippetMaxArgs);
    TokenizeOptions options;
    options.max_island_nodes = 1;   // every node alone
    REQUIRE(tokenize(g, options, &arena, &t) == Status::Ok);
    CHECK(t.island_count == 600);
    options.max_island_nodes = 0;
    CHECK(tokenize(g, options, &arena, &t) == Status::InvalidArgument);
}

TEST_CASE("tokenize: property, random graphs never get a cycle or a broken budget") {
    std::mt19937 rng(7);
    const char* ops[] = {"Add", "Mul", "Relu", "Sigmoid", "Conv", "MatMul", "Tanh", "Where", "Exp"};
    for (int trial = 0; trial < 200; ++trial) {
        Arena arena;
        Graph g(&arena);
        int n = 5 + (int)(rng() % 40);
        std::vector<NodeId> ids;
        for (int i = 0; i < n; ++i) {
            const char* op = i < 2 ? "Input" : ops[rng() % 9];
            std::string opname(op);
            int arity = opname == "Add" || opname == "Mul" || opname == "MatMul" ? 2 : opname == "Where" ? 3 : opname == "Input" ? 0 : 1;
            std::vector<NodeId> in;
            for (int a = 0; a < arity; ++a) in.push_back(ids[rng() % ids.size()]);
            std::vector<int64_t> dims = rng() % 5 == 0 ? std::vector<int64_t>{8, 1} : std::vector<int64_t>{8, 16};
            ids.push_back(add(&g, ("n" + std::to_string(i)).c_str(), op, in, dims));
        }
        REQUIRE(g.finalize() == Status::Ok);
        TokenizeOptions options;
        options.max_arguments = 3 + (uint32_t)(rng() % 9);
        Tokenization t;
        REQUIRE(tokenize(g, options, &arena, &t) == Status::Ok);
        INFO("trial " << trial);
        check_tokenization(g, t, options.max_arguments);
        if (trial >= 40) continue;
        for (uint32_t island = 0; island < t.island_count; ++island) {  // every island compiles
            Arena body_arena;
            SnippetBody body(&body_arena);
            NodeId in_nodes[kSnippetMaxArgs], out_nodes[kSnippetMaxArgs];
            uint32_t ins = 0, outs = 0;
            REQUIRE(build_island_body(g, t, island, &body, in_nodes, &ins, out_nodes, &outs) == Status::Ok);
            CHECK(ins + outs <= options.max_arguments);
            std::vector<std::vector<float>> inputs;
            for (uint32_t i = 0; i < ins; ++i) {
                const TensorDesc& d = g.node(in_nodes[i]).outputs[0];
                inputs.push_back(random_values((size_t)(d.dims[0] * d.dims[1]), trial * 100 + i, 3.0f));
            }
            std::vector<uint64_t> sizes;
            for (uint32_t r = 0; r < outs; ++r) sizes.push_back(shape_size(body.instruction(body.result_value(r)).shape));
            check_against_interpreter(body, inputs, sizes, target());
        }
    }
}

TEST_CASE("snippets: every op compiles and stays exact with all allocatable registers busy") {
    Isa isa = target();
    for (SnippetOp o : computing_ops()) {
        Built b;
        int64_t shape[] = {45};
        ValueId x, y, z, live[9], acc;
        REQUIRE(b.body.parameter(shape, &x) == Status::Ok);
        REQUIRE(b.body.parameter(shape, &y) == Status::Ok);
        REQUIRE(b.body.parameter(shape, &z) == Status::Ok);
        for (int i = 0; i < 9; ++i) {  // live across the operation below
            ValueId k;
            REQUIRE(b.body.scalar(0.5f + (float)i, &k) == Status::Ok);
            REQUIRE(b.body.binary(SnippetOp::Mul, x, k, &live[i]) == Status::Ok);
        }
        ValueId args[3] = {x, y, z};
        float alpha, beta;
        snippet_op_default_attributes(o, &alpha, &beta);
        REQUIRE(b.body.add(o, Span<const ValueId>(args, snippet_op_arity(o)), alpha, beta, &acc) == Status::Ok);
        for (int i = 0; i < 9; ++i) REQUIRE(b.body.binary(SnippetOp::Add, acc, live[i], &acc) == Status::Ok);
        REQUIRE(b.body.result(acc) == Status::Ok);
        INFO(op_name(o));
        check_against_interpreter(b.body, {random_values(45, 1), random_values(45, 2, 3.0f), random_values(45, 3)}, {45}, isa);
    }
}

TEST_CASE("snippets: a result that is a parameter reads it before an in-place output overwrites it") {
    // Found by fuzz/snippets_diff.cpp: result 0 = Neg(p1) written over p0, result 1 = p0.
    Isa isa = target();
    Built b;
    int64_t shape[] = {37};
    ValueId p0, p1, negated;
    REQUIRE(b.body.parameter(shape, &p0) == Status::Ok);
    REQUIRE(b.body.parameter(shape, &p1) == Status::Ok);
    REQUIRE(b.body.unary(SnippetOp::Neg, p1, &negated) == Status::Ok);
    REQUIRE(b.body.result(negated) == Status::Ok);
    REQUIRE(b.body.result(p0) == Status::Ok);
    for (uint32_t registers : {0u, 1u, 2u})
        check_against_interpreter(b.body, {random_values(37, 3), random_values(37, 4)}, {37, 37}, isa, registers, 1, true);
}

TEST_CASE("snippets: results that are a parameter, a scalar, or computed from scalars only") {
    Isa isa = target();
    Built b;
    int64_t shape[] = {2, 21};
    ValueId x, k1, k2, s, y;
    REQUIRE(b.body.parameter(shape, &x) == Status::Ok);
    REQUIRE(b.body.scalar(1.5f, &k1) == Status::Ok);
    REQUIRE(b.body.scalar(-2.0f, &k2) == Status::Ok);
    REQUIRE(b.body.binary(SnippetOp::Max, k1, k2, &s) == Status::Ok);   // scalars only
    REQUIRE(b.body.binary(SnippetOp::Sub, s, x, &y) == Status::Ok);      // scalar first operand
    REQUIRE(b.body.result(x) == Status::Ok);                             // identity
    REQUIRE(b.body.result(y) == Status::Ok);
    REQUIRE(b.body.result(k2) == Status::Ok);                            // a scalar, stored once
    std::vector<float> xv = random_values(42, 5);
    check_against_interpreter(b.body, {xv}, {42, 42, 1}, isa);
    std::vector<float> copy(42), diff(42);
    float scalar_out = 0;
    const float* in[] = {xv.data()};
    float* outs[] = {copy.data(), diff.data(), &scalar_out};
    Snippet snippet;
    SnippetOptions options;
    options.isa = isa;
    REQUIRE(snippet.compile(b.body, options) == Status::Ok);
    REQUIRE(snippet.run(in, outs) == Status::Ok);
    CHECK(scalar_out == -2.0f);
    size_t bad = 0;
    for (int i = 0; i < 42; ++i) bad += !same(copy[i], xv[i]) + !same(diff[i], 1.5f - xv[i]);
    CHECK(bad == 0);
}

TEST_CASE("snippets: every op with broadcast operands, misaligned and in place") {
    Isa isa = target();
    uint32_t w = isa_vector_floats(isa);
    const int64_t rows = 3, cols = (int64_t)(2 * w + 3);
    for (SnippetOp o : computing_ops()) {
        uint32_t arity = snippet_op_arity(o);
        // Operand i > 0 alternates between a row vector, a column and a scalar-shaped tensor.
        for (int variant = 0; variant < 3; ++variant) {
            Built b;
            std::vector<std::vector<int64_t>> shapes;
            shapes.push_back({rows, cols});
            for (uint32_t i = 1; i < arity; ++i) {
                int kind = (variant + (int)i) % 3;
                shapes.push_back(kind == 0 ? std::vector<int64_t>{1, cols} : kind == 1 ? std::vector<int64_t>{rows, 1} : std::vector<int64_t>{1});
            }
            build_op(&b.body, o, shapes);
            std::vector<std::vector<float>> inputs;
            for (uint32_t i = 0; i < arity; ++i)
                inputs.push_back(random_values(count(shapes[i]), (uint32_t)(variant * 13 + i + (int)o * 7), o == SnippetOp::Pow ? 3.0f : 8.0f));
            INFO(op_name(o) << " variant " << variant);
            check_against_interpreter(b.body, inputs, {(uint64_t)(rows * cols)}, isa, 0, (size_t)variant, variant == 2);
        }
    }
}

TEST_CASE("snippets: special values of the approximations on the target") {
    Isa isa = target();
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f};
    struct Expect { SnippetOp op; float at_zero, at_inf, at_minus_inf; };
    const Expect expects[] = {
        {SnippetOp::Tanh, 0.0f, 1.0f, -1.0f}, {SnippetOp::Sigmoid, 0.5f, 1.0f, 0.0f}, {SnippetOp::Erf, 0.0f, 1.0f, -1.0f},
        {SnippetOp::GeluErf, 0.0f, INFINITY, -0.0f}, {SnippetOp::GeluTanh, 0.0f, INFINITY, NAN},
        {SnippetOp::Softplus, 0.69314718f, INFINITY, 0.0f}, {SnippetOp::Swish, 0.0f, INFINITY, NAN},
        {SnippetOp::Elu, 0.0f, INFINITY, -1.0f},
    };
    for (const Expect& ex : expects) {
        Built b;
        build_op(&b.body, ex.op, {{7}});
        float out[7];
        const float* in[] = {specials};
        float* outs[] = {out};
        Snippet s;
        SnippetOptions options;
        options.isa = isa;
        REQUIRE(s.compile(b.body, options) == Status::Ok);
        REQUIRE(s.run(in, outs) == Status::Ok);
        INFO(op_name(ex.op));
        CHECK(out[0] == ex.at_zero);
        CHECK(out[1] == ex.at_zero);
        CHECK(same(out[2], ex.at_inf));
        CHECK(same(out[3], ex.at_minus_inf));
        CHECK(std::isnan(out[4]));
        CHECK(std::fabs(out[5] - ex.at_zero) < 1e-30f);  // a denormal input behaves like zero
        check_against_interpreter(b.body, {std::vector<float>(specials, specials + 7)}, {7}, isa);
    }
}

TEST_CASE("snippets: Load + BroadcastMove (unfused) equals BroadcastLoad and the interpreter") {
    Isa isa = target();
    Built b;
    int64_t full[] = {5, 37}, column[] = {5, 1};
    ValueId x, c, d, y;
    REQUIRE(b.body.parameter(full, &x) == Status::Ok);
    REQUIRE(b.body.parameter(column, &c) == Status::Ok);
    REQUIRE(b.body.parameter(column, &d) == Status::Ok);
    REQUIRE(b.body.binary(SnippetOp::Mul, x, c, &y) == Status::Ok);
    REQUIRE(b.body.binary(SnippetOp::Sub, y, d, &y) == Status::Ok);
    REQUIRE(b.body.unary(SnippetOp::Sigmoid, y, &y) == Status::Ok);
    REQUIRE(b.body.result(y) == Status::Ok);
    std::vector<float> xv = random_values(185, 1), cv = random_values(5, 2), dv = random_values(5, 3);
    std::vector<float> want(185), fused(185), unfused(185);
    const float* in[] = {xv.data(), cv.data(), dv.data()};
    float* o_want[] = {want.data()};
    float* o_fused[] = {fused.data()};
    float* o_unfused[] = {unfused.data()};
    REQUIRE(interpret(b.body, in, o_want, isa_uses_fma(isa)) == Status::Ok);
    Snippet s1, s2;
    SnippetOptions options;
    options.isa = isa;
    REQUIRE(s1.compile(b.body, options) == Status::Ok);
    options.tuning.fuse_broadcast_loads = false;
    REQUIRE(s2.compile(b.body, options) == Status::Ok);
    if (isa != Isa::Ref) CHECK(s2.stats().instructions == s1.stats().instructions + 2);  // two moves kept
    REQUIRE(s1.run(in, o_fused) == Status::Ok);
    REQUIRE(s2.run(in, o_unfused) == Status::Ok);
    size_t bad = 0;
    for (int i = 0; i < 185; ++i) bad += !same(fused[i], want[i]) + !same(unfused[i], want[i]);
    CHECK(bad == 0);
}

TEST_CASE("snippets: ASIMD features come from AT_HWCAP on AArch64 and are off elsewhere") {
    ArmFeatures f = arm_features();
#if defined(__aarch64__) && defined(__linux__)
    CHECK(f.asimd);
    MESSAGE("asimd " << f.asimd << " fp16 arithmetic " << f.fp16_arithmetic << " dot product " << f.dot_product);
#else
    CHECK(!f.asimd);
    CHECK(!f.fp16_arithmetic);
    CHECK(!f.dot_product);
#endif
}

namespace {
// x * k_i for 23 constants, all live across GELU(x), then summed: more values than the 22
// allocatable registers plus GELU's temporaries, so a Neon kernel reaches v8-v15 (and spills).
void build_pressure_body(SnippetBody* body, int64_t n) {
    int64_t shape[] = {n};
    ValueId x, v[23], acc;
    REQUIRE(body->parameter(shape, &x) == Status::Ok);
    for (int i = 0; i < 23; ++i) {
        ValueId k;
        REQUIRE(body->scalar(1.0f + (float)i, &k) == Status::Ok);
        REQUIRE(body->binary(SnippetOp::Mul, x, k, &v[i]) == Status::Ok);
    }
    REQUIRE(body->unary(SnippetOp::GeluErf, x, &acc) == Status::Ok);
    for (int i = 0; i < 23; ++i) REQUIRE(body->binary(SnippetOp::Add, v[i], acc, &acc) == Status::Ok);
    REQUIRE(body->result(acc) == Status::Ok);
}

// Lowers and assembles a body for `isa` without running it (emit_only); any host.
SnippetStats check_assembles(const SnippetBody& body, Isa isa, uint32_t max_registers = 0, bool fuse = true) {
    Snippet s;
    SnippetOptions options;
    options.isa = isa;
    options.emit_only = true;
    options.tuning.max_registers = max_registers;
    options.tuning.fuse_broadcast_loads = fuse;
    Status status = s.compile(body, options);
    INFO("isa " << std::string(isa_name(isa)) << " max_registers " << max_registers << ": " << s.last_error());
    REQUIRE(status == Status::Ok);
    CHECK(s.stats().code_size > 0);
    CHECK(s.isa() == isa);
    const float* in[kSnippetMaxArgs] = {};
    float* out[kSnippetMaxArgs] = {};
    CHECK(s.run(Span<const float* const>(in, body.parameter_count()), Span<float* const>(out, body.result_count())) ==
          Status::NotFinalized);
    return s.stats();
}
}  // namespace

TEST_CASE("snippets: every op assembles for neon on any host (emit only, a64 validation on)") {
    for (SnippetOp o : computing_ops()) {
        uint32_t arity = snippet_op_arity(o);
        for (int variant = 0; variant < 3; ++variant) {  // full operands, row vector, column
            Built b;
            std::vector<std::vector<int64_t>> shapes{{5, 37}};
            for (uint32_t i = 1; i < arity; ++i)
                shapes.push_back(variant == 0 ? std::vector<int64_t>{5, 37} : variant == 1 ? std::vector<int64_t>{1, 37}
                                                                                           : std::vector<int64_t>{5, 1});
            build_op(&b.body, o, shapes);
            INFO(op_name(o) << " variant " << variant);
            for (uint32_t registers : {0u, 1u, 3u}) {
                SnippetStats st = check_assembles(b.body, Isa::Neon, registers);
                // Few values: v8-v15 untouched, except by the table lookups of Erf, Tanh and
                // GeluErf, which load each 64-byte table into v12-v15 for one four-register tbl.
                const bool tables = o == SnippetOp::Erf || o == SnippetOp::Tanh || o == SnippetOp::GeluErf;
                CHECK(st.saved_vector_registers == (tables ? 8u : 0u));
                if (registers == 1 && arity > 1 && variant == 0) CHECK(st.spilled_values > 0);
            }
            if (variant == 2) check_assembles(b.body, Isa::Neon, 0, false);   // Load + BroadcastMove
        }
    }
    // Many values live at once: registers mapped to v8-v15 (saved d8-d15) and spills.
    Built b;
    build_pressure_body(&b.body, 67);
    SnippetStats st = check_assembles(b.body, Isa::Neon);
    CHECK(st.saved_vector_registers == 8);
    CHECK(st.spilled_values > 0);
    st = check_assembles(b.body, Isa::Neon, 2);
    CHECK(st.spilled_values > 0);
    // The x86 targets assemble the same way on any host.
    for (Isa isa : {Isa::Sse41, Isa::Avx2, Isa::Avx512}) check_assembles(b.body, isa);
    // So do bodies with cold argument pointers (32 arguments), spilling or not.
    {
        Built wide;
        std::vector<std::vector<float>> inputs;
        std::vector<uint64_t> sizes;
        build_wide_body(&wide.body, 30, 2, 3, 37, &inputs, &sizes);
        for (Isa isa : {Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon})
            for (uint32_t registers : {0u, 1u}) check_assembles(wide.body, isa, registers);
    }
    // Without emit_only a target the machine lacks stays Unsupported.
    Snippet s;
    SnippetOptions options;
    options.isa = isa_available(Isa::Neon) ? Isa::Avx2 : Isa::Neon;
    CHECK(s.compile(b.body, options) == Status::Unsupported);
}

TEST_CASE("snippets: constants stay in registers for the whole kernel (pinned), on NEON too") {
    // GELU(tanh) as the bench builds it: 4 scalars of its own and the tanh's constants.
    Built b;
    int64_t shape[] = {67};
    ValueId x, k, t, x3;
    auto scalar = [&](float v) { ValueId id; REQUIRE(b.body.scalar(v, &id) == Status::Ok); return id; };
    auto binary = [&](SnippetOp op, ValueId l, ValueId r) { ValueId id; REQUIRE(b.body.binary(op, l, r, &id) == Status::Ok); return id; };
    REQUIRE(b.body.parameter(shape, &x) == Status::Ok);
    x3 = binary(SnippetOp::Mul, binary(SnippetOp::Mul, x, x), x);
    t = binary(SnippetOp::Add, binary(SnippetOp::Mul, x3, scalar(0.044715f)), x);
    k = binary(SnippetOp::Mul, t, scalar(0.7978845608f));
    REQUIRE(b.body.unary(SnippetOp::Tanh, k, &t) == Status::Ok);
    t = binary(SnippetOp::Mul, binary(SnippetOp::Add, t, scalar(1.0f)), x);
    REQUIRE(b.body.result(binary(SnippetOp::Mul, t, scalar(0.5f))) == Status::Ok);
    SnippetStats st = check_assembles(b.body, Isa::Neon);
    CHECK(st.pinned_constants >= 8);
    CHECK(st.saved_vector_registers == 8);   // the tanh's tables use v12-v15 anyway
    // Few free registers: the NEON kernel pins fewer constants, or none, and still assembles.
    for (uint32_t registers : {1u, 3u}) check_assembles(b.body, Isa::Neon, registers);
    // Run where the target exists (NEON under qemu-aarch64): the same bits as the interpreter.
    const Isa isa = target();
    std::vector<float> xv = random_values(67, 59);
    check_against_interpreter(b.body, {xv}, {67}, isa);
}

#if defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__)   // GCC explicit register variables
namespace {
// Runs the snippet with known values in d8-d15; the compiler keeps them there across the
// call (callee-saved in AAPCS64), so a kernel that clobbers them changes what we read back.
__attribute__((noinline)) bool run_keeps_d8_d15(const Snippet& s, const float* const* in, float* const* out, size_t outs) {
    register double r8 asm("d8") = 8.5, r9 asm("d9") = 9.5, r10 asm("d10") = 10.5, r11 asm("d11") = 11.5;
    register double r12 asm("d12") = 12.5, r13 asm("d13") = 13.5, r14 asm("d14") = 14.5, r15 asm("d15") = 15.5;
    asm volatile("" : "+w"(r8), "+w"(r9), "+w"(r10), "+w"(r11), "+w"(r12), "+w"(r13), "+w"(r14), "+w"(r15));
    Status status = s.run(Span<const float* const>(in, 1), Span<float* const>(out, outs));
    asm volatile("" : "+w"(r8), "+w"(r9), "+w"(r10), "+w"(r11), "+w"(r12), "+w"(r13), "+w"(r14), "+w"(r15));
    return status == Status::Ok && r8 == 8.5 && r9 == 9.5 && r10 == 10.5 && r11 == 11.5 && r12 == 12.5 && r13 == 13.5 &&
           r14 == 14.5 && r15 == 15.5;
}
}  // namespace

TEST_CASE("snippets: a kernel using v8-v15 keeps d8-d15 for its caller (AAPCS64) and stays exact") {
    Isa isa = target();
    Built b;
    build_pressure_body(&b.body, 103);
    Snippet s;
    SnippetOptions options;
    options.isa = isa;
    REQUIRE(s.compile(b.body, options) == Status::Ok);
    if (isa == Isa::Neon) CHECK(s.stats().saved_vector_registers == 8);
    std::vector<float> xv = random_values(103, 41), out(103);
    const float* in[] = {xv.data()};
    float* outs[] = {out.data()};
    CHECK(run_keeps_d8_d15(s, in, outs, 1));
    check_against_interpreter(b.body, {xv}, {103}, isa);
}
#endif

namespace {
// Inputs made from integers only (k * 2^-20 plus special values), so x86-64 and AArch64
// hosts build the very same floats (a float distribution could differ between libraries).
std::vector<float> portable_values(size_t n, uint32_t seed, float scale) {
    std::mt19937 rng(seed);
    std::vector<float> specials = special_values();
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
        uint32_t r = rng();
        if (r % 16 == 0) v[i] = specials[(r >> 4) % specials.size()];
        else v[i] = (float)((int32_t)(r >> 8) - (1 << 23)) * (scale / 8388608.0f);
    }
    return v;
}

// FNV-1a of the result bits, every NaN counted as one (payloads may differ between targets).
uint64_t result_hash(const std::vector<float>& out) {
    uint64_t h = 1469598103934665603ull;
    for (float f : out) {
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        if (f != f) bits = 0x7fc00000u;
        for (int b = 0; b < 4; ++b) h = (h ^ ((bits >> (8 * b)) & 0xff)) * 1099511628211ull;
    }
    return h;
}
}  // namespace

// The FMA targets (Ref with FMA, Avx2, Avx512, Neon) must give identical bits for every op on
// every host: these hashes were taken on x86-64 and are checked on AArch64 too (make test-arm).
// After a deliberate change to an approximation, paste the new values the failures print.
TEST_CASE("snippets: every op gives the same bits on x86-64 and AArch64 FMA targets (golden hashes)") {
    Isa isa = target();
    if (!isa_uses_fma(isa)) return;   // Sse41 rounds its products: other bits, by design
    static const uint64_t golden[] = {  // in SnippetOp order from Add
        17796266525255187548ull, 1232354583516211485ull, 6874580834477308042ull,
        10293743185667751541ull, 16687933751897222283ull, 14128558982284168108ull,
        7449629516600483372ull, 15314389975388896124ull, 11263367939798520507ull,
        3020001014236846855ull, 5076231173061086228ull, 2214757007656487204ull,
        8778863315350652587ull, 1196230276160495783ull, 1019005304493722193ull,
        15516756121682770797ull, 698562954760064991ull, 2926262330728719247ull,
        11277837511363263391ull, 8506886854193065679ull, 7019680225526499517ull,
        16815421790015983208ull, 5912612484782800075ull, 18106761334636940130ull,
        13716482143873814140ull, 11807024449187194870ull, 15436493240663645109ull,
        5797137557146893772ull, 10192517830010116985ull, 9858649403504638893ull,
        17034526000144262686ull, 9089335667677414438ull, 16624716761622955418ull,
        5124773736996581590ull, 7307358745198678474ull, 5506394111995068163ull,
        13717393669334515450ull, 10395954731899526083ull, 12881298450329126883ull,
        17762602931481407306ull, 18122064347710327897ull,
    };
    const size_t n = 1000;
    std::vector<SnippetOp> ops = computing_ops();
    for (size_t k = 0; k < ops.size(); ++k) {
        SnippetOp op = ops[k];
        uint32_t arity = snippet_op_arity(op);
        Built b;
        build_op(&b.body, op, std::vector<std::vector<int64_t>>(arity, std::vector<int64_t>{(int64_t)n}));
        std::vector<std::vector<float>> inputs;
        for (uint32_t i = 0; i < arity; ++i)
            inputs.push_back(portable_values(n, 1000u + 17u * (uint32_t)k + i, op == SnippetOp::Pow ? 4.0f : 8.0f));
        if (op == SnippetOp::Select)
            for (float& c : inputs[0]) c = (c > 0) ? 1.0f : (c < -4 ? NAN : 0.0f);
        std::vector<const float*> in;
        for (auto& v : inputs) in.push_back(v.data());
        std::vector<float> out(n);
        float* outs[] = {out.data()};
        Snippet s;
        SnippetOptions options;
        options.isa = isa;
        REQUIRE(s.compile(b.body, options) == Status::Ok);
        REQUIRE(s.run(Span<const float* const>(in.data(), in.size()), outs) == Status::Ok);
        uint64_t h = result_hash(out);
        uint64_t want = k < sizeof golden / sizeof golden[0] ? golden[k] : 0;
        INFO(op_name(op) << " on " << std::string(isa_name(isa)));
        if (h != want) MESSAGE("golden[" << k << "] (" << op_name(op) << ") = " << h << "ull");
        CHECK(h == want);
    }
}

// Runs `body` whole, then in 2, 3, 5 and 64 parts, each part alone on outputs pre-filled with a
// marker NaN: every output element must be written by exactly one part, with the bits of the
// whole run.
void check_parts(const SnippetBody& body, const std::vector<std::vector<float>>& inputs, const std::vector<uint64_t>& result_sizes, Isa isa) {
    Snippet s;
    SnippetOptions options;
    options.isa = isa;
    REQUIRE(s.compile(body, options) == Status::Ok);
    std::vector<float> scratch(s.scratch_bytes() / sizeof(float) + 1);
    std::vector<const float*> in;
    for (const auto& v : inputs) in.push_back(v.data());
    std::vector<std::vector<float>> whole;
    std::vector<float*> whole_ptrs;
    for (uint64_t n : result_sizes) whole.emplace_back(n);
    for (auto& w : whole) whole_ptrs.push_back(w.data());
    const Span<const float* const> ins(in.data(), in.size());
    REQUIRE(s.run(ins, Span<float* const>(whole_ptrs.data(), whole_ptrs.size()), scratch.data()) == Status::Ok);
    const uint32_t marker_bits = 0x7fa5a5a5u;
    float marker;
    std::memcpy(&marker, &marker_bits, 4);
    for (uint32_t parts : {2u, 3u, 5u, 64u}) {
        INFO("parts " << parts);
        std::vector<std::vector<float>> joined;
        std::vector<std::vector<uint32_t>> writes;
        for (uint64_t n : result_sizes) { joined.emplace_back(n, marker); writes.emplace_back(n, 0u); }
        for (uint32_t part = parts; part-- > 0;) {
            std::vector<std::vector<float>> alone;
            std::vector<float*> alone_ptrs;
            for (uint64_t n : result_sizes) alone.emplace_back(n, marker);
            for (auto& a : alone) alone_ptrs.push_back(a.data());
            REQUIRE(s.run(ins, Span<float* const>(alone_ptrs.data(), alone_ptrs.size()), scratch.data(), part, parts) == Status::Ok);
            for (size_t r = 0; r < alone.size(); ++r)
                for (size_t i = 0; i < alone[r].size(); ++i)
                    if (std::memcmp(&alone[r][i], &marker_bits, 4) != 0) { ++writes[r][i]; joined[r][i] = alone[r][i]; }
        }
        size_t wrong = 0;
        for (size_t r = 0; r < joined.size(); ++r)
            for (size_t i = 0; i < joined[r].size(); ++i)
                if (writes[r][i] != 1 || std::memcmp(&joined[r][i], &whole[r][i], 4) != 0) ++wrong;
        CHECK(wrong == 0);
    }
}

TEST_CASE("snippets: a run in parts equals one run, every element written by one part") {
    Isa isa = target();
    // Whole rows (7 x 33, and outer dimensions 2 x 3 x 5 x 17), column slices of one long row
    // (1000 floats: 16-float cuts, parts of no column when 64 > 1000/16), column slices of
    // many rows of a multiple of 16 floats (a conv's planes: 3 x 1024, 2 x 5 x 768 with a
    // value per row), broadcasts.
    const std::vector<std::vector<std::vector<int64_t>>> shapes = {
        {{1000}}, {{7, 33}}, {{2, 3, 5, 17}}, {{3, 4100}, {3, 1}}, {{5, 40}, {40}}, {{1, 37}, {6, 1}},
        {{3, 1024}}, {{2, 5, 768}, {5, 1}},
    };
    for (size_t k = 0; k < shapes.size(); ++k) {
        for (SnippetOp op : {SnippetOp::Tanh, SnippetOp::Add}) {
            std::vector<std::vector<int64_t>> op_shapes = shapes[k];
            if (snippet_op_arity(op) == 1) op_shapes.resize(1);
            else if (op_shapes.size() == 1) op_shapes.push_back(op_shapes[0]);
            Built b;
            build_op(&b.body, op, op_shapes);
            std::vector<std::vector<float>> inputs;
            for (size_t i = 0; i < op_shapes.size(); ++i) inputs.push_back(random_values(count(op_shapes[i]), (uint32_t)(k * 7 + i)));
            INFO(op_name(op) << " shapes " << k);
            check_parts(b.body, inputs, {shape_size(b.body.instruction(b.body.result_value(0)).shape)}, isa);
        }
    }
    // Random bodies: some results are broadcast (smaller than the domain), which part 0 runs whole.
    std::mt19937 rng(91);
    for (int trial = 0; trial < 40; ++trial) {
        RandomBody rb;
        make_random_body(&rb, rng, 3 + trial % 12);
        std::vector<std::vector<float>> inputs;
        if (!compilable_with_inputs(rb, isa, (uint32_t)trial * 11, &inputs)) continue;
        INFO("trial " << trial);
        check_parts(rb.body, inputs, rb.result_sizes, isa);
    }
    // A part outside the parts is refused.
    Built b;
    build_op(&b.body, SnippetOp::Relu, {{8}});
    Snippet s;
    SnippetOptions options;
    options.isa = isa;
    REQUIRE(s.compile(b.body, options) == Status::Ok);
    std::vector<float> x(8, 1.0f), y(8), scratch(s.scratch_bytes() / sizeof(float) + 1);
    const float* in[] = {x.data()};
    float* out[] = {y.data()};
    CHECK(s.run(in, out, scratch.data(), 2, 2) == Status::InvalidArgument);
    CHECK(std::string(s.last_error()) == "run: part out of range");
}

TEST_CASE("snippets: run_segments writes a block of rows of its own where the kernel reads the row strides at run time") {
    Isa isa = target();
    // (x * s + b) -> Relu over planes of 37 with a value per plane (kernel rows are the planes),
    // and x + y over 4 x 24 (one kernel row of 96: four segments in each).
    struct Case { std::vector<int64_t> x, per; int64_t segment, r0, r1, c0, c1; };
    const std::vector<Case> cases = {{{2, 5, 37}, {5, 1}, 37, 3, 9, 4, 30}, {{2, 5, 37}, {5, 1}, 37, 0, 10, 0, 37},
                                     {{4, 24}, {}, 24, 1, 4, 5, 21}};
    for (const Case& k : cases) {
        Built b;
        ValueId x, y;
        REQUIRE(b.body.parameter(Span<const int64_t>(k.x.data(), k.x.size()), &x) == Status::Ok);
        if (!k.per.empty()) {
            ValueId s, t, m, a;
            REQUIRE(b.body.parameter(Span<const int64_t>(k.per.data(), k.per.size()), &s) == Status::Ok);
            REQUIRE(b.body.parameter(Span<const int64_t>(k.per.data(), k.per.size()), &t) == Status::Ok);
            const ValueId xs[] = {x, s};
            REQUIRE(b.body.add(SnippetOp::Mul, Span<const ValueId>(xs, 2), 0, 0, &m) == Status::Ok);
            const ValueId at[] = {m, t};
            REQUIRE(b.body.add(SnippetOp::Add, Span<const ValueId>(at, 2), 0, 0, &a) == Status::Ok);
            REQUIRE(b.body.add(SnippetOp::Relu, Span<const ValueId>(&a, 1), 0, 0, &y) == Status::Ok);
        } else {
            ValueId other;
            REQUIRE(b.body.parameter(Span<const int64_t>(k.x.data(), k.x.size()), &other) == Status::Ok);
            const ValueId xo[] = {x, other};
            REQUIRE(b.body.add(SnippetOp::Add, Span<const ValueId>(xo, 2), 0, 0, &y) == Status::Ok);
        }
        REQUIRE(b.body.result(y) == Status::Ok);
        const size_t parameters = b.body.parameter_count();
        std::vector<std::vector<float>> inputs;
        for (size_t i = 0; i < parameters; ++i)
            inputs.push_back(random_values(i == 0 || k.per.empty() ? count(k.x) : count(k.per), (uint32_t)(40 + i)));
        std::vector<const float*> in;
        for (const auto& v : inputs) in.push_back(v.data());
        SnippetOptions options;
        options.isa = isa;
        options.tuning.row_strides_at_run = true;
        Snippet snippet;
        REQUIRE(snippet.compile(b.body, options) == Status::Ok);
        std::vector<float> whole(count(k.x)), scratch(snippet.scratch_bytes() / sizeof(float) + 1);
        float* whole_out[] = {whole.data()};
        REQUIRE(snippet.run(Span<const float* const>(in.data(), in.size()), whole_out, scratch.data()) == Status::Ok);
        const int64_t ld = k.c1 - k.c0 + 3;   // rows of the block, 3 floats apart beyond the range
        std::vector<float> block((size_t)((k.r1 - k.r0) * ld), -77.0f);
        float* block_out[] = {block.data()};
        INFO("segment " << k.segment << " rows " << k.r0 << ".." << k.r1 << " columns " << k.c0 << ".." << k.c1);
        REQUIRE(snippet.run_segments(Span<const float* const>(in.data(), in.size()), block_out, scratch.data(), k.segment, k.r0, k.r1, k.c0,
                                     k.c1, ld) == Status::Ok);
        int64_t bad = 0;
        for (int64_t r = k.r0; r < k.r1; ++r)
            for (int64_t c = 0; c < ld; ++c) {
                const float got = block[(size_t)((r - k.r0) * ld + c)];
                const float want = c < k.c1 - k.c0 ? whole[(size_t)(r * k.segment + k.c0 + c)] : -77.0f;
                if (std::memcmp(&got, &want, sizeof got) != 0 && !(std::isnan(got) && std::isnan(want))) ++bad;
            }
        CHECK(bad == 0);
        // A block row shorter than the range is refused, and so is a kernel with its row strides compiled in (x86).
        CHECK(snippet.run_segments(Span<const float* const>(in.data(), in.size()), block_out, scratch.data(), k.segment, k.r0, k.r1, k.c0,
                                   k.c1, k.c1 - k.c0 - 1) == Status::InvalidArgument);
        Snippet compiled_in;
        options.tuning.row_strides_at_run = false;
        REQUIRE(compiled_in.compile(b.body, options) == Status::Ok);
        const bool x86 = isa == Isa::Sse41 || isa == Isa::Avx2 || isa == Isa::Avx512;
        CHECK((compiled_in.run_segments(Span<const float* const>(in.data(), in.size()), block_out, scratch.data(), k.segment, k.r0, k.r1,
                                        k.c0, k.c1, ld) == Status::InvalidArgument) == x86);
    }
}

TEST_CASE("snippets: run_segments over whole segments, several to a kernel row, in place of the whole run") {
    Isa isa = target();
    // (x * s + b) -> Relu over 5 kernel rows of 96 with a value per row, in segments of 24 (or
    // 32): runs of whole segments go a call per kernel row, parts of segments one at a time.
    struct Case { int64_t segment, r0, r1, c0, c1; };
    const Case cases[] = {{24, 3, 13, 0, 24}, {24, 0, 20, 0, 24}, {32, 1, 14, 0, 32}, {24, 2, 11, 5, 24}, {24, 6, 7, 0, 24}};
    const std::vector<int64_t> shape = {5, 96}, per = {5, 1};
    Built b;
    ValueId x, scale, shift, m, a, y;
    REQUIRE(b.body.parameter(Span<const int64_t>(shape.data(), 2), &x) == Status::Ok);
    REQUIRE(b.body.parameter(Span<const int64_t>(per.data(), 2), &scale) == Status::Ok);
    REQUIRE(b.body.parameter(Span<const int64_t>(per.data(), 2), &shift) == Status::Ok);
    const ValueId xs[] = {x, scale};
    REQUIRE(b.body.add(SnippetOp::Mul, Span<const ValueId>(xs, 2), 0, 0, &m) == Status::Ok);
    const ValueId at[] = {m, shift};
    REQUIRE(b.body.add(SnippetOp::Add, Span<const ValueId>(at, 2), 0, 0, &a) == Status::Ok);
    REQUIRE(b.body.add(SnippetOp::Relu, Span<const ValueId>(&a, 1), 0, 0, &y) == Status::Ok);
    REQUIRE(b.body.result(y) == Status::Ok);
    const std::vector<float> xv = random_values(480, 50), sv = random_values(5, 51), tv = random_values(5, 52);
    const float* in[] = {xv.data(), sv.data(), tv.data()};
    SnippetOptions options;
    options.isa = isa;
    Snippet snippet;
    REQUIRE(snippet.compile(b.body, options) == Status::Ok);
    std::vector<float> whole(480), scratch(snippet.scratch_bytes() / sizeof(float) + 1);
    float* whole_out[] = {whole.data()};
    REQUIRE(snippet.run(Span<const float* const>(in, 3), whole_out, scratch.data()) == Status::Ok);
    for (const Case& k : cases) {
        INFO("segment " << k.segment << " segments " << k.r0 << ".." << k.r1 << " columns " << k.c0 << ".." << k.c1);
        std::vector<float> part(480, -77.0f);
        float* part_out[] = {part.data()};
        REQUIRE(snippet.run_segments(Span<const float* const>(in, 3), part_out, scratch.data(), k.segment, k.r0, k.r1, k.c0, k.c1) ==
                Status::Ok);
        int64_t bad = 0;
        for (int64_t i = 0; i < 480; ++i) {
            const int64_t r = i / k.segment, c = i % k.segment;
            const bool inside = r >= k.r0 && r < k.r1 && c >= k.c0 && c < k.c1;
            const float want = inside ? whole[(size_t)i] : -77.0f;
            bad += std::memcmp(&part[(size_t)i], &want, sizeof want) != 0;
        }
        CHECK(bad == 0);
    }
}

TEST_CASE("snippets: hundreds of values live at once spill into a large frame and stay exact") {
    // v_i = v_(i-1) + x for 300 values, all live until the alternating sum at the end: about
    // 280 spill slots, a frame above the 4 KiB a single AArch64 sub sp immediate reaches.
    Isa isa = target();
    Built b;
    int64_t shape[] = {2, 29};
    ValueId x, v[300], acc;
    REQUIRE(b.body.parameter(shape, &x) == Status::Ok);
    v[0] = x;
    for (int i = 1; i < 300; ++i) REQUIRE(b.body.binary(SnippetOp::Add, v[i - 1], x, &v[i]) == Status::Ok);
    acc = v[0];
    for (int i = 1; i < 300; ++i) REQUIRE(b.body.binary(SnippetOp::Sub, v[i], acc, &acc) == Status::Ok);
    REQUIRE(b.body.result(acc) == Status::Ok);
    if (isa != Isa::Ref) {
        Snippet s;
        SnippetOptions options;
        options.isa = isa;
        REQUIRE(s.compile(b.body, options) == Status::Ok);
        CHECK(s.stats().spilled_values > 256);
    }
    check_against_interpreter(b.body, {random_values(58, 5, 2.0f)}, {58}, isa);
    check_against_interpreter(b.body, {random_values(58, 6, 2.0f)}, {58}, isa, 3, 1);
}
