// runtime.h attention kernels (Attention, RotaryEmbedding, SwiGLU, TensorScatter,
// LinearAttention, CausalConvWithState): each kernel is driven through prepare/run on a
// one-node model and checked against values worked out by hand and against naive
// double-precision loops written here (softmax(Q K^T + bias) V with every mask kind, the
// linear-attention recurrences), and each kind of bad input against its exact Status and a
// message naming the node. Several threads and infer() (which must allocate nothing) too.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "alloc_counter.h"
#include "runtime.h"
#include "test_helpers.h"
#include "op_test.h"

using namespace tessel;

namespace {

using test::OpTest;
using test::MalformedPicker;
using test::Shape;
using I64 = std::vector<int64_t>;
using F32 = std::vector<float>;
using U8 = std::vector<uint8_t>;

using test::random_floats;

std::vector<float> iota_float(int n, float from = 0, float step = 1) {
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = from + step * (float)i;
    return v;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, double rtol = 1e-4, double atol = 1e-5) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i << ": " << got[i] << ", expected " << want[i]);
        if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
        else if (std::isinf(want[i])) CHECK(got[i] == want[i]);
        else CHECK(std::fabs((double)got[i] - want[i]) <= atol + rtol * std::fabs((double)want[i]));
    }
}

// ---- a naive Attention, in double, on 4-D (batch, heads, positions, size) data ----

struct AttentionCase {
    int64_t batch = 1, q_heads = 1, kv_heads = 1, q_len = 1, kv_len = 1, past = 0, head = 4, v_head = 4;
    std::vector<float> q, k, v, past_key, past_value;   // 4-D order
    Shape mask_shape;                                    // empty: no mask
    std::vector<float> mask;                             // float mask values
    std::vector<uint8_t> mask_bool;                      // or bool ones
    std::vector<int64_t> nonpad;                         // empty: none
    bool causal = false, three_d = false;
    float softcap = 0, scale = 0;                        // scale 0: the default
    int64_t qk_mode = -1;                                // -1: no qk output
    int64_t left_window = -1, right_window = -1;
    uint32_t opset = 24;

    int64_t total() const { return past + kv_len; }
    void fill(std::mt19937& rng) {
        q = random_floats(rng, (size_t)(batch * q_heads * q_len * head), -2, 2);
        k = random_floats(rng, (size_t)(batch * kv_heads * kv_len * head), -2, 2);
        v = random_floats(rng, (size_t)(batch * kv_heads * kv_len * v_head));
        past_key = random_floats(rng, (size_t)(batch * kv_heads * past * head), -2, 2);
        past_value = random_floats(rng, (size_t)(batch * kv_heads * past * v_head));
    }
    double mask_at(int64_t b, int64_t h, int64_t i, int64_t j) const {   // NumPy broadcast, the last dim padded
        if (mask_shape.empty()) return 0;
        int r = (int)mask_shape.size();
        if (j >= mask_shape[r - 1]) return -INFINITY;
        const int64_t index[4] = {b, h, i, j};
        int64_t at = 0;
        for (int d = 0; d < r; ++d) {
            int64_t n = mask_shape[d], x = index[4 - r + d];
            at = at * n + (n == 1 ? 0 : x);
        }
        if (!mask_bool.empty()) return mask_bool[at] ? 0.0 : -INFINITY;
        return mask[at];
    }
    // Y (4-D order) and the qk output of qk_mode.
    void expect(std::vector<float>* y, std::vector<float>* qk) const {
        int64_t T = total();
        y->assign((size_t)(batch * q_heads * q_len * v_head), 0.0f);
        qk->assign((size_t)(batch * q_heads * q_len * T), 0.0f);
        double s = scale != 0 ? scale : 1.0 / std::sqrt((double)head);
        for (int64_t b = 0; b < batch; ++b)
            for (int64_t h = 0; h < q_heads; ++h) {
                int64_t kv = h / (q_heads / kv_heads);
                int64_t offset = past ? past : !nonpad.empty() ? nonpad[b] - q_len : 0;
                for (int64_t i = 0; i < q_len; ++i) {
                    std::vector<double> score(T), bias(T);
                    bool any = false;
                    for (int64_t j = 0; j < T; ++j) {
                        const float* kr = j < past ? &past_key[((b * kv_heads + kv) * past + j) * head]
                                                   : &k[((b * kv_heads + kv) * kv_len + j - past) * head];
                        double dot = 0;
                        for (int64_t d = 0; d < head; ++d) dot += (double)q[((b * q_heads + h) * q_len + i) * head + d] * kr[d];
                        double x = dot * s;
                        float* out = qk->data() + ((b * q_heads + h) * q_len + i) * T;
                        if (qk_mode == 0) out[j] = (float)x;
                        if (softcap > 0) x = softcap * std::tanh(x / softcap);
                        if (qk_mode == 1) out[j] = (float)x;
                        bool masked = (causal && j > i + offset) || (left_window >= 0 && i + offset - j > left_window) ||
                                      (right_window >= 0 && j - (i + offset) > right_window) ||
                                      (!nonpad.empty() && j >= nonpad[b]);
                        double bj = mask_at(b, h, i, j) + (masked ? -INFINITY : 0.0);
                        any = any || bj != -INFINITY;
                        score[j] = x + bj;
                        if (qk_mode == 2) out[j] = (float)score[j];
                    }
                    double top = -INFINITY, sum = 0;
                    for (double x : score) top = x > top ? x : top;
                    for (double& x : score) sum += (x = std::exp(x - top));
                    for (int64_t j = 0; j < T; ++j) {
                        double p = any && top != -INFINITY ? score[j] / sum : 0.0;
                        if (qk_mode == 3) (*qk)[((b * q_heads + h) * q_len + i) * T + j] = (float)p;
                        const float* vr = j < past ? &past_value[((b * kv_heads + kv) * past + j) * v_head]
                                                   : &v[((b * kv_heads + kv) * kv_len + j - past) * v_head];
                        for (int64_t d = 0; d < v_head; ++d) (*y)[((b * q_heads + h) * q_len + i) * v_head + d] += (float)(p * vr[d]);
                    }
                }
            }
    }
};

// 4-D (batch, heads, positions, size) to 3-D (batch, positions, heads * size) and back.
std::vector<float> pack_heads(const std::vector<float>& x, int64_t batch, int64_t heads, int64_t len, int64_t size) {
    std::vector<float> out(x.size());
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < len; ++i)
                for (int64_t d = 0; d < size; ++d)
                    out[((b * len + i) * heads + h) * size + d] = x[((b * heads + h) * len + i) * size + d];
    return out;
}
std::vector<float> unpack_heads(const std::vector<float>& x, int64_t batch, int64_t heads, int64_t len, int64_t size) {
    std::vector<float> out(x.size());
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < len; ++i)
                for (int64_t d = 0; d < size; ++d)
                    out[((b * heads + h) * len + i) * size + d] = x[((b * len + i) * heads + h) * size + d];
    return out;
}

