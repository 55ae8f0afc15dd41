// runtime.h recurrent layers (RNN, GRU, LSTM), signal ops (DFT, STFT, HannWindow,
// HammingWindow, BlackmanWindow, MelWeightMatrix) and LpPool, LRN, Celu, CumProd, Det: small
// cases worked out by hand, random cases against plain double-precision references written
// here (for the recurrent layers every direction, layout, sequence_lens, initial state,
// peepholes, clip, input_forget, linear_before_reset and activation), and each kind of bad
// input against its exact Status and a message naming the node. infer() through a Core must
// allocate nothing.
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
using F32 = std::vector<float>;
using I64 = std::vector<int64_t>;
using I32 = std::vector<int32_t>;

void check_close(const std::vector<float>& got, const std::vector<double>& want, double tolerance = 1e-5) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i << ": " << got[i] << ", expected " << want[i]);
        CHECK(std::fabs((double)got[i] - want[i]) <= tolerance * (1.0 + std::fabs(want[i])));
    }
}
void check_close(const std::vector<float>& got, const std::vector<float>& want, double tolerance = 1e-5) {
    check_close(got, std::vector<double>(want.begin(), want.end()), tolerance);
}

// The names of a comma-separated list (spaces trimmed) as a STRINGS attribute.
void set_names(Model& model, NodeId node, const char* attribute, const std::string& list) {
    std::vector<std::string> names;
    for (size_t begin = 0; begin <= list.size();) {
        size_t end = list.find(',', begin);
        if (end == std::string::npos) end = list.size();
        std::string name = list.substr(begin, end - begin);
        while (!name.empty() && name.front() == ' ') name.erase(0, 1);
        while (!name.empty() && name.back() == ' ') name.pop_back();
        names.push_back(name);
        begin = end + 1;
    }
    std::vector<StringView> views;
    for (const std::string& n : names) views.push_back(StringView(n.data(), n.size()));
    REQUIRE(model.set_strings(node, attribute, Span<const StringView>(views.data(), views.size())) == Status::Ok);
}

using test::random_floats;

const double kPi = 3.14159265358979323846;

// ---- the recurrent reference ------------------------------------------------------------------

struct Activation {
    std::string name = "Tanh";
    double alpha = 0, beta = 0;
    double operator()(double x) const {
        if (name == "Relu") return x > 0 ? x : 0;
        if (name == "Tanh") return std::tanh(x);
        if (name == "Sigmoid") return 1 / (1 + std::exp(-x));
        if (name == "Affine") return alpha * x + beta;
        if (name == "LeakyRelu") return x >= 0 ? x : alpha * x;
        if (name == "ThresholdedRelu") return x > alpha ? x : 0;
        if (name == "ScaledTanh") return alpha * std::tanh(beta * x);
        if (name == "HardSigmoid") return std::fmax(0, std::fmin(1, alpha * x + beta));
        if (name == "Elu") return x >= 0 ? x : alpha * (std::exp(x) - 1);
        if (name == "Softsign") return x / (1 + std::fabs(x));
        if (name == "Softplus") return std::log(1 + std::exp(x));
        FAIL("unknown activation " << name);
        return 0;
    }
};

enum Kind { kRnn, kGru, kLstm };

// One recurrent node: its inputs, attributes and the reference's outputs.
struct Recurrent {
    Kind kind = kRnn;
    int64_t seq = 1, batch = 1, input = 1, hidden = 1;
    std::string direction = "forward";
    bool layout = false;   // batch first
    bool bias = false, lens = false, initial_h = false, initial_c = false, peepholes = false;
    bool has_clip = false, input_forget = false, linear_before_reset = false;
    float clip = 0;
    std::vector<Activation> activations;   // empty: the defaults
    std::string activation_names;          // the attribute, when set
    F32 alphas, betas;
    F32 x, w, r, b, h0, c0, p;
    I32 seq_lens;

    int dirs() const { return direction == "bidirectional" ? 2 : 1; }
    int64_t gates() const { return kind == kRnn ? 1 : kind == kGru ? 3 : 4; }
    const char* op() const { return kind == kRnn ? "RNN" : kind == kGru ? "GRU" : "LSTM"; }

    void randomize(std::mt19937& rng) {
        int64_t gh = gates() * hidden;
        x = random_floats(rng, (size_t)(seq * batch * input), -1.0f, 1.0f);
        w = random_floats(rng, (size_t)(dirs() * gh * input), -0.6f, 0.6f);
        r = random_floats(rng, (size_t)(dirs() * gh * hidden), -0.6f, 0.6f);
        b = random_floats(rng, (size_t)(dirs() * 2 * gh), -0.3f, 0.3f);
        h0 = random_floats(rng, (size_t)(dirs() * batch * hidden), -0.5f, 0.5f);
        c0 = random_floats(rng, (size_t)(dirs() * batch * hidden), -0.5f, 0.5f);
        p = random_floats(rng, (size_t)(dirs() * 3 * hidden), -0.4f, 0.4f);
        seq_lens.assign((size_t)batch, 0);
        for (int32_t& l : seq_lens) l = (int32_t)(rng() % (uint32_t)(seq + 1));
    }

    Shape x_shape() const { return layout ? Shape{batch, seq, input} : Shape{seq, batch, input}; }
    Shape state_shape() const { return layout ? Shape{batch, dirs(), hidden} : Shape{dirs(), batch, hidden}; }
    int64_t state_at(int d, int64_t bi) const { return (layout ? bi * dirs() + d : d * batch + bi) * hidden; }
    int64_t x_at(int64_t t, int64_t bi) const { return (layout ? bi * seq + t : t * batch + bi) * input; }
    int64_t y_at(int64_t t, int d, int64_t bi) const {
        return (layout ? (bi * seq + t) * dirs() + d : (t * dirs() + d) * batch + bi) * hidden;
    }

    // The node in t: every input present (or absent as asked) and every output.
    void build(OpTest& t, uint32_t outputs) const {
        int64_t gh = gates() * hidden;
        std::vector<InputRef> in = {t.input<float>(x_shape(), x), t.input<float>({dirs(), gh, input}, w),
                                    t.input<float>({dirs(), gh, hidden}, r)};
        in.push_back(bias ? t.input<float>({dirs(), 2 * gh}, b) : t.absent());
        in.push_back(lens ? t.input<int32_t>({batch}, seq_lens) : t.absent());
        in.push_back(initial_h ? t.input<float>(state_shape(), h0) : t.absent());
        if (kind == kLstm) {
            in.push_back(initial_c ? t.input<float>(state_shape(), c0) : t.absent());
            in.push_back(peepholes ? t.input<float>({dirs(), 3 * hidden}, p) : t.absent());
        }
        t.op(op(), in, outputs);
        t.set_int("hidden_size", hidden);
        t.set_string("direction", direction.c_str());
        if (layout) t.set_int("layout", 1);
        if (has_clip) t.set_float("clip", clip);
        if (input_forget) t.set_int("input_forget", 1);
        if (linear_before_reset) t.set_int("linear_before_reset", 1);
        if (!activation_names.empty()) set_names(t.model, t.node, "activations", activation_names);
        if (!alphas.empty()) REQUIRE(t.model.set_floats(t.node, "activation_alpha", Span<const float>(alphas.data(), alphas.size())) == Status::Ok);
        if (!betas.empty()) REQUIRE(t.model.set_floats(t.node, "activation_beta", Span<const float>(betas.data(), betas.size())) == Status::Ok);
    }

    Activation function(int d, int k) const {
        int per = kind == kRnn ? 1 : kind == kGru ? 2 : 3;
        if (!activations.empty() && k < per) return activations[activations.size() == (size_t)per ? k : d * per + k];
        Activation a;
        a.name = (kind != kRnn && k == 0) ? "Sigmoid" : "Tanh";
        return a;
    }