// Builds the node of `a` in t (every input a runtime input).
void attention_node(OpTest& t, const AttentionCase& a) {
    t.opset = a.opset;
    std::vector<InputRef> in;
    if (a.three_d) {
        in.push_back(t.input<float>({a.batch, a.q_len, a.q_heads * a.head}, pack_heads(a.q, a.batch, a.q_heads, a.q_len, a.head)));
        in.push_back(t.input<float>({a.batch, a.kv_len, a.kv_heads * a.head}, pack_heads(a.k, a.batch, a.kv_heads, a.kv_len, a.head)));
        in.push_back(
            t.input<float>({a.batch, a.kv_len, a.kv_heads * a.v_head}, pack_heads(a.v, a.batch, a.kv_heads, a.kv_len, a.v_head)));
    } else {
        in.push_back(t.input<float>({a.batch, a.q_heads, a.q_len, a.head}, a.q));
        in.push_back(t.input<float>({a.batch, a.kv_heads, a.kv_len, a.head}, a.k));
        in.push_back(t.input<float>({a.batch, a.kv_heads, a.kv_len, a.v_head}, a.v));
    }
    if (a.mask_shape.empty()) in.push_back(t.absent());
    else if (!a.mask_bool.empty()) in.push_back(t.input<uint8_t>(a.mask_shape, a.mask_bool, ElementType::Bool));
    else in.push_back(t.input<float>(a.mask_shape, a.mask));
    if (a.past) {
        in.push_back(t.input<float>({a.batch, a.kv_heads, a.past, a.head}, a.past_key));
        in.push_back(t.input<float>({a.batch, a.kv_heads, a.past, a.v_head}, a.past_value));
    } else {
        in.push_back(t.absent());
        in.push_back(t.absent());
    }
    if (!a.nonpad.empty()) in.push_back(t.input<int64_t>({a.batch}, a.nonpad));
    while (!in.empty() && in.back().producer == t.absent().producer) in.pop_back();
    t.op("Attention", in, a.qk_mode >= 0 ? 4 : a.past ? 3 : 1);
    if (a.three_d) {
        t.set_int("q_num_heads", a.q_heads);
        t.set_int("kv_num_heads", a.kv_heads);
    }
    if (a.causal) t.set_int("is_causal", 1);
    if (a.softcap != 0) t.set_float("softcap", a.softcap);
    if (a.scale != 0) t.set_float("scale", a.scale);
    if (a.qk_mode > 0) t.set_int("qk_matmul_output_mode", a.qk_mode);
    if (a.left_window != -1) t.set_int("left_window_size", a.left_window);
    if (a.right_window != -1) t.set_int("right_window_size", a.right_window);
}

// Runs `a` through the kernel and compares Y, present_key/value and qk with the naive loops.
void check_attention(const AttentionCase& a) {
    OpTest t;
    attention_node(t, a);
    t.go();
    std::vector<float> y, qk;
    a.expect(&y, &qk);
    if (a.three_d) {
        CHECK(t.shape(0) == Shape{a.batch, a.q_len, a.q_heads * a.v_head});
        check_close(unpack_heads(t.out<float>(0), a.batch, a.q_heads, a.q_len, a.v_head), y);
    } else {
        CHECK(t.shape(0) == Shape{a.batch, a.q_heads, a.q_len, a.v_head});
        check_close(t.out<float>(0), y);
    }
    if (t.outputs.size() > 2) {
        CHECK(t.shape(1) == Shape{a.batch, a.kv_heads, a.total(), a.head});
        CHECK(t.shape(2) == Shape{a.batch, a.kv_heads, a.total(), a.v_head});
        std::vector<float> key, value;   // past then the new positions, per (batch, head)
        for (int64_t b = 0; b < a.batch; ++b)
            for (int64_t h = 0; h < a.kv_heads; ++h) {
                int64_t bh = b * a.kv_heads + h;
                key.insert(key.end(), a.past_key.begin() + bh * a.past * a.head, a.past_key.begin() + (bh + 1) * a.past * a.head);
                key.insert(key.end(), a.k.begin() + bh * a.kv_len * a.head, a.k.begin() + (bh + 1) * a.kv_len * a.head);
                value.insert(value.end(), a.past_value.begin() + bh * a.past * a.v_head,
                             a.past_value.begin() + (bh + 1) * a.past * a.v_head);
                value.insert(value.end(), a.v.begin() + bh * a.kv_len * a.v_head, a.v.begin() + (bh + 1) * a.kv_len * a.v_head);
            }
        CHECK(t.out<float>(1) == key);
        CHECK(t.out<float>(2) == value);
    }
    if (a.qk_mode >= 0) {
        CHECK(t.shape(3) == Shape{a.batch, a.q_heads, a.q_len, a.total()});
        check_close(t.out<float>(3), qk);
    }
}

}  // namespace

TEST_CASE("attention ops: every op of the table is found") {
    for (const char* op : {"Attention", "RotaryEmbedding", "SwiGLU", "TensorScatter", "LinearAttention", "CausalConvWithState"}) {
        INFO(std::string(op));
        CHECK(find_builtin_kernel(op) != nullptr);
    }
}

// ---- Attention ------------------------------------------------------------------------------

TEST_CASE("Attention: a case by hand, the default scale, a fully masked row gives zeros") {
    {
        OpTest t;   // scores scale * [q.k0, q.k1] = [1, 0]: weights e/(e+1), 1/(e+1)
        t.opset = 23;
        t.op("Attention", {t.input<float>({1, 1, 1, 2}, {1, 0}), t.input<float>({1, 1, 2, 2}, {1, 0, 0, 0}),
                           t.input<float>({1, 1, 2, 1}, {2, 4})});
        t.set_float("scale", 1.0f);
        t.go();
        double e = std::exp(1.0);
        check_close(t.out<float>(), {(float)((2 * e + 4) / (e + 1))});
    }
    {
        OpTest t;   // default scale 1/sqrt(4): scores [2, 0] * 0.5 = [1, 0]
        t.opset = 23;
        t.op("Attention", {t.input<float>({1, 1, 1, 4}, {2, 0, 0, 0}), t.input<float>({1, 1, 2, 4}, {1, 0, 0, 0, 0, 0, 0, 0}),
                           t.input<float>({1, 1, 2, 1}, {2, 4})});
        t.go();
        double e = std::exp(1.0);
        check_close(t.out<float>(), {(float)((2 * e + 4) / (e + 1))});
    }
    {
        OpTest t;   // the second query row masks every key: zeros, not NaN (also in the mode-3 output)
        t.opset = 23;
        t.op("Attention", {t.input<float>({1, 1, 2, 2}, {1, 0, 0, 1}), t.input<float>({1, 1, 2, 2}, {1, 0, 0, 1}),
                           t.input<float>({1, 1, 2, 1}, {2, 4}), t.input<uint8_t>({2, 2}, {1, 1, 0, 0}, ElementType::Bool)},
             4);
        t.set_int("qk_matmul_output_mode", 3);
        t.go();
        F32 y = t.out<float>(0), p = t.out<float>(3);
        CHECK(y[1] == 0.0f);
        CHECK(p[2] == 0.0f);
        CHECK(p[3] == 0.0f);
        CHECK(p[0] + p[1] == doctest::Approx(1.0));
    }
}

TEST_CASE("Attention: against a naive softmax(QK^T)V: heads, GQA, 3-D, past, masks, causal, nonpad, softcap, qk modes") {
    std::mt19937 rng(7);
    AttentionCase base;
    base.batch = 2;
    base.q_heads = 3;
    base.kv_heads = 3;
    base.q_len = 5;
    base.kv_len = 6;
    base.head = 8;
    base.v_head = 8;
    SUBCASE("plain") { base.fill(rng); check_attention(base); }
    SUBCASE("v head size differs, explicit scale") {
        base.v_head = 5;
        base.scale = 0.3f;
        base.fill(rng);
        check_attention(base);
    }
    SUBCASE("GQA and MQA, 4-D and 3-D, causal (a block of rows spans heads)") {
        for (int64_t kv : {1, 3})
            for (bool three : {false, true})
                for (bool causal : {false, true}) {
                    AttentionCase a = base;
                    a.q_heads = 6;
                    a.kv_heads = kv;
                    a.three_d = three;
                    a.causal = causal;
                    a.mask_shape = {6, 5, 6};
                    a.mask = random_floats(rng, 180);
                    a.fill(rng);
                    check_attention(a);
                }
    }
    SUBCASE("GQA decode steps: one query per head, a past, causal, with and without a qk output") {
        for (int64_t mode : {-1, 2}) {
            AttentionCase a = base;
            a.q_heads = 8;
            a.kv_heads = 2;
            a.q_len = 1;
            a.kv_len = 1;
            a.past = 9;
            a.causal = true;
            a.qk_mode = mode;
            a.fill(rng);
            check_attention(a);
        }
    }
    SUBCASE("past and present, causal from the past length") {
        for (bool causal : {false, true})
            for (bool three : {false, true}) {
                AttentionCase a = base;
                a.past = 4;
                a.causal = causal;
                a.three_d = three;
                a.fill(rng);
                check_attention(a);
            }
    }
    SUBCASE("float and bool masks, broadcast and short last dimension, with and without causal") {
        const Shape shapes[] = {{5, 10}, {2, 1, 5, 10}, {2, 3, 5, 10}, {3, 1, 10}, {10}, {1, 5, 7}, {5, 1}};
        for (const Shape& shape : shapes)
            for (bool boolean : {false, true})
                for (bool causal : {false, true}) {
                    INFO("mask rank " << shape.size() << " last " << shape.back() << " bool " << boolean << " causal " << causal);
                    AttentionCase a = base;
                    a.past = 4;
                    a.causal = causal;
                    a.fill(rng);
                    a.mask_shape = shape;
                    size_t n = 1;
                    for (int64_t d : shape) n *= (size_t)d;
                    if (boolean) {
                        a.mask_bool.resize(n);
                        for (uint8_t& m : a.mask_bool) m = rng() % 4 != 0;
                    } else {
                        a.mask = random_floats(rng, n, -3, 1);
                        a.mask[rng() % n] = -INFINITY;
                    }
                    check_attention(a);
                }
    }
    SUBCASE("nonpad_kv_seqlen, alone, causal (offset nonpad - q_len, also negative) and with a mask") {
        for (bool causal : {false, true}) {
            AttentionCase a = base;
            a.nonpad = {6, 3};
            a.causal = causal;
            a.fill(rng);
            check_attention(a);
            a.mask_shape = {2, 1, 5, 4};
            a.mask_bool.resize(40);
            for (uint8_t& m : a.mask_bool) m = rng() % 3 != 0;
            check_attention(a);
        }
    }
    SUBCASE("softcap and every qk_matmul_output_mode") {
        for (int64_t mode = 0; mode < 4; ++mode) {
            AttentionCase a = base;
            a.softcap = 2.0f;
            a.qk_mode = mode;
            a.past = 2;
            a.causal = true;
            a.fill(rng);
            a.mask_shape = {5, 8};
            a.mask = random_floats(rng, 40);
            check_attention(a);
        }
    }
    SUBCASE("sliding window (opset 25), with causal and nonpad") {
        for (int64_t left : {-1, 0, 2})
            for (int64_t right : {-1, 0, 1}) {
                AttentionCase a = base;
                a.opset = 25;
                a.left_window = left;
                a.right_window = right;
                a.causal = right == 0;
                a.nonpad = {6, 5};
                a.fill(rng);
                check_attention(a);
            }
    }
    SUBCASE("odd sizes: one query, more query rows than a block, head sizes off the 8 lanes") {
        for (int64_t q_len : {1, 4, 9})
            for (int64_t head : {1, 3, 13}) {
                AttentionCase a = base;
                a.q_len = q_len;
                a.head = head;
                a.v_head = head + 1;
                a.fill(rng);
                check_attention(a);
            }
    }
}

TEST_CASE("Attention: several threads and infer() give the kernel's results and allocate nothing") {
    std::mt19937 rng(11);
    AttentionCase a;
    a.batch = 2;
    a.q_heads = 4;
    a.kv_heads = 2;
    a.q_len = 9;
    a.kv_len = 7;
    a.past = 3;
    a.head = 16;
    a.v_head = 8;
    a.causal = true;
    a.qk_mode = 2;
    a.fill(rng);
    std::vector<float> y, qk;
    a.expect(&y, &qk);
    for (const char* threads : {"1", "3"}) {
        OpTest t;
        attention_node(t, a);
        REQUIRE(t.infer("CPU", threads) == Status::Ok);
        check_close(t.out<float>(0), y);
        check_close(t.out<float>(3), qk);
    }
    OpTest t;
    attention_node(t, a);
    REQUIRE(t.infer("TEMPLATE") == Status::Ok);
    check_close(t.out<float>(0), y);
}