    // Y, Y_h, Y_c in double.
    void reference(std::vector<double>* y, std::vector<double>* y_h, std::vector<double>* y_c) const {
        int64_t gh = gates() * hidden, H = hidden;
        y->assign((size_t)(seq * dirs() * batch * hidden), 0.0);
        y_h->assign((size_t)(dirs() * batch * hidden), 0.0);
        y_c->assign(y_h->size(), 0.0);
        auto clipped = [&](double v) { return has_clip ? std::fmax(-clip, std::fmin(clip, v)) : v; };
        for (int d = 0; d < dirs(); ++d) {
            Activation f = function(d, 0), g = function(d, 1), h_fn = function(d, 2);
            bool rev = direction == "reverse" || d == 1;
            const float* W = &w[(size_t)(d * gh * input)];
            const float* R = &r[(size_t)(d * gh * hidden)];
            for (int64_t bi = 0; bi < batch; ++bi) {
                std::vector<double> h(H, 0.0), c(H, 0.0);
                for (int64_t j = 0; j < H; ++j) {
                    if (initial_h) h[j] = h0[state_at(d, bi) + j];
                    if (initial_c && kind == kLstm) c[j] = c0[state_at(d, bi) + j];
                }
                int64_t len = lens ? seq_lens[bi] : seq;
                for (int64_t s = 0; s < len; ++s) {
                    int64_t t = rev ? len - 1 - s : s;
                    const float* xt = &x[x_at(t, bi)];
                    std::vector<double> xw(gh), hr(gh);
                    for (int64_t n = 0; n < gh; ++n) {
                        double a = bias ? b[d * 2 * gh + n] : 0, q = bias ? b[d * 2 * gh + gh + n] : 0;
                        for (int64_t k = 0; k < input; ++k) a += xt[k] * W[n * input + k];
                        for (int64_t k = 0; k < H; ++k) q += h[k] * R[n * H + k];
                        xw[n] = a;
                        hr[n] = q;
                    }
                    std::vector<double> next(H);
                    if (kind == kRnn) {
                        for (int64_t j = 0; j < H; ++j) next[j] = f(clipped(xw[j] + hr[j]));
                    } else if (kind == kGru) {
                        for (int64_t j = 0; j < H; ++j) {
                            double z = f(clipped(xw[j] + hr[j])), rr = f(clipped(xw[H + j] + hr[H + j]));
                            double rbh = bias ? b[d * 2 * gh + gh + 2 * H + j] : 0, hh;
                            if (linear_before_reset) {
                                hh = g(clipped(xw[2 * H + j] + rr * hr[2 * H + j]));
                            } else {
                                double q = rbh;
                                for (int64_t k = 0; k < H; ++k) {
                                    double rk = f(clipped(xw[H + k] + hr[H + k]));
                                    q += rk * h[k] * R[(2 * H + j) * H + k];
                                }
                                hh = g(clipped(xw[2 * H + j] + q));
                            }
                            next[j] = (1 - z) * hh + z * h[j];
                        }
                    } else {
                        const float* P = peepholes ? &p[(size_t)(d * 3 * H)] : nullptr;
                        for (int64_t j = 0; j < H; ++j) {
                            double gi = xw[j] + hr[j] + (P ? P[j] * c[j] : 0);
                            double gf = xw[2 * H + j] + hr[2 * H + j] + (P ? P[2 * H + j] * c[j] : 0);
                            double i = f(clipped(gi));
                            double fg = input_forget ? 1 - i : f(clipped(gf));
                            double cc = g(clipped(xw[3 * H + j] + hr[3 * H + j]));
                            c[j] = fg * c[j] + i * cc;
                            double o = f(clipped(xw[H + j] + hr[H + j] + (P ? P[H + j] * c[j] : 0)));
                            next[j] = o * h_fn(c[j]);
                        }
                    }
                    h = next;
                    for (int64_t j = 0; j < H; ++j) (*y)[y_at(t, d, bi) + j] = h[j];
                }
                for (int64_t j = 0; j < H; ++j) {
                    (*y_h)[state_at(d, bi) + j] = h[j];
                    (*y_c)[state_at(d, bi) + j] = c[j];
                }
            }
        }
    }

    void check(OpTest& t) const {
        std::vector<double> y, y_h, y_c;
        reference(&y, &y_h, &y_c);
        check_close(t.out<float>(0), y, 1e-4);
        check_close(t.out<float>(1), y_h, 1e-4);
        if (kind == kLstm) check_close(t.out<float>(2), y_c, 1e-4);
    }
};

}  // namespace

TEST_CASE("recurrent, signal, pool and scan ops: every op of the tables is found") {
    for (const char* op : {"RNN", "GRU", "LSTM", "DFT", "STFT", "HannWindow", "HammingWindow", "BlackmanWindow",
                           "MelWeightMatrix", "LpPool", "LRN", "Celu", "CumProd", "Det"}) {
        INFO(std::string(op));
        CHECK(find_builtin_kernel(op) != nullptr);
    }
}

// ---- recurrent layers ---------------------------------------------------------------------------

TEST_CASE("RNN: two steps worked out by hand, Y and Y_h") {
    OpTest t;   // h1 = tanh(0.5 * 1 + 0.1), h2 = tanh(0.5 * 2 + 0.25 * h1 + 0.1)
    t.op("RNN", {t.input<float>({2, 1, 1}, {1, 2}), t.input<float>({1, 1, 1}, {0.5f}), t.input<float>({1, 1, 1}, {0.25f}),
                 t.input<float>({1, 2}, {0.1f, 0.0f})}, 2);
    t.set_int("hidden_size", 1);
    t.go();
    CHECK(t.shape(0) == Shape{2, 1, 1, 1});
    CHECK(t.shape(1) == Shape{1, 1, 1});
    double h1 = std::tanh(0.6), h2 = std::tanh(1.1 + 0.25 * h1);
    check_close(t.out<float>(0), std::vector<double>{h1, h2});
    check_close(t.out<float>(1), std::vector<double>{h2});
}

TEST_CASE("LSTM: one step worked out by hand") {
    // hidden 1, input 1: W rows i, o, f, c = 1, 2, 3, 4; no R effect (h0 = 0); x = 0.5
    OpTest t;
    t.op("LSTM", {t.input<float>({1, 1, 1}, {0.5f}), t.input<float>({1, 4, 1}, {1, 2, 3, 4}), t.input<float>({1, 4, 1}, {9, 9, 9, 9})}, 3);
    t.go();
    auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
    double c = sigmoid(0.5) * std::tanh(2.0);   // f * 0 + i * g
    double h = sigmoid(1.0) * std::tanh(c);
    check_close(t.out<float>(0), std::vector<double>{h});
    check_close(t.out<float>(1), std::vector<double>{h});
    check_close(t.out<float>(2), std::vector<double>{c});
}

TEST_CASE("GRU: one step worked out by hand, both linear_before_reset") {
    // hidden 1, input 1, x = 1, h0 = 0.5: z = s(0.2 + 0.1 * 0.5), r = s(0.4 + 0.3 * 0.5);
    // h~ = tanh(0.6 + r * 0.5 * 0.7) (default) or tanh(0.6 + r * (0.5 * 0.7)) (the same here
    // without Rbh); Rbh = 0.2 separates them.
    for (int lbr = 0; lbr < 2; ++lbr) {
        OpTest t;
        t.op("GRU", {t.input<float>({1, 1, 1}, {1}), t.input<float>({1, 3, 1}, {0.2f, 0.4f, 0.6f}),
                     t.input<float>({1, 3, 1}, {0.1f, 0.3f, 0.7f}), t.input<float>({1, 6}, {0, 0, 0, 0, 0, 0.2f}),
                     t.absent(), t.input<float>({1, 1, 1}, {0.5f})}, 2);
        if (lbr) t.set_int("linear_before_reset", 1);
        t.go();
        auto s = [](double v) { return 1 / (1 + std::exp(-v)); };
        double z = s(0.25), r = s(0.55);
        double hh = lbr ? std::tanh(0.6 + r * (0.35 + 0.2)) : std::tanh(0.6 + r * 0.5 * 0.7 + 0.2);
        double h = (1 - z) * hh + z * 0.5;
        check_close(t.out<float>(0), std::vector<double>{h});
        check_close(t.out<float>(1), std::vector<double>{h});
    }
}