TEST_CASE("Attention: bad input") {
    auto q4 = [](OpTest& t) { return t.input<float>({1, 2, 3, 4}, F32(24, 0.5f)); };
    auto kv4 = [](OpTest& t) { return t.input<float>({1, 2, 5, 4}, F32(40, 0.5f)); };
    {
        OpTest t;   // before opset 23
        t.opset = 22;
        t.op("Attention", {q4(t), kv4(t), kv4(t)});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // nonpad_kv_seqlen at opset 23: 7 inputs
        t.opset = 23;
        t.op("Attention", {q4(t), kv4(t), kv4(t), t.absent(), t.absent(), t.absent(), t.input<int64_t>({1}, {5})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // float16
        t.opset = 23;
        t.op("Attention", {t.input<uint16_t>({1, 2, 3, 4}, std::vector<uint16_t>(24)), kv4(t), kv4(t)});
        t.fails(Status::Unsupported);
        CHECK(t.error().find("f16") != std::string::npos);
    }
    {
        OpTest t;   // ranks differ
        t.opset = 23;
        t.op("Attention", {t.input<float>({1, 3, 8}, F32(24)), kv4(t), kv4(t)});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // 3-D without head counts
        t.opset = 23;
        t.op("Attention", {t.input<float>({1, 3, 8}, F32(24)), t.input<float>({1, 5, 8}, F32(40)), t.input<float>({1, 5, 8}, F32(40))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // 3-D hidden size not a multiple of the heads
        t.opset = 23;
        t.op("Attention", {t.input<float>({1, 3, 8}, F32(24)), t.input<float>({1, 5, 8}, F32(40)), t.input<float>({1, 5, 8}, F32(40))});
        t.set_int("q_num_heads", 3);
        t.set_int("kv_num_heads", 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // head counts on 4-D inputs at opset 25
        t.opset = 25;
        t.op("Attention", {q4(t), kv4(t), kv4(t)});
        t.set_int("q_num_heads", 2);
        t.set_int("kv_num_heads", 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // query heads not a multiple of kv heads
        t.opset = 23;
        t.op("Attention", {t.input<float>({1, 3, 3, 4}, F32(36)), kv4(t), kv4(t)});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // K head size differs from Q's
        t.opset = 23;
        t.op("Attention", {q4(t), t.input<float>({1, 2, 5, 3}, F32(30)), kv4(t)});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // V positions differ from K's
        t.opset = 23;
        t.op("Attention", {q4(t), kv4(t), t.input<float>({1, 2, 4, 4}, F32(32))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // batch differs
        t.opset = 23;
        t.op("Attention", {q4(t), t.input<float>({2, 2, 5, 4}, F32(80)), t.input<float>({2, 2, 5, 4}, F32(80))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // past_key without past_value
        t.opset = 23;
        t.op("Attention", {q4(t), kv4(t), kv4(t), t.absent(), t.input<float>({1, 2, 2, 4}, F32(16))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // past_value of the wrong length
        t.opset = 23;
        t.op("Attention", {q4(t), kv4(t), kv4(t), t.absent(), t.input<float>({1, 2, 2, 4}, F32(16)), t.input<float>({1, 2, 3, 4}, F32(24))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // a mask wider than the keys
        t.opset = 23;
        t.op("Attention", {q4(t), kv4(t), kv4(t), t.input<float>({3, 6}, F32(18))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // a mask that does not broadcast over the queries
        t.opset = 23;
        t.op("Attention", {q4(t), kv4(t), kv4(t), t.input<float>({2, 5}, F32(10))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // an int64 mask
        t.opset = 23;
        t.op("Attention", {q4(t), kv4(t), kv4(t), t.input<int64_t>({3, 5}, I64(15))});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // nonpad_kv_seqlen with a past
        t.opset = 24;
        t.op("Attention", {q4(t), kv4(t), kv4(t), t.absent(), t.input<float>({1, 2, 2, 4}, F32(16)), t.input<float>({1, 2, 2, 4}, F32(16)),
                           t.input<int64_t>({1}, {5})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // nonpad_kv_seqlen of the wrong length
        t.opset = 24;
        t.op("Attention", {q4(t), kv4(t), kv4(t), t.absent(), t.absent(), t.absent(), t.input<int64_t>({2}, {5, 5})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // a constant nonpad_kv_seqlen past the keys: at prepare
        t.opset = 24;
        t.op("Attention", {q4(t), kv4(t), kv4(t), t.absent(), t.absent(), t.absent(), t.constant<int64_t>({1}, {6})});
        t.fails(Status::InvalidArgument);
        CHECK(t.error().find("nonpad_kv_seqlen 6 out of range 0..5") != std::string::npos);
    }
    {
        OpTest t;   // at run time
        t.opset = 24;
        t.op("Attention", {q4(t), kv4(t), kv4(t), t.absent(), t.absent(), t.absent(), t.input<int64_t>({1}, {-1})});
        t.run_fails("nonpad_kv_seqlen -1 out of range 0..5");
    }
    {
        OpTest t;   // through infer()
        t.opset = 24;
        t.op("Attention", {q4(t), kv4(t), kv4(t), t.absent(), t.absent(), t.absent(), t.input<int64_t>({1}, {9})});
        CHECK(t.infer() == Status::InvalidArgument);
        CHECK(t.infer_error.find("nonpad_kv_seqlen 9 out of range") != std::string::npos);
    }
    const char* bad_ints[][2] = {{"qk_matmul_output_mode", "4"}, {"is_causal", "2"}, {"softmax_precision", "7"}};
    for (auto& bad : bad_ints) {
        OpTest t;
        t.opset = 23;
        t.op("Attention", {q4(t), kv4(t), kv4(t)});
        t.set_int(bad[0], std::stoll(bad[1]));
        INFO(bad[0]);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // negative softcap
        t.opset = 23;
        t.op("Attention", {q4(t), kv4(t), kv4(t)});
        t.set_float("softcap", -1.0f);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // a window below -1 (opset 25)
        t.opset = 25;
        t.op("Attention", {q4(t), kv4(t), kv4(t)});
        t.set_int("left_window_size", -2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // five outputs
        t.opset = 23;
        t.op("Attention", {q4(t), kv4(t), kv4(t)}, 5);
        t.fails(Status::InvalidArgument);
    }
}

// ---- RotaryEmbedding ------------------------------------------------------------------------

TEST_CASE("RotaryEmbedding: halves and interleaved by hand, position ids, partial rotation, 3-D input") {
    {
        OpTest t;   // x1 = [1, 2], x2 = [3, 4], cos [0, 1], sin [1, 0]: [-3, 2, 1, 4]
        t.opset = 23;
        t.op("RotaryEmbedding", {t.input<float>({1, 1, 1, 4}, {1, 2, 3, 4}), t.input<float>({1, 1, 2}, {0, 1}),
                                 t.input<float>({1, 1, 2}, {1, 0})});
        t.go();
        CHECK(t.out<float>() == F32{-3, 2, 1, 4});
    }
    {
        OpTest t;   // interleaved: pairs (1, 2), (3, 4): [-2, 1, 3, 4]
        t.opset = 23;
        t.op("RotaryEmbedding", {t.input<float>({1, 1, 1, 4}, {1, 2, 3, 4}), t.input<float>({1, 1, 2}, {0, 1}),
                                 t.input<float>({1, 1, 2}, {1, 0})});
        t.set_int("interleaved", 1);
        t.go();
        CHECK(t.out<float>() == F32{-2, 1, 3, 4});
    }
    {
        OpTest t;   // position ids pick cache rows; rotary_embedding_dim 2 leaves the rest; two tokens
        t.opset = 23;
        t.op("RotaryEmbedding", {t.input<float>({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}), t.input<float>({3, 1}, {1, 0, 0.5f}),
                                 t.input<float>({3, 1}, {0, 1, 0.5f}), t.input<int64_t>({1, 2}, {1, 2})});
        t.set_int("rotary_embedding_dim", 2);
        t.go();   // token 0 (cos 0, sin 1): [-2, 1]; token 1 (0.5, 0.5): [-0.5, 5.5]
        CHECK(t.out<float>() == F32{-2, 1, 3, 4, -0.5f, 5.5f, 7, 8});
    }
    {
        OpTest t;   // 3-D (batch, sequence, heads * size): both heads of a token rotate by its angle
        t.opset = 23;
        t.op("RotaryEmbedding", {t.input<float>({1, 1, 4}, {1, 2, 3, 4}), t.input<float>({1, 1, 1}, {0}),
                                 t.input<float>({1, 1, 1}, {1})});
        t.set_int("num_heads", 2);
        t.go();
        CHECK(t.out<float>() == F32{-2, 1, -4, 3});
    }
    {
        OpTest t;   // a 4-D input with 2 heads and 2 tokens against the same loop over 3-D packing
        t.opset = 23;
        std::mt19937 rng(3);
        F32 x = random_floats(rng, 2 * 2 * 3 * 6), cos = random_floats(rng, 5 * 3), sin = random_floats(rng, 5 * 3);
        I64 ids = {0, 4, 2, 1, 1, 3};
        t.op("RotaryEmbedding", {t.input<float>({2, 2, 3, 6}, x), t.input<float>({5, 3}, cos), t.input<float>({5, 3}, sin),
                                 t.input<int64_t>({2, 3}, ids)});
        t.go();
        F32 want(x.size());
        for (int b = 0; b < 2; ++b)
            for (int h = 0; h < 2; ++h)
                for (int s = 0; s < 3; ++s) {
                    const float* xh = &x[((b * 2 + h) * 3 + s) * 6];
                    float* yh = &want[((b * 2 + h) * 3 + s) * 6];
                    int64_t p = ids[b * 3 + s];
                    for (int k = 0; k < 3; ++k) {
                        yh[k] = cos[p * 3 + k] * xh[k] - sin[p * 3 + k] * xh[k + 3];
                        yh[k + 3] = sin[p * 3 + k] * xh[k] + cos[p * 3 + k] * xh[k + 3];
                    }
                }
        check_close(t.out<float>(), want);
    }
}

TEST_CASE("RotaryEmbedding: bad input") {
    auto x = [](OpTest& t) { return t.input<float>({1, 1, 2, 4}, F32(8, 1)); };
    auto cache = [](OpTest& t) { return t.input<float>({1, 2, 2}, F32(4, 1)); };
    {
        OpTest t;
        t.opset = 22;
        t.op("RotaryEmbedding", {x(t), cache(t), cache(t)});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // 3-D without num_heads
        t.opset = 23;
        t.op("RotaryEmbedding", {t.input<float>({1, 2, 4}, F32(8)), cache(t), cache(t)});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // 2-D input
        t.opset = 23;
        t.op("RotaryEmbedding", {t.input<float>({2, 4}, F32(8)), cache(t), cache(t)});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // odd rotary_embedding_dim
        t.opset = 23;
        t.op("RotaryEmbedding", {x(t), cache(t), cache(t)});
        t.set_int("rotary_embedding_dim", 3);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // caches of the wrong width
        t.opset = 23;
        t.op("RotaryEmbedding", {x(t), t.input<float>({1, 2, 3}, F32(6)), t.input<float>({1, 2, 3}, F32(6))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // float16
        t.opset = 23;
        t.op("RotaryEmbedding", {t.input<uint16_t>({1, 1, 2, 4}, std::vector<uint16_t>(8)), cache(t), cache(t)});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // int32 position ids
        t.opset = 23;
        t.op("RotaryEmbedding", {x(t), t.input<float>({4, 2}, F32(8)), t.input<float>({4, 2}, F32(8)), t.input<int32_t>({1, 2}, {0, 1})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // a constant position id out of range
        t.opset = 23;
        t.op("RotaryEmbedding", {x(t), t.input<float>({4, 2}, F32(8)), t.input<float>({4, 2}, F32(8)), t.constant<int64_t>({1, 2}, {0, 4})});
        t.fails(Status::InvalidArgument);
        CHECK(t.error().find("position id 4 out of range 0..3") != std::string::npos);
    }
    {
        OpTest t;   // at run time
        t.opset = 23;
        t.op("RotaryEmbedding", {x(t), t.input<float>({4, 2}, F32(8)), t.input<float>({4, 2}, F32(8)), t.input<int64_t>({1, 2}, {-1, 0})});
        t.run_fails("position id -1 out of range 0..3");
    }
}

// ---- SwiGLU ---------------------------------------------------------------------------------

TEST_CASE("SwiGLU: A * sigmoid(alpha A) * B") {
    for (float alpha : {1.0f, 0.5f}) {
        OpTest t;
        t.opset = 28;
        F32 a = {-2, -0.5f, 0, 1, 3}, b = {1, 2, -1, 0.5f, 4};
        t.op("SwiGLU", {t.input<float>({5}, a), t.input<float>({5}, b)});
        if (alpha != 1.0f) t.set_float("alpha", alpha);
        t.go();
        F32 want(5);
        for (int i = 0; i < 5; ++i) want[i] = (float)(a[i] / (1 + std::exp(-(double)alpha * a[i])) * b[i]);
        check_close(t.out<float>(), want);
    }
}

TEST_CASE("SwiGLU: bad input") {
    {
        OpTest t;
        t.opset = 27;
        t.op("SwiGLU", {t.input<float>({2}, {1, 2}), t.input<float>({2}, {1, 2})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // no broadcasting
        t.opset = 28;
        t.op("SwiGLU", {t.input<float>({2, 2}, F32(4)), t.input<float>({2}, {1, 2})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.opset = 28;
        t.op("SwiGLU", {t.input<uint16_t>({2}, {0, 0}), t.input<uint16_t>({2}, {0, 0})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.opset = 28;
        t.op("SwiGLU", {t.input<float>({2}, {1, 2})});
        t.fails(Status::InvalidArgument);
    }
}

// ---- TensorScatter --------------------------------------------------------------------------

TEST_CASE("TensorScatter: linear and circular writes, default indices, another axis, int64 data") {
    {
        OpTest t;   // cache (2, 4, 1), update (2, 2, 1) at rows 1 and 2
        t.opset = 24;
        t.op("TensorScatter", {t.input<float>({2, 4, 1}, iota_float(8)), t.input<float>({2, 2, 1}, {10, 11, 20, 21}),
                               t.input<int64_t>({2}, {1, 2})});
        t.go();
        CHECK(t.out<float>() == F32{0, 10, 11, 3, 4, 5, 20, 21});
    }
    {
        OpTest t;   // circular: row 3 then row 0
        t.opset = 24;
        t.op("TensorScatter", {t.input<float>({1, 4, 1}, iota_float(4)), t.input<float>({1, 2, 1}, {10, 11}), t.input<int64_t>({1}, {3})});
        t.set_string("mode", "circular");
        t.go();
        CHECK(t.out<float>() == F32{11, 1, 2, 10});
    }
    {
        OpTest t;   // no write_indices: from 0; axis 1 of (1, 3, 2) with rows of 2
        t.opset = 24;
        t.op("TensorScatter", {t.input<int64_t>({1, 3, 2}, {0, 1, 2, 3, 4, 5}), t.input<int64_t>({1, 1, 2}, {8, 9})});
        t.set_int("axis", 1);
        t.go();
        CHECK(t.out<int64_t>() == I64{8, 9, 2, 3, 4, 5});
    }
    {
        OpTest t;   // 4-D (batch, heads, positions, size): every head of a batch at its index
        t.opset = 24;
        t.op("TensorScatter", {t.input<float>({2, 2, 3, 1}, F32(12, 0)), t.input<float>({2, 2, 1, 1}, {1, 2, 3, 4}),
                               t.input<int64_t>({2}, {2, 0})});
        t.go();
        CHECK(t.out<float>() == F32{0, 0, 1, 0, 0, 2, 3, 0, 0, 4, 0, 0});
    }
}

TEST_CASE("TensorScatter: bad input") {
    auto cache = [](OpTest& t) { return t.input<float>({2, 4, 1}, F32(8)); };
    auto update = [](OpTest& t) { return t.input<float>({2, 2, 1}, F32(4)); };
    {
        OpTest t;
        t.opset = 23;
        t.op("TensorScatter", {cache(t), update(t)});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // axis 0 is the batch
        t.opset = 24;
        t.op("TensorScatter", {cache(t), update(t)});
        t.set_int("axis", 0);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // update longer than the cache
        t.opset = 24;
        t.op("TensorScatter", {cache(t), t.input<float>({2, 5, 1}, F32(10))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // update of another type
        t.opset = 24;
        t.op("TensorScatter", {cache(t), t.input<int64_t>({2, 2, 1}, I64(4))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // unknown mode
        t.opset = 24;
        t.op("TensorScatter", {cache(t), update(t)});
        t.set_string("mode", "wrap");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // int32 write indices
        t.opset = 24;
        t.op("TensorScatter", {cache(t), update(t), t.input<int32_t>({2}, {0, 0})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // write_indices of the wrong length
        t.opset = 24;
        t.op("TensorScatter", {cache(t), update(t), t.input<int64_t>({3}, {0, 0, 0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // linear: 3 + 2 > 4
        t.opset = 24;
        t.op("TensorScatter", {cache(t), update(t), t.input<int64_t>({2}, {0, 3})});
        t.run_fails("write index 3 out of range 0..2");
    }
}

// ---- LinearAttention ------------------------------------------------------------------------

namespace {

struct LinearCase {
    int64_t batch = 2, tokens = 3, q_heads = 2, kv_heads = 2, key = 3, value = 2;
    std::string rule = "gated_delta";
    bool past = false, decay_per_head = false, beta_scalar = false;
    float scale = 0;
    F32 q, k, v, state, decay, beta;

    bool gated() const { return rule == "gated" || rule == "gated_delta"; }
    bool delta() const { return rule == "delta" || rule == "gated_delta"; }
    int64_t decay_width() const { return decay_per_head ? kv_heads : kv_heads * key; }
    int64_t beta_width() const { return beta_scalar ? 1 : kv_heads; }
    void fill(std::mt19937& rng) {
        q = random_floats(rng, (size_t)(batch * tokens * q_heads * key));
        k = random_floats(rng, (size_t)(batch * tokens * kv_heads * key));
        v = random_floats(rng, (size_t)(batch * tokens * kv_heads * value));
        state = random_floats(rng, (size_t)(batch * kv_heads * key * value));
        decay = random_floats(rng, (size_t)(batch * tokens * decay_width()), -1, 0);
        beta = random_floats(rng, (size_t)(batch * tokens * beta_width()), 0, 1);
    }
    // The recurrence of the spec, one token at a time, in double.
    void expect(F32* out, F32* present) const {
        out->assign((size_t)(batch * tokens * q_heads * value), 0);
        present->assign((size_t)(batch * kv_heads * key * value), 0);
        double s = scale != 0 ? scale : 1.0 / std::sqrt((double)key);
        int64_t group = q_heads / kv_heads;
        for (int64_t b = 0; b < batch; ++b)
            for (int64_t h = 0; h < kv_heads; ++h) {
                std::vector<double> S((size_t)(key * value), 0);
                if (past)
                    for (int64_t e = 0; e < key * value; ++e) S[e] = state[(b * kv_heads + h) * key * value + e];
                for (int64_t t = 0; t < tokens; ++t) {
                    int64_t token = b * tokens + t;
                    const float* kt = &k[(token * kv_heads + h) * key];
                    const float* vt = &v[(token * kv_heads + h) * value];
                    if (gated())
                        for (int64_t d = 0; d < key; ++d) {
                            double g = decay_per_head ? decay[token * kv_heads + h] : decay[token * kv_heads * key + h * key + d];
                            for (int64_t m = 0; m < value; ++m) S[d * value + m] *= std::exp(g);
                        }
                    std::vector<double> w(vt, vt + value);
                    if (delta()) {
                        double rate = beta[token * beta_width() + (beta_scalar ? 0 : h)];
                        for (int64_t m = 0; m < value; ++m) {
                            double r = 0;
                            for (int64_t d = 0; d < key; ++d) r += S[d * value + m] * kt[d];
                            w[m] = rate * (vt[m] - r);
                        }
                    }
                    for (int64_t d = 0; d < key; ++d)
                        for (int64_t m = 0; m < value; ++m) S[d * value + m] += kt[d] * w[m];
                    for (int64_t qh = h * group; qh < (h + 1) * group; ++qh)
                        for (int64_t m = 0; m < value; ++m) {
                            double o = 0;
                            for (int64_t d = 0; d < key; ++d) o += q[(token * q_heads + qh) * key + d] * S[d * value + m];
                            (*out)[(token * q_heads + qh) * value + m] = (float)(s * o);
                        }
                }
                for (int64_t e = 0; e < key * value; ++e) (*present)[(b * kv_heads + h) * key * value + e] = (float)S[e];
            }
    }
};

void check_linear(const LinearCase& a) {
    OpTest t;
    t.opset = 27;
    std::vector<InputRef> in = {t.input<float>({a.batch, a.tokens, a.q_heads * a.key}, a.q),
                                t.input<float>({a.batch, a.tokens, a.kv_heads * a.key}, a.k),
                                t.input<float>({a.batch, a.tokens, a.kv_heads * a.value}, a.v)};
    in.push_back(a.past ? t.input<float>({a.batch, a.kv_heads, a.key, a.value}, a.state) : t.absent());
    in.push_back(a.gated() ? t.input<float>({a.batch, a.tokens, a.decay_width()}, a.decay) : t.absent());
    in.push_back(a.delta() ? t.input<float>({a.batch, a.tokens, a.beta_width()}, a.beta) : t.absent());
    while (in.back().producer == t.absent().producer) in.pop_back();
    t.op("LinearAttention", in, 2);
    t.set_int("q_num_heads", a.q_heads);
    t.set_int("kv_num_heads", a.kv_heads);
    t.set_string("update_rule", a.rule.c_str());
    if (a.scale != 0) t.set_float("scale", a.scale);
    t.go();
    F32 out, present;
    a.expect(&out, &present);
    CHECK(t.shape(0) == Shape{a.batch, a.tokens, a.q_heads * a.value});
    CHECK(t.shape(1) == Shape{a.batch, a.kv_heads, a.key, a.value});
    check_close(t.out<float>(0), out);
    check_close(t.out<float>(1), present);
}

}  // namespace

TEST_CASE("LinearAttention: linear by hand, every rule against the recurrence, GQA, past state, decay and beta shapes") {
    {
        OpTest t;   // d_k = d_v = 1, scale 1: S = 3, then 3 + 2 * 4 = 11
        t.opset = 27;
        t.op("LinearAttention", {t.input<float>({1, 2, 1}, {1, 1}), t.input<float>({1, 2, 1}, {1, 2}), t.input<float>({1, 2, 1}, {3, 4})}, 2);
        t.set_int("q_num_heads", 1);
        t.set_int("kv_num_heads", 1);
        t.set_string("update_rule", "linear");
        t.set_float("scale", 1.0f);
        t.go();
        CHECK(t.out<float>(0) == F32{3, 11});
        CHECK(t.out<float>(1) == F32{11});
    }
    std::mt19937 rng(5);
    for (const char* rule : {"linear", "gated", "delta", "gated_delta"})
        for (int variant = 0; variant < 4; ++variant) {
            LinearCase a;
            a.rule = rule;
            a.past = variant & 1;
            a.q_heads = variant & 2 ? 4 : 2;   // GQA: 2 query heads per K/V head
            a.decay_per_head = variant == 2;
            a.beta_scalar = variant == 3;
            a.scale = variant == 1 ? 0.5f : 0.0f;
            a.fill(rng);
            INFO(rule << " variant " << variant);
            check_linear(a);
        }
    LinearCase mqa;   // one K/V head for 4 query heads, one token
    mqa.kv_heads = 1;
    mqa.q_heads = 4;
    mqa.tokens = 1;
    mqa.past = true;
    mqa.fill(rng);
    check_linear(mqa);
}

TEST_CASE("LinearAttention: bad input") {
    auto x = [](OpTest& t, int64_t width) { return t.input<float>({1, 2, width}, F32((size_t)(2 * width), 0.5f)); };
    auto node = [&](OpTest& t, const char* rule, std::vector<InputRef> extra) {
        t.opset = 27;
        std::vector<InputRef> in = {x(t, 4), x(t, 4), x(t, 4)};
        in.insert(in.end(), extra.begin(), extra.end());
        t.op("LinearAttention", in, 2);
        t.set_int("q_num_heads", 2);
        t.set_int("kv_num_heads", 2);
        t.set_string("update_rule", rule);
    };
    {
        OpTest t;
        node(t, "linear", {});
        t.opset = 26;
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        node(t, "quadratic", {});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // gated without decay
        node(t, "gated", {});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // linear with a beta
        node(t, "linear", {t.absent(), t.absent(), x(t, 2)});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // decay of a width that is neither heads nor heads * d_k
        node(t, "gated", {t.absent(), x(t, 3)});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // beta of width 3
        node(t, "delta", {t.absent(), t.absent(), x(t, 3)});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // past_state of the wrong shape
        node(t, "linear", {t.input<float>({1, 2, 2, 3}, F32(12))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // heads not a multiple
        t.opset = 27;
        t.op("LinearAttention", {x(t, 6), x(t, 4), x(t, 4)}, 2);
        t.set_int("q_num_heads", 3);
        t.set_int("kv_num_heads", 2);
        t.set_string("update_rule", "linear");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // no head counts
        t.opset = 27;
        t.op("LinearAttention", {x(t, 4), x(t, 4), x(t, 4)}, 2);
        t.set_string("update_rule", "linear");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // key width not kv_num_heads * d_k
        t.opset = 27;
        t.op("LinearAttention", {x(t, 4), x(t, 6), x(t, 4)}, 2);
        t.set_int("q_num_heads", 2);
        t.set_int("kv_num_heads", 2);
        t.set_string("update_rule", "linear");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // 4-D query
        t.opset = 27;
        t.op("LinearAttention", {t.input<float>({1, 2, 2, 2}, F32(8)), x(t, 4), x(t, 4)}, 2);
        t.set_int("q_num_heads", 2);
        t.set_int("kv_num_heads", 2);
        t.set_string("update_rule", "linear");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // float16
        t.opset = 27;
        t.op("LinearAttention", {t.input<uint16_t>({1, 2, 4}, std::vector<uint16_t>(8)), x(t, 4), x(t, 4)}, 2);
        t.set_int("q_num_heads", 2);
        t.set_int("kv_num_heads", 2);
        t.set_string("update_rule", "linear");
        t.fails(Status::Unsupported);
    }
}

// ---- CausalConvWithState --------------------------------------------------------------------

TEST_CASE("CausalConvWithState: by hand, past state, bias, SiLU, kernel 1, input shorter than the state") {
    {
        OpTest t;   // [0, 1, 2, 3] * [1, 10]: [10, 21, 32], state [3]
        t.opset = 27;
        t.op("CausalConvWithState", {t.input<float>({1, 1, 3}, {1, 2, 3}), t.input<float>({1, 1, 2}, {1, 10})}, 2);
        t.go();
        CHECK(t.out<float>(0) == F32{10, 21, 32});
        CHECK(t.out<float>(1) == F32{3});
    }
    {
        OpTest t;   // past [5], bias 100
        t.opset = 27;
        t.op("CausalConvWithState", {t.input<float>({1, 1, 3}, {1, 2, 3}), t.input<float>({1, 1, 2}, {1, 10}),
                                     t.input<float>({1}, {100}), t.input<float>({1, 1, 1}, {5})}, 2);
        t.go();
        CHECK(t.out<float>(0) == F32{115, 121, 132});
        CHECK(t.out<float>(1) == F32{3});
    }
    {
        OpTest t;   // SiLU ("swish"), two channels with their own kernels
        t.opset = 27;
        t.op("CausalConvWithState", {t.input<float>({1, 2, 2}, {1, -1, 2, 0.5f}), t.input<float>({2, 1, 1}, {1, -2})}, 2);
        t.set_string("activation", "swish");
        t.go();
        F32 conv = {1, -1, -4, -1}, want(4);
        for (int i = 0; i < 4; ++i) want[i] = (float)(conv[i] / (1 + std::exp(-(double)conv[i])));
        check_close(t.out<float>(0), want);
        CHECK(t.shape(1) == Shape{1, 2, 0});
    }
    {
        OpTest t;   // k 4, length 2, a past: the state keeps the past's tail and the input
        t.opset = 27;
        t.op("CausalConvWithState", {t.input<float>({1, 1, 2}, {7, 8}), t.input<float>({1, 1, 4}, {1, 0, 0, 1}), t.absent(),
                                     t.input<float>({1, 1, 3}, {4, 5, 6})}, 2);
        t.go();
        CHECK(t.out<float>(0) == F32{4 + 7, 5 + 8});
        CHECK(t.out<float>(1) == F32{6, 7, 8});
    }
    {
        OpTest t;   // the same without a past: zeros before the input
        t.opset = 27;
        t.op("CausalConvWithState", {t.input<float>({1, 1, 2}, {7, 8}), t.input<float>({1, 1, 4}, {1, 0, 0, 1})}, 2);
        t.go();
        CHECK(t.out<float>(0) == F32{7, 8});
        CHECK(t.out<float>(1) == F32{0, 7, 8});
    }
}

TEST_CASE("CausalConvWithState: bad input") {
    auto x = [](OpTest& t) { return t.input<float>({1, 2, 3}, F32(6, 1)); };
    auto w = [](OpTest& t) { return t.input<float>({2, 1, 2}, F32(4, 1)); };
    {
        OpTest t;
        t.opset = 26;
        t.op("CausalConvWithState", {x(t), w(t)}, 2);
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // weight (channels, 2, k)
        t.opset = 27;
        t.op("CausalConvWithState", {x(t), t.input<float>({2, 2, 2}, F32(8))}, 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // kernel size 0
        t.opset = 27;
        t.op("CausalConvWithState", {x(t), t.input<float>({2, 1, 0}, F32())}, 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // 2-D input
        t.opset = 27;
        t.op("CausalConvWithState", {t.input<float>({2, 3}, F32(6)), w(t)}, 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // bias of 3 values
        t.opset = 27;
        t.op("CausalConvWithState", {x(t), w(t), t.input<float>({3}, F32(3))}, 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // past_state of length 2 for k 2
        t.opset = 27;
        t.op("CausalConvWithState", {x(t), w(t), t.absent(), t.input<float>({1, 2, 2}, F32(4))}, 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.opset = 27;
        t.op("CausalConvWithState", {x(t), w(t)}, 2);
        t.set_string("activation", "relu");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.opset = 27;
        t.op("CausalConvWithState", {t.input<uint16_t>({1, 2, 3}, std::vector<uint16_t>(6)), w(t)}, 2);
        t.fails(Status::Unsupported);
    }
}

TEST_CASE("attention ops: random malformed nodes fail with a Status, never crash") {
    // Each node starts well formed (random sizes, optional inputs, attributes), then half of
    // them get one or two defects: an input's type, rank or dimension changed, an input
    // dropped, another output count, an attribute set to an odd value, another opset. A
    // prepare that succeeds must describe outputs that can be allocated and a run that
    // returns (Ok or a Status); index-like inputs hold values in and out of range.
    struct In {
        Shape shape;
        ElementType type = ElementType::Float32;
        bool present = true;
    };
    const char* int_names[] = {"q_num_heads", "kv_num_heads", "is_causal", "qk_matmul_output_mode", "softmax_precision",
                               "left_window_size", "right_window_size", "num_heads", "rotary_embedding_dim", "interleaved",
                               "axis"};
    const char* strings[][2] = {{"mode", "circular"}, {"mode", "bad"}, {"update_rule", "linear"}, {"update_rule", "delta"},
                                {"update_rule", "gated"}, {"update_rule", "bad"}, {"activation", "silu"}, {"activation", "bad"}};
    MalformedPicker picker(20261129);
    auto pick = [&](uint32_t n) { return (int64_t)picker.pick(n); };
    uint32_t prepared = 0, ran = 0;
    for (int iteration = 0; iteration < 12000; ++iteration) {
        OpTest t;
        std::vector<In> in;
        uint32_t outputs = 1;
        const char* op = nullptr;
        std::vector<std::pair<const char*, int64_t>> ints;
        std::vector<std::pair<const char*, const char*>> strs;
        int64_t b = 1 + pick(2), g = 1 + pick(2), kvh = 1 + pick(2), qh = kvh * g, sq = 1 + pick(5), skv = 1 + pick(5);
        int64_t d = 1 + pick(4), dv = 1 + pick(4);
        switch (pick(6)) {
            case 0: {
                op = "Attention";
                t.opset = 23 + (uint32_t)pick(3);
                int64_t past = pick(2) ? pick(3) : 0, total = past + skv;
                if (pick(2)) {
                    in = {{{b, qh, sq, d}}, {{b, kvh, skv, d}}, {{b, kvh, skv, dv}}};
                } else {
                    in = {{{b, sq, qh * d}}, {{b, skv, kvh * d}}, {{b, skv, kvh * dv}}};
                    ints = {{"q_num_heads", qh}, {"kv_num_heads", kvh}};
                }
                In mask{{sq, total - pick(2)}, pick(2) ? ElementType::Bool : ElementType::Float32, pick(2) == 0};
                if (pick(2)) mask.shape = {b, pick(2) ? 1 : qh, sq, total};
                in.push_back(mask);
                in.push_back({{b, kvh, past, d}, ElementType::Float32, past > 0});
                in.push_back({{b, kvh, past, dv}, ElementType::Float32, past > 0});
                if (t.opset >= 24 && past == 0 && pick(2)) in.push_back({{b}, ElementType::Int64});
                outputs = 1 + (uint32_t)pick(4);
                if (pick(2)) ints.push_back({"is_causal", 1});
                if (pick(3) == 0) ints.push_back({"qk_matmul_output_mode", pick(4)});
                if (t.opset >= 25 && pick(2)) ints.push_back({"left_window_size", pick(4) - 1});
                break;
            }
            case 1: {
                op = "RotaryEmbedding";
                t.opset = 23;
                int64_t half = 1 + pick(3);
                if (pick(2)) in = {{{b, kvh, sq, 2 * half}}};
                else {
                    in = {{{b, sq, kvh * 2 * half}}};
                    ints = {{"num_heads", kvh}};
                }
                if (pick(2)) {
                    int64_t positions = 1 + pick(6);
                    in.push_back({{positions, half}});
                    in.push_back({{positions, half}});
                    in.push_back({{b, sq}, ElementType::Int64});
                } else {
                    in.push_back({{b, sq, half}});
                    in.push_back({{b, sq, half}});
                }
                if (pick(2)) ints.push_back({"interleaved", 1});
                break;
            }
            case 2:
                op = "SwiGLU";
                t.opset = 28;
                in = {{{b, sq, d}}, {{b, sq, d}}};
                break;
            case 3: {
                op = "TensorScatter";
                t.opset = 24;
                ElementType type = picker.any_type();
                in = {{{b, kvh, skv + 2, d}, type}, {{b, kvh, skv, d}, type}, {{b}, ElementType::Int64, pick(4) != 0}};
                if (pick(2)) strs.push_back({"mode", "circular"});
                break;
            }
            case 4: {
                op = "LinearAttention";
                t.opset = 27;
                const char* rules[] = {"linear", "gated", "delta", "gated_delta"};
                int64_t rule = pick(4);
                in = {{{b, sq, qh * d}}, {{b, sq, kvh * d}}, {{b, sq, kvh * dv}}, {{b, kvh, d, dv}, ElementType::Float32, pick(2) == 0},
                      {{b, sq, pick(2) ? kvh : kvh * d}, ElementType::Float32, rule % 2 == 1},
                      {{b, sq, pick(2) ? kvh : 1}, ElementType::Float32, rule >= 2}};
                ints = {{"q_num_heads", qh}, {"kv_num_heads", kvh}};
                strs.push_back({"update_rule", rules[rule]});
                outputs = 2;
                break;
            }
            default: {
                op = "CausalConvWithState";
                t.opset = 27;
                int64_t k = 1 + pick(4);
                in = {{{b, d, sq}}, {{d, 1, k}}, {{d}, ElementType::Float32, pick(2) == 0}, {{b, d, k - 1}, ElementType::Float32, pick(2) == 0}};
                outputs = 2;
                if (pick(2)) strs.push_back({"activation", "silu"});
                break;
            }
        }
        for (int defects = pick(2) ? 0 : 1 + (int)pick(2); defects > 0; --defects) {
            In& x = in[(size_t)pick((uint32_t)in.size())];
            switch (pick(8)) {
                case 0: x.type = picker.any_type(); break;
                case 1: if (!x.shape.empty()) x.shape.pop_back(); break;
                case 2: x.shape.push_back(1 + pick(2)); break;
                case 3: if (!x.shape.empty()) x.shape[(size_t)pick((uint32_t)x.shape.size())] = pick(4); break;
                case 4: x.present = !x.present; break;
                case 5: outputs = 1 + (uint32_t)pick(5); break;
                case 6: ints.push_back({int_names[pick(11)], pick(3) ? pick(6) - 2 : picker.special()}); break;
                default:
                    if (pick(2)) t.opset = 20 + (uint32_t)pick(9);
                    else strs.push_back({strings[pick(8)][0], strings[pick(8)][1]});
                    break;
            }
        }
        std::vector<InputRef> refs;
        for (const In& x : in) {
            if (!x.present) { refs.push_back(t.absent()); continue; }
            size_t elements = 1;
            for (int64_t dim : x.shape) elements *= (size_t)dim;
            std::vector<unsigned char> bytes(elements * element_size(x.type));
            for (unsigned char& byte : bytes) byte = (unsigned char)picker.rng();
            if (x.type == ElementType::Int64)
                for (size_t k = 0; k < elements; ++k) {
                    int64_t v = pick(10) == 0 ? picker.special() : pick(8) - 1;
                    std::memcpy(&bytes[k * 8], &v, 8);
                }
            if (x.type == ElementType::Float32 && pick(4))
                for (size_t k = 0; k < elements; ++k) {
                    float v = pick(20) == 0 ? -INFINITY : (float)pick(7) - 3.0f;
                    std::memcpy(&bytes[k * 4], &v, 4);
                }
            if (x.type == ElementType::Bool) for (unsigned char& byte : bytes) byte &= 1;
            refs.push_back(pick(3) == 0 ? t.constant<unsigned char>(x.shape, bytes, x.type)
                                        : t.input<unsigned char>(x.shape, bytes, x.type));
        }
        while (!refs.empty() && refs.back().producer == t.absent().producer && pick(2)) refs.pop_back();
        t.op(op, refs, outputs);
        for (auto& i : ints) t.set_int(i.first, i.second);
        for (auto& s : strs) t.set_string(s.first, s.second);
        if (pick(8) == 0) t.set_float("scale", pick(2) ? 0.0f : -1.5f);
        if (pick(8) == 0) t.set_float("softcap", pick(2) ? 2.0f : -1.0f);
        INFO(std::string(op) << " opset " << t.opset << " iteration " << iteration);
        t.prepare_and_run_any(&prepared, &ran);
    }
    MESSAGE("prepared " << prepared << ", ran " << ran);
    CHECK(prepared > 4000);   // the generator reaches the kernels' bodies, not only their checks
    CHECK(ran > 3000);
}