TEST_CASE("RNN, GRU, LSTM: random cases against the reference (directions, layouts, lengths, states)") {
    std::mt19937 rng(33);
    for (int kind = 0; kind < 3; ++kind)
        for (const char* direction : {"forward", "reverse", "bidirectional"})
            for (int variant = 0; variant < 8; ++variant) {
                Recurrent n;
                n.kind = (Kind)kind;
                n.direction = direction;
                n.seq = 1 + rng() % 5;
                n.batch = 1 + rng() % 6;
                n.input = 1 + rng() % 7;
                n.hidden = 1 + rng() % 20;
                n.layout = variant & 1;
                n.bias = variant & 2;
                n.lens = variant & 4;
                n.initial_h = n.initial_c = variant != 3;
                n.peepholes = variant >= 5;
                n.has_clip = variant == 6;
                n.clip = 0.7f;
                n.input_forget = kind == kLstm && variant == 7;
                n.linear_before_reset = kind == kGru && variant >= 4;
                n.randomize(rng);
                INFO(n.op() << " " << direction << " variant " << variant);
                OpTest t;
                t.opset = 14;
                n.build(t, kind == kLstm ? 3 : 2);
                t.go();
                n.check(t);
            }
}

TEST_CASE("RNN, GRU, LSTM: every activation with its alpha and beta") {
    std::mt19937 rng(7);
    struct Case { Kind kind; const char* names; F32 alphas, betas; bool bidirectional = false; };
    const Case cases[] = {
        {kRnn, "Relu", {}, {}},
        {kRnn, "LeakyRelu", {0.3f}, {}},
        {kRnn, "ThresholdedRelu", {0.2f}, {}},
        {kRnn, "Elu", {}, {}},   // default alpha 1
        {kRnn, "Softsign", {}, {}},
        {kRnn, "Softplus", {}, {}},
        {kGru, "HardSigmoid, Affine", {0.3f, 0.5f}, {0.4f, -0.1f}},
        {kGru, "sigmoid,scaledtanh", {}, {}},   // names ignore case; ScaledTanh's defaults 1, 1
        {kLstm, "HardSigmoid,ScaledTanh,Elu", {0.25f, 0.9f, 0.5f}, {0.5f, 1.1f}},
        {kLstm, "Sigmoid,Tanh,Tanh,Sigmoid,Relu,Affine", {2.0f}, {0.25f}, true},   // per direction
    };
    for (const Case& c : cases) {
        INFO(c.names);
        Recurrent n;
        n.kind = c.kind;
        n.seq = 3;
        n.batch = 2;
        n.input = 3;
        n.hidden = 4;
        n.bias = n.initial_h = true;
        n.activation_names = c.names;
        n.alphas = c.alphas;
        n.betas = c.betas;
        n.direction = c.bidirectional ? "bidirectional" : "forward";
        // the reference's view of the list: alphas and betas consumed in order
        size_t na = 0, nb = 0;
        std::string list = c.names;
        for (size_t begin = 0; begin <= list.size();) {
            size_t end = list.find(',', begin);
            if (end == std::string::npos) end = list.size();
            std::string name = list.substr(begin, end - begin);
            while (!name.empty() && name[0] == ' ') name.erase(0, 1);
            for (const char* known : {"Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh",
                                      "HardSigmoid", "Elu", "Softsign", "Softplus"}) {
                std::string k = known, lower = k;
                for (char& ch : lower) ch = (char)std::tolower(ch);
                if (name == k || name == lower) name = k;
            }
            Activation a;
            a.name = name;
            bool alpha = name == "Affine" || name == "LeakyRelu" || name == "ThresholdedRelu" || name == "ScaledTanh" ||
                         name == "HardSigmoid" || name == "Elu";
            bool beta = name == "Affine" || name == "ScaledTanh" || name == "HardSigmoid";
            double alpha0 = name == "LeakyRelu" ? 0.01 : name == "HardSigmoid" ? 0.2 : 1.0;
            double beta0 = name == "HardSigmoid" ? 0.5 : name == "ScaledTanh" ? 1.0 : 0.0;
            a.alpha = alpha ? (na < c.alphas.size() ? c.alphas[na++] : alpha0) : 0;
            a.beta = beta ? (nb < c.betas.size() ? c.betas[nb++] : beta0) : 0;
            n.activations.push_back(a);
            begin = end + 1;
        }
        n.randomize(rng);
        OpTest t;
        n.build(t, c.kind == kLstm ? 3 : 2);
        t.go();
        n.check(t);
    }
}

TEST_CASE("RNN, GRU, LSTM: layout before opset 14 is not read; optional outputs; infer allocates nothing") {
    std::mt19937 rng(5);
    Recurrent n;
    n.kind = kLstm;
    n.seq = 3;
    n.batch = 2;
    n.input = 2;
    n.hidden = 3;
    n.bias = n.lens = true;
    n.randomize(rng);
    {
        OpTest t;   // opset 13: the attribute layout = 1 is not the op's; X stays [seq, batch, input]
        t.opset = 13;
        n.build(t, 3);
        t.set_int("layout", 1);
        t.go();
        n.check(t);
    }
    {
        OpTest t;   // Y only
        n.build(t, 1);
        t.go();
        std::vector<double> y, y_h, y_c;
        n.reference(&y, &y_h, &y_c);
        check_close(t.out<float>(0), y, 1e-4);
    }
    for (const char* device : {"CPU", "TEMPLATE"}) {
        OpTest t;
        n.build(t, 3);
        REQUIRE(t.infer(device) == Status::Ok);
        n.check(t);
    }
}

TEST_CASE("RNN, GRU, LSTM: bad input") {
    auto base = [](OpTest& t, const char* op, int64_t gates, std::vector<InputRef> extra = {}, Shape w = {}, Shape r = {}) {
        if (w.empty()) w = {1, gates * 2, 3};
        if (r.empty()) r = {1, gates * 2, 2};
        std::vector<InputRef> in = {t.input<float>({2, 1, 3}, F32(6, 0.5f)), t.input<float>(w, F32((size_t)(w[0] * w[1] * w[2]), 0.1f)),
                                    t.input<float>(r, F32((size_t)(r[0] * r[1] * r[2]), 0.1f))};
        for (const InputRef& e : extra) in.push_back(e);
        t.op(op, in, 2);
    };
    {
        OpTest t;   // two inputs
        t.op("RNN", {t.input<float>({2, 1, 3}, F32(6)), t.input<float>({1, 2, 3}, F32(6))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // Y_c of a GRU
        t.op("GRU", {t.input<float>({2, 1, 3}, F32(6)), t.input<float>({1, 6, 3}, F32(18)), t.input<float>({1, 6, 2}, F32(12))}, 3);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // int X
        t.op("RNN", {t.input<int64_t>({2, 1, 3}, I64(6)), t.input<float>({1, 2, 3}, F32(6)), t.input<float>({1, 2, 2}, F32(4))});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // X of rank 2
        t.op("RNN", {t.input<float>({2, 3}, F32(6)), t.input<float>({1, 2, 3}, F32(6)), t.input<float>({1, 2, 2}, F32(4))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // W's input size differs from X's
        base(t, "LSTM", 4, {}, {1, 8, 2});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // R not [dirs, G*hidden, hidden]
        base(t, "GRU", 3, {}, {}, {1, 5, 2});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // hidden_size against R
        base(t, "RNN", 1);
        t.set_int("hidden_size", 3);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // bidirectional with one direction of weights
        base(t, "RNN", 1);
        t.set_string("direction", "bidirectional");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // unknown direction
        base(t, "RNN", 1);
        t.set_string("direction", "sideways");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // B of the wrong size
        base(t, "RNN", 1, {t.input<float>({1, 3}, F32(3))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // float sequence_lens
        base(t, "RNN", 1, {t.absent(), t.input<float>({1}, {2})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // sequence_lens of the wrong length
        base(t, "RNN", 1, {t.absent(), t.input<int32_t>({2}, {2, 2})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // initial_h of the wrong shape
        base(t, "GRU", 3, {t.absent(), t.absent(), t.input<float>({1, 2, 2}, F32(4))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // P of the wrong size
        base(t, "LSTM", 4, {t.absent(), t.absent(), t.absent(), t.absent(), t.input<float>({1, 4}, F32(4))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // layout 2
        t.opset = 14;
        base(t, "RNN", 1);
        t.set_int("layout", 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // clip not positive
        base(t, "RNN", 1);
        t.set_float("clip", 0.0f);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // an unknown activation
        base(t, "RNN", 1);
        set_names(t.model, t.node, "activations", "Gelu");
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // activations as one string
        base(t, "RNN", 1);
        t.set_string("activations", "Relu");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // two activations for an RNN
        base(t, "RNN", 1);
        set_names(t.model, t.node, "activations", "Relu,Tanh");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // seven
        base(t, "LSTM", 4);
        set_names(t.model, t.node, "activations", "Relu,Relu,Relu,Relu,Relu,Relu,Relu");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // opset 6 is refused by the version table; the kernel alone refuses it too
        t.opset = 6;
        base(t, "RNN", 1);
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // a sequence length past the sequence, found at run time
        base(t, "RNN", 1, {t.absent(), t.input<int32_t>({1}, {3})});
        t.run_fails("sequence_lens[0] = 3 out of range 0..2");
    }
    {
        OpTest t;   // the same through infer()
        base(t, "RNN", 1, {t.absent(), t.input<int32_t>({1}, {-1})});
        CHECK(t.infer() == Status::InvalidArgument);
        CHECK(t.infer_error.find("sequence_lens[0] = -1") != std::string::npos);
    }
}

TEST_CASE("LSTM: activations survive write_onnx and read_onnx, export_model and import_model") {
    std::mt19937 rng(23);
    Recurrent n;
    n.kind = kLstm;
    n.seq = 3;
    n.batch = 2;
    n.input = 3;
    n.hidden = 4;
    n.direction = "bidirectional";
    n.bias = true;
    n.activation_names = "HardSigmoid,Tanh,Softsign,Sigmoid,Relu,Affine";
    n.alphas = {0.3f, 0.5f};
    n.betas = {0.4f, 0.1f};
    Activation hard{"HardSigmoid", 0.3, 0.4}, tanh_fn{"Tanh"}, softsign{"Softsign"}, sigmoid{"Sigmoid"}, relu{"Relu"},
        affine{"Affine", 0.5, 0.1};
    n.activations = {hard, tanh_fn, softsign, sigmoid, relu, affine};
    n.randomize(rng);
    OpTest built;
    built.model.opset = 17;
    n.build(built, 3);
    for (uint32_t p = 0; p < 3; ++p)
        REQUIRE(built.model.add_output(("y" + std::to_string(p)).c_str(), InputRef::by_id(built.node, p)) == Status::Ok);
    REQUIRE(built.model.finalize() == Status::Ok);
    std::string bytes;
    REQUIRE(write_onnx(built.model, test::append_to_string, &bytes) == Status::Ok);
    Model read;
    REQUIRE(read.read_onnx(bytes.data(), bytes.size()) == Status::Ok);
    Core core;
    CompiledModel compiled;
    INFO(core.last_error());
    REQUIRE(core.compile_model(read, "CPU", {}, &compiled) == Status::Ok);
    std::string blob;
    REQUIRE(compiled.export_model(test::append_to_string, &blob) == Status::Ok);
    CompiledModel imported;
    REQUIRE(core.import_model(blob.data(), blob.size(), &imported) == Status::Ok);
    std::vector<double> y, y_h, y_c;
    n.reference(&y, &y_h, &y_c);
    for (CompiledModel* m : {&compiled, &imported}) {
        InferRequest request;
        REQUIRE(m->create_request(&request) == Status::Ok);
        const F32* feeds[] = {&n.x, &n.w, &n.r, &n.b};
        for (uint32_t i = 0; i < 4; ++i) {
            REQUIRE(request.input(i).bytes() == feeds[i]->size() * sizeof(float));
            std::memcpy(request.input(i).data(), feeds[i]->data(), request.input(i).bytes());
        }
        REQUIRE(request.infer() == Status::Ok);
        const std::vector<double>* want[] = {&y, &y_h, &y_c};
        for (uint32_t p = 0; p < 3; ++p) {
            const float* got = request.output(p).data_as<float>();
            check_close(std::vector<float>(got, got + request.output(p).elements()), *want[p], 1e-4);
        }
    }
}

TEST_CASE("LSTM: a model of opset 6 is refused by the op version table") {
    Model model;
    model.opset = 6;
    NodeId x = kNoNode, w = kNoNode, r = kNoNode, node = kNoNode;
    REQUIRE(model.add_input("x", test::make_desc(ElementType::Float32, {1, 1, 1}), &x) == Status::Ok);
    F32 weights(4, 0.5f);
    REQUIRE(model.add_constant("w", test::make_desc(ElementType::Float32, {1, 4, 1}), weights.data(), &w) == Status::Ok);
    REQUIRE(model.add_constant("r", test::make_desc(ElementType::Float32, {1, 4, 1}), weights.data(), &r) == Status::Ok);
    InputRef in[] = {InputRef::by_id(x), InputRef::by_id(w), InputRef::by_id(r)};
    REQUIRE(model.add_node("LSTM", "lstm", Span<const InputRef>(in, 3), 1, &node) == Status::Ok);
    REQUIRE(model.add_output("y", InputRef::by_id(node)) == Status::Ok);
    REQUIRE(model.finalize() == Status::Ok);
    Core core;
    CompiledModel compiled;
    CHECK(core.compile_model(model, "CPU", {}, &compiled) == Status::Unsupported);
    CHECK(std::string(core.last_error()).find("LSTM-1 (opset 6) is not implemented") != std::string::npos);
}

// ---- DFT and STFT -------------------------------------------------------------------------------

namespace {

// The DFT of one complex line, zero-padded or truncated to n, in double.
std::vector<double> naive_dft(const std::vector<double>& re, const std::vector<double>& im, int64_t n, bool inverse) {
    std::vector<double> out(2 * (size_t)n);
    for (int64_t k = 0; k < n; ++k) {
        double sr = 0, si = 0;
        for (int64_t j = 0; j < n && j < (int64_t)re.size(); ++j) {
            double angle = (inverse ? 2 : -2) * kPi * (double)k * (double)j / (double)n;
            sr += re[j] * std::cos(angle) - im[j] * std::sin(angle);
            si += re[j] * std::sin(angle) + im[j] * std::cos(angle);
        }
        out[2 * k] = inverse ? sr / n : sr;
        out[2 * k + 1] = inverse ? si / n : si;
    }
    return out;
}

}  // namespace

TEST_CASE("DFT: worked out by hand (forward, inverse, onesided, real inverse)") {
    {
        OpTest t;   // [1, 2, 3, 4] -> [10, -2+2i, -2, -2-2i]
        t.opset = 20;
        t.op("DFT", {t.input<float>({1, 4, 1}, {1, 2, 3, 4})});
        t.go();
        CHECK(t.shape() == Shape{1, 4, 2});
        check_close(t.out<float>(), F32{10, 0, -2, 2, -2, 0, -2, -2});
    }
    {
        OpTest t;   // onesided: the first 4 / 2 + 1 bins
        t.opset = 20;
        t.op("DFT", {t.input<float>({1, 4, 1}, {1, 2, 3, 4})});
        t.set_int("onesided", 1);
        t.go();
        CHECK(t.shape() == Shape{1, 3, 2});
        check_close(t.out<float>(), F32{10, 0, -2, 2, -2, 0});
    }
    {
        OpTest t;   // inverse of the spectrum above gives the signal back (imaginary 0)
        t.opset = 20;
        t.op("DFT", {t.input<float>({1, 4, 2}, {10, 0, -2, 2, -2, 0, -2, -2})});
        t.set_int("inverse", 1);
        t.go();
        check_close(t.out<float>(), F32{1, 0, 2, 0, 3, 0, 4, 0});
    }
    {
        OpTest t;   // real inverse from the one-sided spectrum: dft_length 2 * (3 - 1) = 4
        t.opset = 20;
        t.op("DFT", {t.input<float>({1, 3, 2}, {10, 0, -2, 2, -2, 0})});
        t.set_int("inverse", 1);
        t.set_int("onesided", 1);
        t.go();
        CHECK(t.shape() == Shape{1, 4, 1});
        check_close(t.out<float>(), F32{1, 2, 3, 4});
    }
    {
        OpTest t;   // dft_length 2 truncates: [1, 2] -> [3, -1]; opset 17 reads axis as an attribute
        t.op("DFT", {t.input<float>({1, 4, 1}, {1, 2, 3, 4}), t.constant<int64_t>({}, {2})});
        t.go();
        CHECK(t.shape() == Shape{1, 2, 2});
        check_close(t.out<float>(), F32{3, 0, -1, 0});
    }
    {
        OpTest t;   // dft_length 3 zero-pads [1] -> [1, 1, 1]
        t.op("DFT", {t.input<float>({1, 1, 1}, {1}), t.constant<int32_t>({1}, {3})});
        t.go();
        check_close(t.out<float>(), F32{1, 0, 1, 0, 1, 0});
    }
}

TEST_CASE("DFT: random signals against the naive sum (axes, lengths, complex input, both opsets)") {
    std::mt19937 rng(17);
    for (int iteration = 0; iteration < 60; ++iteration) {
        Shape shape = {1 + (int64_t)(rng() % 3), 1 + (int64_t)(rng() % 6), 1 + (int64_t)(rng() % 3), 1 + (int64_t)(rng() % 2)};
        int axis = (int)(rng() % 3);
        bool inverse = rng() % 2, onesided = rng() % 3 == 0, real_inverse = inverse && onesided;
        if (real_inverse && shape[axis] < 2) shape[axis] = 2;
        int64_t length = shape[axis];
        int64_t n = rng() % 2 ? 1 + (int64_t)(rng() % 8) : (real_inverse ? 2 * (length - 1) : length);
        bool given = n != (real_inverse ? 2 * (length - 1) : length) || rng() % 2;
        size_t count = 1;
        for (int64_t d : shape) count *= (size_t)d;
        F32 x = random_floats(rng, count, -1.0f, 1.0f);
        OpTest t;
        t.opset = rng() % 2 ? 20 : 17;
        int64_t axis_value = rng() % 2 ? axis : axis - 4;
        std::vector<InputRef> in = {t.input<float>(shape, x)};
        if (given || t.opset >= 20) in.push_back(given ? t.constant<int64_t>({}, {n}) : t.absent());
        if (t.opset >= 20) in.push_back(t.constant<int64_t>({}, {axis_value}));
        t.op("DFT", in);
        if (t.opset < 20) t.set_int("axis", axis_value);
        if (inverse) t.set_int("inverse", 1);
        if (onesided) t.set_int("onesided", 1);
        INFO("iteration " << iteration);
        t.go();
        int64_t bins = onesided && !inverse ? n / 2 + 1 : n, parts = real_inverse ? 1 : 2;
        Shape want = shape;
        want[axis] = bins;
        want[3] = parts;
        REQUIRE(t.shape() == want);
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < axis; ++d) outer *= shape[d];
        for (int d = axis + 1; d < 3; ++d) inner *= shape[d];
        std::vector<double> expected(outer * bins * inner * parts);
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < inner; ++i) {
                std::vector<double> re((size_t)n, 0.0), im((size_t)n, 0.0);
                auto value = [&](int64_t j, int part) -> double {
                    if (j >= length || part >= shape[3]) return 0.0;
                    return x[(size_t)(((o * length + j) * inner + i) * shape[3] + part)];
                };
                for (int64_t j = 0; j < n; ++j) {
                    if (real_inverse && j > n / 2) {   // the conjugate of the mirrored bin
                        re[j] = value(n - j, 0);
                        im[j] = -value(n - j, 1);
                    } else {
                        re[j] = value(j, 0);
                        im[j] = value(j, 1);
                    }
                }
                if (real_inverse) {   // numpy's irfft drops the imaginary parts of bins 0 and n / 2
                    im[0] = 0;
                    if (n % 2 == 0) im[n / 2] = 0;
                }
                std::vector<double> y = naive_dft(re, im, n, inverse);
                for (int64_t k = 0; k < bins; ++k)
                    for (int64_t part = 0; part < parts; ++part)
                        expected[(size_t)(((o * bins + k) * inner + i) * parts + part)] = y[2 * k + part];
            }
        check_close(t.out<float>(), expected, 1e-4);
    }
}

TEST_CASE("DFT: longer lines, radix-2 and direct, forward and back") {
    std::mt19937 rng(29);
    for (int64_t n : {64, 48, 1024, 250}) {
        F32 x = random_floats(rng, (size_t)(2 * n), -1.0f, 1.0f);
        OpTest t;
        t.opset = 20;
        t.op("DFT", {t.input<float>({1, n, 2}, x)});
        INFO("length " << n);
        t.go();
        std::vector<double> re(n), im(n);
        for (int64_t j = 0; j < n; ++j) {
            re[j] = x[2 * j];
            im[j] = x[2 * j + 1];
        }
        check_close(t.out<float>(), naive_dft(re, im, n, false), 1e-4);
        OpTest back;   // the inverse gives the signal back
        back.opset = 20;
        back.op("DFT", {back.input<float>({1, n, 2}, t.out<float>())});
        back.set_int("inverse", 1);
        back.go();
        check_close(back.out<float>(), x, 1e-4);
    }
}

TEST_CASE("STFT: frames worked out by hand, a window, complex signals against the naive sum") {
    {
        OpTest t;   // frames [1, 2], [3, 4] (step 2, length 2): [3, -1] and [7, -1]
        t.op("STFT", {t.input<float>({1, 4, 1}, {1, 2, 3, 4}), t.constant<int64_t>({}, {2}), t.absent(),
                      t.constant<int64_t>({}, {2})});
        t.go();
        CHECK(t.shape() == Shape{1, 2, 2, 2});
        check_close(t.out<float>(), F32{3, 0, -1, 0, 7, 0, -1, 0});
    }
    {
        OpTest t;   // window [1, 0, 1] over frames [1, 2, 3], [2, 3, 4] (step 1): x0 + x2 and x0 - x2 halves
        t.op("STFT", {t.input<float>({1, 4, 1}, {1, 2, 3, 4}), t.constant<int64_t>({}, {1}), t.input<float>({3}, {1, 0, 1})});
        t.go();
        CHECK(t.shape() == Shape{1, 2, 2, 2});   // onesided: 3 / 2 + 1 bins
        double c = std::cos(2 * kPi / 3), s = std::sin(2 * kPi / 3);
        // bin 1 of [a, 0, b]: a + b e^(-4 pi i / 3) = a + b (c + i s)
        check_close(t.out<float>(), std::vector<double>{4, 0, 1 + 3 * c, 3 * s, 6, 0, 2 + 4 * c, 4 * s});
    }
    std::mt19937 rng(3);
    for (int iteration = 0; iteration < 20; ++iteration) {
        int64_t batch = 1 + rng() % 2, length = 4 + rng() % 12, parts = 1 + rng() % 2;
        int64_t frame = 1 + rng() % length, step = 1 + rng() % 4;
        bool onesided = rng() % 2, window = rng() % 2;
        F32 x = random_floats(rng, (size_t)(batch * length * parts), -1.0f, 1.0f);
        F32 w = random_floats(rng, (size_t)frame, -1.0f, 1.0f);
        OpTest t;
        t.op("STFT", {t.input<float>({batch, length, parts}, x), t.constant<int64_t>({}, {step}),
                      window ? t.input<float>({frame}, w) : t.absent(), t.constant<int64_t>({}, {frame})});
        t.set_int("onesided", onesided);
        INFO("iteration " << iteration);
        t.go();
        int64_t frames = 1 + (length - frame) / step, bins = onesided ? frame / 2 + 1 : frame;
        REQUIRE(t.shape() == Shape{batch, frames, bins, 2});
        std::vector<double> expected;
        for (int64_t b = 0; b < batch; ++b)
            for (int64_t f = 0; f < frames; ++f) {
                std::vector<double> re(frame), im(frame);
                for (int64_t j = 0; j < frame; ++j) {
                    double scale = window ? w[j] : 1.0;
                    re[j] = x[(b * length + f * step + j) * parts] * scale;
                    im[j] = parts == 2 ? x[(b * length + f * step + j) * parts + 1] * scale : 0.0;
                }
                std::vector<double> y = naive_dft(re, im, frame, false);
                expected.insert(expected.end(), y.begin(), y.begin() + 2 * bins);
            }
        check_close(t.out<float>(), expected, 1e-4);
    }
}

TEST_CASE("DFT, STFT: bad input") {
    {
        OpTest t;   // last dimension 3
        t.op("DFT", {t.input<float>({1, 4, 3}, F32(12))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // rank 1
        t.op("DFT", {t.input<float>({4}, F32(4))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // int input
        t.op("DFT", {t.input<int32_t>({1, 4, 1}, I32(4))});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // the last axis
        t.op("DFT", {t.input<float>({1, 4, 1}, F32(4))});
        t.set_int("axis", -1);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // axis input out of range (opset 20)
        t.opset = 20;
        t.op("DFT", {t.input<float>({1, 4, 1}, F32(4)), t.absent(), t.constant<int64_t>({}, {2})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // dft_length 0
        t.op("DFT", {t.input<float>({1, 4, 1}, F32(4)), t.constant<int64_t>({}, {0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // dft_length past the limit
        t.op("DFT", {t.input<float>({1, 4, 1}, F32(4)), t.constant<int64_t>({}, {(int64_t)1 << 40})});
        t.fails(Status::LimitExceeded);
    }
    {
        OpTest t;   // dft_length with two values
        t.op("DFT", {t.input<float>({1, 4, 1}, F32(4)), t.constant<int64_t>({2}, {4, 4})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // dft_length known only at run time
        t.op("DFT", {t.input<float>({1, 4, 1}, F32(4)), t.input<int64_t>({}, {4})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // real inverse of one bin: dft_length 0
        t.op("DFT", {t.input<float>({1, 1, 2}, F32(2))});
        t.set_int("inverse", 1);
        t.set_int("onesided", 1);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // DFT in an opset 16 model
        t.opset = 16;
        t.op("DFT", {t.input<float>({1, 4, 1}, F32(4))});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // STFT: signal of rank 2
        t.op("STFT", {t.input<float>({4, 1}, F32(4)), t.constant<int64_t>({}, {1})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // frame_step 0
        t.op("STFT", {t.input<float>({1, 4, 1}, F32(4)), t.constant<int64_t>({}, {0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // frame longer than the signal
        t.op("STFT", {t.input<float>({1, 4, 1}, F32(4)), t.constant<int64_t>({}, {1}), t.absent(), t.constant<int64_t>({}, {5})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // window and frame_length disagree
        t.op("STFT", {t.input<float>({1, 4, 1}, F32(4)), t.constant<int64_t>({}, {1}), t.input<float>({3}, F32(3)),
                      t.constant<int64_t>({}, {2})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // window of rank 2
        t.op("STFT", {t.input<float>({1, 4, 1}, F32(4)), t.constant<int64_t>({}, {1}), t.input<float>({1, 3}, F32(3))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // frame_step known only at run time
        t.op("STFT", {t.input<float>({1, 4, 1}, F32(4)), t.input<int64_t>({}, {1})});
        t.fails(Status::Unsupported);
    }
}

// ---- windows and the mel weight matrix ---------------------------------------------------------

TEST_CASE("HannWindow, HammingWindow, BlackmanWindow: periodic and symmetric values") {
    struct Case { const char* op; int64_t size; int periodic; F32 want; };
    const Case cases[] = {
        {"HannWindow", 4, 1, {0, 0.5f, 1, 0.5f}},
        {"HannWindow", 5, 0, {0, 0.5f, 1, 0.5f, 0}},
        {"HammingWindow", 3, 0, {4.0f / 46, 1, 4.0f / 46}},
        {"HammingWindow", 2, 1, {4.0f / 46, 1}},
        {"BlackmanWindow", 4, 1, {0, 0.34f, 1, 0.34f}},
        {"BlackmanWindow", 1, 0, {1}},   // a symmetric window of one value is [1]
        {"HannWindow", 0, 1, {}},
    };
    for (const Case& c : cases) {
        INFO(c.op << " size " << c.size << " periodic " << c.periodic);
        OpTest t;
        t.op(c.op, {t.constant<int64_t>({}, {c.size})});
        t.set_int("periodic", c.periodic);
        t.go();
        CHECK(t.shape() == Shape{c.size});
        check_close(t.out<float>(), c.want, 1e-6);
    }
    {
        OpTest t;   // through a Core: folded to a constant (size is one)
        t.op("HammingWindow", {t.constant<int32_t>({1}, {2})});
        REQUIRE(t.infer() == Status::Ok);
        check_close(t.out<float>(), F32{4.0f / 46, 1}, 1e-6);
    }
}

TEST_CASE("MelWeightMatrix: worked out by hand; points outside the spectrogram") {
    // 2 mel bins, dft_length 8, 8000 Hz, 0..4000 Hz: points fall on bins 0, 0, 1, 2 (see the
    // reference's formula), so filter 0 is [1, 0, ...] and filter 1 peaks on bin 1.
    {
        OpTest t;
        t.op("MelWeightMatrix", {t.constant<int64_t>({}, {2}), t.constant<int64_t>({}, {8}), t.input<int64_t>({}, {8000}),
                                 t.input<float>({}, {0}), t.input<float>({}, {4000})});
        t.go();
        CHECK(t.shape() == Shape{5, 2});
        CHECK(t.out<float>() == F32{1, 0, 0, 1, 0, 0, 0, 0, 0, 0});
    }
    {
        OpTest t;   // upper edge 20 kHz at 8 kHz: the last point (8183 Hz) lands on bin 9 of 5
        t.op("MelWeightMatrix", {t.constant<int64_t>({}, {2}), t.constant<int64_t>({}, {8}), t.input<int32_t>({}, {8000}),
                                 t.input<float>({}, {0}), t.input<float>({}, {20000})});
        t.run_fails("falls on bin 9, outside the 5 spectrogram bins");
    }
    {
        OpTest t;   // sample_rate 0
        t.op("MelWeightMatrix", {t.constant<int64_t>({}, {2}), t.constant<int64_t>({}, {8}), t.input<int64_t>({}, {0}),
                                 t.input<float>({}, {0}), t.input<float>({}, {100})});
        t.run_fails("sample_rate 0");
    }
}

TEST_CASE("windows, MelWeightMatrix: bad input") {
    {
        OpTest t;   // negative size
        t.op("HannWindow", {t.constant<int64_t>({}, {-1})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // float size
        t.op("HannWindow", {t.constant<float>({}, {4})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // size known only at run time
        t.op("BlackmanWindow", {t.input<int64_t>({}, {4})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // output_datatype double
        t.op("HammingWindow", {t.constant<int64_t>({}, {4})});
        t.set_int("output_datatype", 11);
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // four inputs
        t.op("MelWeightMatrix", {t.constant<int64_t>({}, {2}), t.constant<int64_t>({}, {8}), t.input<int64_t>({}, {8000}),
                                 t.input<float>({}, {0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // num_mel_bins 0
        t.op("MelWeightMatrix", {t.constant<int64_t>({}, {0}), t.constant<int64_t>({}, {8}), t.input<int64_t>({}, {8000}),
                                 t.input<float>({}, {0}), t.input<float>({}, {100})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // an edge with two values
        t.op("MelWeightMatrix", {t.constant<int64_t>({}, {2}), t.constant<int64_t>({}, {8}), t.input<int64_t>({}, {8000}),
                                 t.input<float>({2}, {0, 0}), t.input<float>({}, {100})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // a float sample rate
        t.op("MelWeightMatrix", {t.constant<int64_t>({}, {2}), t.constant<int64_t>({}, {8}), t.input<float>({}, {8000}),
                                 t.input<float>({}, {0}), t.input<float>({}, {100})});
        t.fails(Status::Unsupported);
    }
}

// ---- LpPool, LRN, Celu, CumProd, Det ----------------------------------------------------------

TEST_CASE("LpPool: worked out by hand; pads, strides, dilations, auto_pad and ceil_mode against a plain loop") {
    {
        OpTest t;   // p 2, windows [3, 4], [4, 0], [0, -1]
        t.op("LpPool", {t.input<float>({1, 1, 4}, {3, 4, 0, -1})});
        t.set_ints("kernel_shape", {2});
        t.go();
        CHECK(t.shape() == Shape{1, 1, 3});
        check_close(t.out<float>(), F32{5, 4, 1});
    }
    {
        OpTest t;   // p 1, stride 2, one pad each side: [0, 3], [4, 0], [-1, 0]
        t.op("LpPool", {t.input<float>({1, 1, 4}, {3, 4, 0, -1})});
        t.set_ints("kernel_shape", {2});
        t.set_ints("strides", {2});
        t.set_ints("pads", {1, 1});
        t.set_int("p", 1);
        t.go();
        check_close(t.out<float>(), F32{3, 4, 1});
    }
    std::mt19937 rng(11);
    for (int iteration = 0; iteration < 40; ++iteration) {
        int64_t h = 3 + rng() % 5, w = 3 + rng() % 5, k0 = 1 + rng() % 3, k1 = 1 + rng() % 3;
        int64_t s0 = 1 + rng() % 2, s1 = 1 + rng() % 2, d0 = 1 + rng() % 2, d1 = 1 + rng() % 2, p = 1 + rng() % 3;
        I64 pads = {(int64_t)(rng() % 2), (int64_t)(rng() % 2), (int64_t)(rng() % 2), (int64_t)(rng() % 2)};
        int mode = (int)(rng() % 4);   // pads, SAME_UPPER, SAME_LOWER, ceil_mode with pads
        if ((k0 - 1) * d0 + 1 > h + pads[0] + pads[2] || (k1 - 1) * d1 + 1 > w + pads[1] + pads[3]) continue;
        F32 x = random_floats(rng, (size_t)(2 * h * w), -2.0f, 2.0f);
        OpTest t;
        t.opset = 18;
        t.op("LpPool", {t.input<float>({1, 2, h, w}, x)});
        t.set_ints("kernel_shape", {k0, k1});
        t.set_ints("strides", {s0, s1});
        t.set_ints("dilations", {d0, d1});
        t.set_int("p", p);
        if (mode == 1 || mode == 2) t.set_string("auto_pad", mode == 1 ? "SAME_UPPER" : "SAME_LOWER");
        else t.set_ints("pads", pads);
        if (mode == 3) t.set_int("ceil_mode", 1);
        INFO("iteration " << iteration);
        t.go();
        int64_t dims[2] = {h, w}, kernel[2] = {k0, k1}, stride[2] = {s0, s1}, dilation[2] = {d0, d1}, begin[2], out[2];
        for (int d = 0; d < 2; ++d) {
            int64_t extent = (kernel[d] - 1) * dilation[d] + 1;
            if (mode == 1 || mode == 2) {
                out[d] = (dims[d] + stride[d] - 1) / stride[d];
                int64_t total = std::max<int64_t>(0, (out[d] - 1) * stride[d] + extent - dims[d]);
                begin[d] = mode == 1 ? total / 2 : total - total / 2;
            } else {
                begin[d] = pads[d];
                int64_t span = dims[d] + pads[d] + pads[2 + d] - extent;
                out[d] = (mode == 3 ? span + stride[d] - 1 : span) / stride[d] + 1;
                if (mode == 3 && (out[d] - 1) * stride[d] >= dims[d] + pads[d]) --out[d];
            }
        }
        REQUIRE(t.shape() == Shape{1, 2, out[0], out[1]});
        std::vector<double> want;
        for (int64_t ch = 0; ch < 2; ++ch)
            for (int64_t i = 0; i < out[0]; ++i)
                for (int64_t j = 0; j < out[1]; ++j) {
                    double sum = 0;
                    for (int64_t a = 0; a < k0; ++a)
                        for (int64_t b = 0; b < k1; ++b) {
                            int64_t y = i * s0 - begin[0] + a * d0, z = j * s1 - begin[1] + b * d1;
                            if (y >= 0 && y < h && z >= 0 && z < w) sum += std::pow(std::fabs((double)x[(ch * h + y) * w + z]), (double)p);
                        }
                    want.push_back(std::pow(sum, 1.0 / (double)p));
                }
        check_close(t.out<float>(), want, 1e-5);
    }
}

TEST_CASE("LRN, Celu, Det: worked out by hand") {
    {
        OpTest t;   // size 3, alpha 3, beta 1, bias 1: x_c / (1 + sum of the neighbours' squares)
        t.op("LRN", {t.input<float>({1, 3, 1, 1}, {1, 2, 3})});
        t.set_int("size", 3);
        t.set_float("alpha", 3.0f);
        t.set_float("beta", 1.0f);
        t.go();
        check_close(t.out<float>(), F32{1.0f / 6, 2.0f / 15, 3.0f / 14});
    }
    {
        OpTest t;   // an even size looks one channel ahead: alpha / size = 1.5
        t.op("LRN", {t.input<float>({1, 3, 1}, {1, 2, 3})});
        t.set_int("size", 2);
        t.set_float("alpha", 3.0f);
        t.set_float("beta", 1.0f);
        t.go();
        check_close(t.out<float>(), F32{1.0f / 8.5f, 2.0f / 20.5f, 3.0f / 14.5f});
    }
    {
        OpTest t;   // the defaults: bias 1, alpha 1e-4, beta 0.75
        t.op("LRN", {t.input<float>({1, 1, 2}, {10, -20})});
        t.set_int("size", 1);
        t.go();
        check_close(t.out<float>(), std::vector<double>{10 / std::pow(1.01, 0.75), -20 / std::pow(1.04, 0.75)});
    }
    {
        OpTest t;   // Celu alpha 2
        t.op("Celu", {t.input<float>({3}, {-1, 0, 1.5f})});
        t.set_float("alpha", 2.0f);
        t.go();
        check_close(t.out<float>(), std::vector<double>{2 * (std::exp(-0.5) - 1), 0, 1.5});
    }
    {
        OpTest t;   // 2 x 2, a 3 x 3 that needs a row swap, a singular one
        t.op("Det", {t.input<float>({3, 3, 3}, {1, 2, 0, 3, 4, 0, 0, 0, 1,
                                                0, 2, 1, 1, 0, 0, 0, 1, 3,
                                                1, 2, 3, 2, 4, 6, 0, 1, 1})});
        t.go();
        CHECK(t.shape() == Shape{3});
        check_close(t.out<float>(), F32{-2, -5, 0});
    }
    {
        OpTest t;   // rank 2: a scalar
        t.op("Det", {t.input<float>({2, 2}, {4, 1, 2, 3})});
        t.go();
        CHECK(t.shape() == Shape{});
        check_close(t.out<float>(), F32{10});
    }
}

TEST_CASE("CumProd: int32, int64, float; exclusive, reverse, axes, a run-time axis") {
    {
        OpTest t;
        t.opset = 26;
        t.op("CumProd", {t.input<int32_t>({4}, {1, 2, 3, 4}), t.constant<int64_t>({}, {0})});
        t.go();
        CHECK(t.out<int32_t>() == I32{1, 2, 6, 24});
    }
    {
        OpTest t;
        t.opset = 26;
        t.op("CumProd", {t.input<int64_t>({4}, {1, 2, 3, 4}), t.constant<int32_t>({1}, {-1})});
        t.set_int("exclusive", 1);
        t.set_int("reverse", 1);
        t.go();
        CHECK(t.out<int64_t>() == I64{24, 12, 4, 1});
    }
    {
        OpTest t;   // axis 0 of a 2 x 3, read at run time
        t.opset = 26;
        t.op("CumProd", {t.input<float>({2, 3}, {1, 2, 3, 4, 5, 6}), t.input<int64_t>({}, {0})});
        t.go();
        CHECK(t.out<float>() == F32{1, 2, 3, 4, 10, 18});
    }
    {
        OpTest t;   // int32 products wrap
        t.opset = 26;
        t.op("CumProd", {t.input<int32_t>({2}, {65536, 65536}), t.constant<int64_t>({}, {0})});
        t.go();
        CHECK(t.out<int32_t>() == I32{65536, 0});
    }
}

TEST_CASE("LpPool, LRN, Celu, CumProd, Det: bad input") {
    auto x4 = [](OpTest& t) { return t.input<float>({1, 1, 4}, F32(4, 1.0f)); };
    {
        OpTest t;   // no kernel_shape
        t.op("LpPool", {x4(t)});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // p 0
        t.op("LpPool", {x4(t)});
        t.set_ints("kernel_shape", {2});
        t.set_int("p", 0);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // a window larger than the input
        t.op("LpPool", {x4(t)});
        t.set_ints("kernel_shape", {5});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // rank 2
        t.op("LpPool", {t.input<float>({1, 4}, F32(4))});
        t.set_ints("kernel_shape", {2});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // int input
        t.op("LpPool", {t.input<int64_t>({1, 1, 4}, I64(4))});
        t.set_ints("kernel_shape", {2});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // LRN without size
        t.op("LRN", {x4(t)});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // LRN size 0
        t.op("LRN", {x4(t)});
        t.set_int("size", 0);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // LRN alpha as an int
        t.op("LRN", {x4(t)});
        t.set_int("size", 1);
        t.set_int("alpha", 1);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // LRN of rank 1
        t.op("LRN", {t.input<float>({4}, F32(4))});
        t.set_int("size", 1);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // Celu alpha 0
        t.op("Celu", {x4(t)});
        t.set_float("alpha", 0.0f);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // Celu of ints
        t.op("Celu", {t.input<int32_t>({2}, I32(2))});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // Celu in an opset 11 model
        t.opset = 11;
        t.op("Celu", {x4(t)});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // CumProd in an opset 25 model
        t.opset = 25;
        t.op("CumProd", {x4(t), t.constant<int64_t>({}, {0})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // CumProd of bools
        t.opset = 26;
        t.op("CumProd", {t.input<uint8_t>({2}, {1, 0}, ElementType::Bool), t.constant<int64_t>({}, {0})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // a constant axis out of range
        t.opset = 26;
        t.op("CumProd", {x4(t), t.constant<int64_t>({}, {3})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // two axes
        t.opset = 26;
        t.op("CumProd", {x4(t), t.constant<int64_t>({2}, {0, 1})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // a run-time axis out of range
        t.opset = 26;
        t.op("CumProd", {x4(t), t.input<int64_t>({}, {-4})});
        t.run_fails("axis -4 out of range for rank 3");
    }
    {
        OpTest t;   // Det of a 2 x 3
        t.op("Det", {t.input<float>({2, 3}, F32(6))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // Det of rank 1
        t.op("Det", {t.input<float>({4}, F32(4))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // Det of ints
        t.op("Det", {t.input<int64_t>({2, 2}, I64(4))});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // Det of a matrix above the scratch bound (the descs only: nothing runs)
        t.op("Det", {t.input<float>({4096, 4096}, F32())});
        t.fails(Status::LimitExceeded);
    }
}

TEST_CASE("recurrent, signal, pool and scan ops: random malformed nodes fail with a Status, never crash") {
    const char* ops[] = {"RNN", "GRU", "LSTM", "DFT", "STFT", "HannWindow", "HammingWindow", "BlackmanWindow",
                         "MelWeightMatrix", "LpPool", "LRN", "Celu", "CumProd", "Det"};
    const uint32_t arity[] = {6, 6, 8, 3, 4, 1, 1, 1, 5, 1, 1, 1, 2, 1};
    const char* int_names[] = {"hidden_size", "layout", "input_forget", "linear_before_reset", "axis", "inverse",
                               "onesided", "periodic", "output_datatype", "p", "size", "ceil_mode", "exclusive", "reverse"};
    const char* directions[] = {"forward", "reverse", "bidirectional", "bad"};
    const char* activations[] = {"Relu", "Tanh,Sigmoid", "Sigmoid,Tanh,Tanh", "Elu,Elu,Elu,Elu", "x", ""};
    MalformedPicker picker(20261129);
    auto pick = [&](uint32_t n) { return picker.pick(n); };
    uint32_t prepared = 0, ran = 0;
    for (int iteration = 0; iteration < 20000; ++iteration) {
        OpTest t;
        t.opset = pick(2) ? 22 : 6 + pick(17);
        uint32_t which = pick(sizeof ops / sizeof ops[0]);
        const char* op = ops[which];
        const uint32_t least[] = {3, 3, 3, 1, 2, 1, 1, 1, 5, 1, 1, 1, 2, 1};
        uint32_t num_inputs = pick(4) ? least[which] + pick(arity[which] - least[which] + 1) : pick(9);
        int64_t a = 1 + pick(3), b = 1 + pick(3), c = 1 + pick(3), h = 1 + pick(3), dirs = 1 + pick(2);
        int64_t gates = which == 0 ? 1 : which == 1 ? 3 : 4;
        const Shape recurrent_shapes[8] = {{a, b, c}, {dirs, gates * h, c}, {dirs, gates * h, h}, {dirs, 2 * gates * h},
                                           {b}, {dirs, b, h}, {dirs, b, h}, {dirs, 3 * h}};
        const Shape dft_shapes[3] = {{a, b, 1 + pick(2)}, {}, {}};
        const Shape stft_shapes[4] = {{a, 3 * b, 1 + pick(2)}, {}, {b}, {}};
        std::vector<InputRef> inputs;
        for (uint32_t i = 0; i < num_inputs; ++i) {
            if (pick(6) == 0) { inputs.push_back(t.model.absent()); continue; }
            // mostly the type the op expects at this position
            bool wants_float = which < 3 ? i != 4 : which == 3 || which == 4 ? i == 0 || i == 2 : which == 8 ? i >= 3 : which >= 9 && i == 0;
            ElementType expected = wants_float ? ElementType::Float32 : which < 3 ? ElementType::Int32 : ElementType::Int64;
            ElementType type = pick(4) ? expected : picker.any_type();
            Shape shape;
            if (pick(4)) {   // the shape the op expects at this position, mostly
                shape = which < 3 ? recurrent_shapes[i < 8 ? i : 0] : which == 3 ? dft_shapes[i < 3 ? i : 0]
                      : which == 4 ? stft_shapes[i < 4 ? i : 0] : which >= 9 && i == 0 ? Shape{a, b, c, c} : Shape{};
                if (pick(4) == 0 && !shape.empty()) shape[pick((uint32_t)shape.size())] += pick(2) ? 1 : -1;
            } else {
                shape.resize(pick(5));
                for (int64_t& d : shape) d = pick(4);
            }
            size_t elements = 1;
            for (int64_t d : shape) elements *= (size_t)d;
            std::vector<unsigned char> bytes(elements * element_size(type));
            for (unsigned char& x : bytes) x = (unsigned char)picker.rng();
            if (type == ElementType::Int64)
                for (size_t k = 0; k < elements; ++k) {
                    int64_t v = pick(6) == 0 ? picker.special() : (int64_t)pick(6) - 1;
                    std::memcpy(&bytes[k * 8], &v, 8);
                }
            if (type == ElementType::Int32)
                for (size_t k = 0; k < elements; ++k) {
                    int32_t v = (int32_t)pick(6) - 1;
                    std::memcpy(&bytes[k * 4], &v, 4);
                }
            if (type == ElementType::Float32 && pick(2))
                for (size_t k = 0; k < elements; ++k) {
                    float v = (float)pick(9) * 500.0f - 1000.0f;
                    std::memcpy(&bytes[k * 4], &v, 4);
                }
            if (type == ElementType::Bool) for (unsigned char& x : bytes) x &= 1;
            inputs.push_back(pick(2) ? t.constant<unsigned char>(shape, bytes, type) : t.input<unsigned char>(shape, bytes, type));
        }
        t.op(op, inputs, 1 + pick(3));
        for (const char* name : int_names)
            if (pick(5) == 0) t.set_int(name, pick(3) == 0 ? picker.special() : (int64_t)pick(4) - 1);
        if (pick(3) == 0) t.set_string("direction", directions[pick(4)]);
        if (pick(5) == 0) set_names(t.model, t.node, "activations", activations[pick(6)]);
        if (pick(5) == 0) t.set_float("clip", pick(2) ? 0.5f : -1.0f);
        if (which == 9 && pick(4)) {
            std::vector<int64_t> kernel(pick(4) ? 2 : pick(4));
            for (int64_t& k : kernel) k = pick(4) ? 1 + pick(3) : (int64_t)pick(5) - 1;
            t.set_ints("kernel_shape", kernel);
        }
        if (pick(5) == 0) t.set_float("alpha", pick(2) ? 0.5f : 0.0f);
        INFO(std::string(op) << " opset " << t.opset << " iteration " << iteration);
        t.prepare_and_run_any(&prepared, &ran);
    }
    MESSAGE("prepared " << prepared << ", ran " << ran);
    CHECK(prepared > 300);
    CHECK(ran > 200);
}
