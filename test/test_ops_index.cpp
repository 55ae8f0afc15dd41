// runtime.h index, normalization and loss kernels (GatherElements, GatherND, ScatterElements,
// ScatterND, OneHot, ReverseSequence, TopK, LpNormalization, MeanVarianceNormalization,
// RMSNormalization, GroupNormalization, NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss):
// each kernel is driven through prepare/run on a one-node model and checked against values
// worked out by hand (or a double-precision loop here), and each kind of bad input against its
// exact Status and a message naming the node. Indices out of range at run time are checked
// through infer() too, which must return InvalidArgument and allocate nothing.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <map>
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
using test::type_of;
using I64 = std::vector<int64_t>;
using I32 = std::vector<int32_t>;
using F32 = std::vector<float>;
using U8 = std::vector<uint8_t>;
using test::make_desc;

std::vector<float> iota_float(int n, float from = 0) {
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = from + (float)i;
    return v;
}
std::vector<int64_t> iota_int64(int n) {
    std::vector<int64_t> v(n);
    for (int i = 0; i < n; ++i) v[i] = i;
    return v;
}

// Float results within the conformance tolerance.
void check_close(const std::vector<float>& got, const std::vector<float>& want, double rtol = 1e-5, double atol = 1e-6) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i << ": " << got[i] << ", expected " << want[i]);
        if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
        else CHECK(std::fabs((double)got[i] - want[i]) <= atol + rtol * std::fabs((double)want[i]));
    }
}

}  // namespace

TEST_CASE("index ops: every op of the table is found") {
    const char* ours[] = {"GatherElements", "GatherND", "ScatterElements", "Scatter", "ScatterND", "OneHot",
                          "ReverseSequence", "TopK", "LpNormalization", "MeanVarianceNormalization",
                          "RMSNormalization", "GroupNormalization", "NegativeLogLikelihoodLoss",
                          "SoftmaxCrossEntropyLoss"};
    for (const char* op : ours) {
        INFO(std::string(op));
        CHECK(find_builtin_kernel(op) != nullptr);
    }
}

// ---- gather and scatter ----------------------------------------------------------------------

TEST_CASE("GatherElements: axes, negative and int32 indices, smaller indices than data") {
    {
        OpTest t;   // the ONNX example: out[i][j] = data[indices[i][j]][j]
        t.op("GatherElements", {t.input<float>({3, 3}, iota_float(9, 1)), t.input<int64_t>({2, 3}, {1, 2, 0, 2, 0, 0})});
        t.go();
        CHECK(t.shape() == Shape{2, 3});
        CHECK(t.out<float>() == F32{4, 8, 3, 7, 2, 3});
    }
    {
        OpTest t;   // axis -1, int32 indices, fewer rows than data
        t.op("GatherElements", {t.input<int64_t>({2, 3}, iota_int64(6)), t.input<int32_t>({1, 2}, {-1, 0})});
        t.set_int("axis", -1);
        t.go();
        CHECK(t.shape() == Shape{1, 2});
        CHECK(t.type() == ElementType::Int64);
        CHECK(t.out<int64_t>() == I64{2, 0});
    }
    {
        OpTest t;   // rank 3, axis 1, constant indices
        t.op("GatherElements", {t.input<float>({2, 3, 2}, iota_float(12)), t.constant<int64_t>({2, 1, 2}, {2, 0, 1, -3})});
        t.set_int("axis", 1);
        t.go();
        CHECK(t.shape() == Shape{2, 1, 2});
        CHECK(t.out<float>() == F32{4, 1, 8, 7});
    }
}

TEST_CASE("GatherElements: bad input") {
    {
        OpTest t;
        t.op("GatherElements", {t.input<float>({2, 3}, iota_float(6)), t.input<int64_t>({2, 3}, iota_int64(6))});
        t.set_int("axis", 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // rank differs
        t.op("GatherElements", {t.input<float>({2, 3}, iota_float(6)), t.input<int64_t>({6}, iota_int64(6))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // larger than data off the axis
        t.op("GatherElements", {t.input<float>({2, 3}, iota_float(6)), t.input<int64_t>({1, 4}, {0, 0, 0, 0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("GatherElements", {t.input<float>({2, 3}, iota_float(6)), t.input<float>({2, 3}, iota_float(6))});
        t.fails(Status::Unsupported);   // float indices
    }
    {
        OpTest t;
        t.op("GatherElements", {t.input<float>({2, 3}, iota_float(6))});
        t.fails(Status::InvalidArgument);   // one input
    }
    {
        OpTest t;
        t.opset = 10;
        t.op("GatherElements", {t.input<float>({2, 3}, iota_float(6)), t.input<int64_t>({2, 3}, iota_int64(6))});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // a constant index out of range: prepare refuses it
        t.op("GatherElements", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({1, 1}, {-3})});
        t.fails(Status::InvalidArgument);
        CHECK(t.error().find("index -3 out of range for dimension 2") != std::string::npos);
    }
    {
        OpTest t;   // at run time
        t.op("GatherElements", {t.input<float>({2, 3}, iota_float(6)), t.input<int64_t>({1, 2}, {0, 2})});
        t.run_fails("index 2 out of range for dimension 2");
    }
    {
        OpTest t;   // through infer()
        t.op("GatherElements", {t.input<float>({2, 3}, iota_float(6)), t.input<int32_t>({1, 2}, {0, 5})});
        CHECK(t.infer() == Status::InvalidArgument);
        CHECK(t.infer_error.find("index 5 out of range") != std::string::npos);
    }
}

TEST_CASE("GatherND: tuples, slices, negative indices, batch_dims") {
    {
        OpTest t;   // whole tuples: elements
        t.op("GatherND", {t.input<int32_t>({2, 2}, {0, 1, 2, 3}), t.input<int64_t>({2, 2}, {0, 0, 1, 1})});
        t.go();
        CHECK(t.shape() == Shape{2});
        CHECK(t.out<int32_t>() == I32{0, 3});
    }
    {
        OpTest t;   // partial tuples: rows
        t.op("GatherND", {t.input<int32_t>({2, 2}, {0, 1, 2, 3}), t.input<int64_t>({2, 1}, {1, 0})});
        t.go();
        CHECK(t.shape() == Shape{2, 2});
        CHECK(t.out<int32_t>() == I32{2, 3, 0, 1});
    }
    {
        OpTest t;   // rank 3 data, negative and int32 indices
        t.op("GatherND", {t.input<float>({2, 2, 2}, iota_float(8)), t.input<int32_t>({2, 2}, {0, -1, -1, 0})});
        t.go();
        CHECK(t.shape() == Shape{2, 2});
        CHECK(t.out<float>() == F32{2, 3, 4, 5});
    }
    {
        OpTest t;   // batch_dims 1: each batch indexes its own block
        t.op("GatherND", {t.input<float>({2, 2, 2}, iota_float(8)), t.input<int64_t>({2, 1}, {1, 0})});
        t.set_int("batch_dims", 1);
        t.go();
        CHECK(t.shape() == Shape{2, 2});
        CHECK(t.out<float>() == F32{2, 3, 4, 5});
    }
    {
        OpTest t;   // batch_dims 1, elements of each batch, extra index dimensions
        t.op("GatherND", {t.input<float>({2, 3}, iota_float(6)), t.input<int64_t>({2, 2, 1}, {2, 0, 1, 1})});
        t.set_int("batch_dims", 1);
        t.go();
        CHECK(t.shape() == Shape{2, 2});
        CHECK(t.out<float>() == F32{2, 0, 4, 4});
    }
}

TEST_CASE("GatherND: bad input") {
    {
        OpTest t;   // batch_dims not below both ranks
        t.op("GatherND", {t.input<float>({2, 2}, iota_float(4)), t.input<int64_t>({2, 1}, {0, 1})});
        t.set_int("batch_dims", 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("GatherND", {t.input<float>({2, 2}, iota_float(4)), t.input<int64_t>({2, 1}, {0, 1})});
        t.set_int("batch_dims", -1);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // batch dimensions differ
        t.op("GatherND", {t.input<float>({2, 2}, iota_float(4)), t.input<int64_t>({3, 1}, {0, 1, 0})});
        t.set_int("batch_dims", 1);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // tuples longer than data's rank
        t.op("GatherND", {t.input<float>({2, 2}, iota_float(4)), t.input<int64_t>({1, 3}, {0, 0, 0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // empty tuples
        t.op("GatherND", {t.input<float>({2, 2}, iota_float(4)), t.input<int64_t>({2, 0}, {})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // scalar indices
        t.op("GatherND", {t.input<float>({2, 2}, iota_float(4)), t.input<int64_t>({}, {0})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // output rank 7 + 7
        t.op("GatherND", {t.input<float>({1, 1, 1, 1, 1, 1, 1, 1}, {1}), t.input<int64_t>({1, 1, 1, 1, 1, 1, 1, 1}, {0})});
        t.fails(Status::LimitExceeded);
    }
    {
        OpTest t;
        t.op("GatherND", {t.input<float>({2, 2}, iota_float(4)), t.input<uint8_t>({1, 1}, {0})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // the second index bounds by the second dimension
        t.op("GatherND", {t.input<float>({2, 3}, iota_float(6)), t.constant<int64_t>({1, 2}, {1, 3})});
        t.fails(Status::InvalidArgument);
        CHECK(t.error().find("index 3 out of range for dimension 3") != std::string::npos);
    }
    {
        OpTest t;
        t.op("GatherND", {t.input<float>({2, 3}, iota_float(6)), t.input<int64_t>({2, 2}, {1, 2, -3, 0})});
        t.run_fails("index -3 out of range for dimension 2");
    }
    {
        OpTest t;
        t.op("GatherND", {t.input<float>({2, 3}, iota_float(6)), t.input<int64_t>({1, 2}, {0, INT64_MIN})});
        CHECK(t.infer() == Status::InvalidArgument);
    }
}

TEST_CASE("ScatterElements: the ONNX examples, negative indices, reductions, Scatter") {
    {
        OpTest t;   // axis 0
        t.op("ScatterElements", {t.input<float>({3, 3}, F32(9, 0.0f)), t.input<int64_t>({2, 3}, {1, 0, 2, 0, 2, 1}),
                                 t.input<float>({2, 3}, {1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f})});
        t.go();
        CHECK(t.shape() == Shape{3, 3});
        CHECK(t.out<float>() == F32{2.0f, 1.1f, 0.0f, 1.0f, 0.0f, 2.2f, 0.0f, 2.1f, 1.2f});
        CHECK(t.prepared.in_place);
    }
    {
        OpTest t;   // axis 1, negative int32 indices
        t.op("ScatterElements", {t.input<float>({1, 5}, {1, 2, 3, 4, 5}), t.input<int32_t>({1, 2}, {1, -2}),
                                 t.input<float>({1, 2}, {1.1f, 2.1f})});
        t.set_int("axis", 1);
        t.go();
        CHECK(t.out<float>() == F32{1.0f, 1.1f, 3.0f, 2.1f, 5.0f});
    }
    struct Case { const char* reduction; uint32_t opset; F32 want; };
    const Case cases[] = {
        {"none", 11, {1, 2.1f, 3, 4, 5}},   // the last update wins
        {"add", 16, {1, 2 + 1.1f + 2.1f, 3, 4, 5}},
        {"mul", 16, {1, 2 * 1.1f * 2.1f, 3, 4, 5}},
        {"max", 18, {1, 2.1f, 3, 4, 5}},
        {"min", 18, {1, 1.1f, 3, 4, 5}},
    };
    for (const Case& k : cases) {
        INFO(k.reduction);
        OpTest t;   // duplicate indices
        t.opset = k.opset;
        t.op("ScatterElements", {t.input<float>({1, 5}, {1, 2, 3, 4, 5}), t.input<int64_t>({1, 2}, {1, 1}),
                                 t.input<float>({1, 2}, {1.1f, 2.1f})});
        t.set_int("axis", 1);
        t.set_string("reduction", k.reduction);
        t.go();
        check_close(t.out<float>(), k.want);
    }
    {
        OpTest t;   // int64 add and max
        t.opset = 18;
        t.op("ScatterElements", {t.input<int64_t>({3}, {10, 20, 30}), t.input<int64_t>({4}, {2, 0, 2, -1}),
                                 t.input<int64_t>({4}, {1, 2, 3, 4})});
        t.set_string("reduction", "add");
        t.go();
        CHECK(t.out<int64_t>() == I64{12, 20, 38});
    }
    {
        OpTest t;   // NaN wins a max
        t.opset = 18;
        t.op("ScatterElements", {t.input<float>({2}, {1, NAN}), t.input<int64_t>({2}, {0, 1}), t.input<float>({2}, {NAN, 5})});
        t.set_string("reduction", "max");
        t.go();
        F32 y = t.out<float>();
        CHECK(std::isnan(y[0]));
        CHECK(std::isnan(y[1]));
    }
    {
        OpTest t;   // Scatter (opset 9, 10) is ScatterElements; bool data moves as bytes
        t.opset = 10;
        t.op("Scatter", {t.input<uint8_t>({2, 2}, {0, 0, 0, 0}, ElementType::Bool), t.input<int64_t>({1, 2}, {1, 0}),
                         t.input<uint8_t>({1, 2}, {1, 1}, ElementType::Bool)});
        t.go();
        CHECK(t.type() == ElementType::Bool);
        CHECK(t.out<uint8_t>() == U8{0, 1, 1, 0});
    }
    {
        OpTest t;   // compiled and inferred
        t.op("ScatterElements", {t.input<float>({3}, {1, 2, 3}), t.input<int64_t>({1}, {-1}), t.input<float>({1}, {9})});
        CHECK(t.infer() == Status::Ok);
        CHECK(t.out<float>() == F32{1, 2, 9});
    }
}

TEST_CASE("ScatterElements: bad input") {
    auto scatter = [](OpTest& t, const Shape& indices_shape, const Shape& updates_shape) {
        int64_t n = 1, m = 1;
        for (int64_t d : indices_shape) n *= d;
        for (int64_t d : updates_shape) m *= d;
        t.op("ScatterElements", {t.input<float>({2, 3}, iota_float(6)), t.input<int64_t>(indices_shape, I64(n, 0)),
                                 t.input<float>(updates_shape, F32(m, 1.0f))});
    };
    {
        OpTest t;
        scatter(t, {2, 3}, {3, 2});   // updates' shape is not indices'
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        scatter(t, {6}, {6});   // rank differs
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        scatter(t, {2, 4}, {2, 4});   // larger than data off the axis
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        scatter(t, {2, 3}, {2, 3});
        t.set_int("axis", -3);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.opset = 18;
        scatter(t, {2, 3}, {2, 3});
        t.set_string("reduction", "mean");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // max came with opset 18
        t.opset = 17;
        scatter(t, {2, 3}, {2, 3});
        t.set_string("reduction", "max");
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // add came with opset 16
        t.opset = 13;
        scatter(t, {2, 3}, {2, 3});
        t.set_string("reduction", "add");
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // Scatter is ScatterElements' name before opset 11 only
        t.opset = 11;
        t.op("Scatter", {t.input<float>({3}, {1, 2, 3}), t.input<int64_t>({1}, {0}), t.input<float>({1}, {9})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // updates of another type
        t.op("ScatterElements", {t.input<float>({3}, {1, 2, 3}), t.input<int64_t>({1}, {0}), t.input<int64_t>({1}, {9})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // a reduction of bools
        t.opset = 16;
        t.op("ScatterElements", {t.input<uint8_t>({3}, {1, 0, 1}, ElementType::Bool), t.input<int64_t>({1}, {0}),
                                 t.input<uint8_t>({1}, {1}, ElementType::Bool)});
        t.set_string("reduction", "add");
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.op("ScatterElements", {t.input<float>({3}, {1, 2, 3}), t.constant<int64_t>({1}, {3}), t.input<float>({1}, {9})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // nothing is written when an index is bad
        t.op("ScatterElements", {t.input<float>({3}, {1, 2, 3}), t.input<int64_t>({2}, {0, -4}), t.input<float>({2}, {9, 9})});
        t.run_fails("index -4 out of range for dimension 3");
    }
    {
        OpTest t;
        t.op("ScatterElements", {t.input<float>({3}, {1, 2, 3}), t.input<int64_t>({2}, {0, 7}), t.input<float>({2}, {9, 9})});
        CHECK(t.infer() == Status::InvalidArgument);
    }
}

TEST_CASE("ScatterND: elements, slices, reductions") {
    {
        OpTest t;   // the ONNX example
        t.op("ScatterND", {t.input<float>({8}, iota_float(8, 1)), t.input<int64_t>({4, 1}, {4, 3, 1, 7}),
                           t.input<float>({4}, {9, 10, 11, 12})});
        t.go();
        CHECK(t.out<float>() == F32{1, 11, 3, 10, 9, 6, 7, 12});
        CHECK(t.prepared.in_place);
    }
    {
        OpTest t;   // rows, negative int32 index
        t.op("ScatterND", {t.input<float>({3, 2}, iota_float(6)), t.input<int32_t>({2, 1}, {-1, 0}),
                           t.input<float>({2, 2}, {9, 8, 7, 6})});
        t.go();
        CHECK(t.out<float>() == F32{7, 6, 2, 3, 9, 8});
    }
    {
        OpTest t;   // elements of a matrix
        t.op("ScatterND", {t.input<int64_t>({2, 2}, {1, 2, 3, 4}), t.input<int64_t>({2, 2}, {0, 1, 1, 0}),
                           t.input<int64_t>({2}, {9, 8})});
        t.go();
        CHECK(t.out<int64_t>() == I64{1, 9, 8, 4});
    }
    struct Case { const char* reduction; uint32_t opset; F32 want; };
    const Case cases[] = {
        {"add", 16, {31, 2, 33}},
        {"mul", 16, {200, 2, 90}},
        {"max", 18, {20, 2, 30}},
        {"min", 18, {1, 2, 3}},
    };
    for (const Case& k : cases) {
        INFO(k.reduction);
        OpTest t;
        t.opset = k.opset;
        t.op("ScatterND", {t.input<float>({3}, {1, 2, 3}), t.input<int64_t>({3, 1}, {0, 0, 2}),
                           t.input<float>({3}, {10, 20, 30})});
        t.set_string("reduction", k.reduction);
        t.go();
        CHECK(t.out<float>() == k.want);
    }
    {
        OpTest t;
        t.op("ScatterND", {t.input<float>({2, 2}, iota_float(4)), t.input<int64_t>({1, 1}, {1}), t.input<float>({1, 2}, {7, 7})});
        CHECK(t.infer() == Status::Ok);
        CHECK(t.out<float>() == F32{0, 1, 7, 7});
    }
}

TEST_CASE("ScatterND: bad input") {
    {
        OpTest t;   // updates must be indices.shape[:-1] + data.shape[k:]
        t.op("ScatterND", {t.input<float>({3, 2}, iota_float(6)), t.input<int64_t>({2, 1}, {0, 1}), t.input<float>({2}, {1, 2})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // tuples longer than data's rank
        t.op("ScatterND", {t.input<float>({3}, iota_float(3)), t.input<int64_t>({1, 2}, {0, 1}), t.input<float>({1}, {1})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("ScatterND", {t.input<float>({3}, iota_float(3)), t.input<int64_t>({}, {0}), t.input<float>({}, {1})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("ScatterND", {t.input<float>({3}, iota_float(3)), t.input<int64_t>({1, 1}, {0})});
        t.fails(Status::InvalidArgument);   // two inputs
    }
    {
        OpTest t;
        t.opset = 18;
        t.op("ScatterND", {t.input<float>({3}, iota_float(3)), t.input<int64_t>({1, 1}, {0}), t.input<float>({1}, {1})});
        t.set_string("reduction", "sub");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("ScatterND", {t.input<float>({3}, iota_float(3)), t.constant<int64_t>({1, 1}, {-4}), t.input<float>({1}, {1})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("ScatterND", {t.input<float>({3, 2}, iota_float(6)), t.input<int64_t>({2, 2}, {0, 0, 2, 2}), t.input<float>({2}, {1, 1})});
        t.run_fails("index 2 out of range for dimension 2");
    }
    {
        OpTest t;
        t.op("ScatterND", {t.input<float>({3}, iota_float(3)), t.input<int64_t>({1, 1}, {3}), t.input<float>({1}, {1})});
        CHECK(t.infer("TEMPLATE") == Status::InvalidArgument);
    }
}

// ---- one hot and reverse sequence ----------------------------------------------------------------

TEST_CASE("OneHot: negative indices wrap from opset 11, out of range is all off, axis, float indices") {
    {
        OpTest t;
        t.opset = 11;
        t.op("OneHot", {t.input<int64_t>({5}, {0, 3, -1, 4, -5}), t.constant<float>({}, {4}), t.input<float>({2}, {0, 1})});
        t.go();
        CHECK(t.shape() == Shape{5, 4});
        CHECK(t.out<float>() == F32{1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0});
    }
    {
        OpTest t;   // axis 0, float indices truncated toward zero, int64 depth of shape [1], int32 values
        t.op("OneHot", {t.input<float>({2, 2}, {1.9f, 0, 2, -0.5f}), t.constant<int64_t>({1}, {3}), t.input<int32_t>({2}, {0, 1})});
        t.set_int("axis", 0);
        t.go();
        CHECK(t.shape() == Shape{3, 2, 2});
        CHECK(t.type() == ElementType::Int32);
        CHECK(t.out<int32_t>() == I32{0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0});
    }
    {
        OpTest t;   // opset 9: a negative index is out of range
        t.opset = 9;
        t.op("OneHot", {t.input<int32_t>({2}, {-1, 1}), t.constant<int32_t>({}, {2}), t.input<float>({2}, {5, 7})});
        t.go();
        CHECK(t.out<float>() == F32{5, 5, 5, 7});
    }
    {
        OpTest t;   // axis -2 of a rank 2 output is 0
        t.op("OneHot", {t.input<int64_t>({2}, {1, 0}), t.constant<float>({}, {2}), t.input<int64_t>({2}, {0, 9})});
        t.set_int("axis", -2);
        t.go();
        CHECK(t.out<int64_t>() == I64{0, 9, 9, 0});
    }
    {
        OpTest t;
        t.op("OneHot", {t.input<int64_t>({2}, {2, 9}), t.constant<int64_t>({}, {3}), t.input<float>({2}, {0, 1})});
        CHECK(t.infer() == Status::Ok);
        CHECK(t.out<float>() == F32{0, 0, 1, 0, 0, 0});
    }
}

TEST_CASE("OneHot: bad input") {
    auto one_hot = [](OpTest& t, InputRef depth, const Shape& values_shape = {2}) {
        int64_t n = 1;
        for (int64_t d : values_shape) n *= d;
        t.op("OneHot", {t.input<int64_t>({2}, {0, 1}), depth, t.input<float>(values_shape, F32(n, 1.0f))});
    };
    {
        OpTest t;   // depth known only at run time
        one_hot(t, t.input<int64_t>({}, {3}));
        t.fails(Status::Unsupported);
        CHECK(t.error().find("data-dependent shape") != std::string::npos);
    }
    {
        OpTest t;
        one_hot(t, t.constant<int64_t>({2}, {3, 3}));
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        one_hot(t, t.constant<int64_t>({}, {-3}));
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        one_hot(t, t.constant<float>({}, {NAN}));
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // 2^63 does not fit in int64
        one_hot(t, t.constant<float>({}, {9.2233720e18f}));
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        one_hot(t, t.constant<int64_t>({}, {3}), {3});   // three values
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        one_hot(t, t.constant<int64_t>({}, {3}), {1, 2});   // values of rank 2
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        one_hot(t, t.constant<int64_t>({}, {3}));
        t.set_int("axis", 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("OneHot", {t.input<uint8_t>({2}, {0, 1}, ElementType::Bool), t.constant<int64_t>({}, {3}), t.input<float>({2}, {0, 1})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.op("OneHot", {t.input<int64_t>({1, 1, 1, 1, 1, 1, 1, 1}, {0}), t.constant<int64_t>({}, {3}), t.input<float>({2}, {0, 1})});
        t.fails(Status::LimitExceeded);
    }
    {
        OpTest t;
        t.opset = 8;
        one_hot(t, t.constant<int64_t>({}, {3}));
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.op("OneHot", {t.input<int64_t>({2}, {0, 1}), t.constant<int64_t>({}, {3})});
        t.fails(Status::InvalidArgument);
    }
}

TEST_CASE("ReverseSequence: time and batch axes, rows of several elements, empty sequences") {
    {
        OpTest t;   // the ONNX examples
        t.op("ReverseSequence", {t.input<float>({4, 4}, {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15}),
                                 t.input<int64_t>({4}, {4, 3, 2, 1})});
        t.go();
        CHECK(t.shape() == Shape{4, 4});
        CHECK(t.out<float>() == F32{3, 6, 9, 12, 2, 5, 8, 13, 1, 4, 10, 14, 0, 7, 11, 15});
    }
    {
        OpTest t;
        t.op("ReverseSequence", {t.input<float>({4, 4}, iota_float(16)), t.constant<int64_t>({4}, {1, 2, 3, 4})});
        t.set_int("batch_axis", 0);
        t.set_int("time_axis", 1);
        t.go();
        CHECK(t.out<float>() == F32{0, 1, 2, 3, 5, 4, 6, 7, 10, 9, 8, 11, 15, 14, 13, 12});
    }
    {
        OpTest t;   // [time 3, batch 2, 2], int32 lengths 0 and 3
        t.op("ReverseSequence", {t.input<int64_t>({3, 2, 2}, iota_int64(12)), t.input<int32_t>({2}, {0, 3})});
        t.go();
        CHECK(t.out<int64_t>() == I64{0, 1, 10, 11, 4, 5, 6, 7, 8, 9, 2, 3});
    }
}

TEST_CASE("ReverseSequence: bad input") {
    {
        OpTest t;
        t.op("ReverseSequence", {t.input<float>({4}, iota_float(4)), t.input<int64_t>({1}, {1})});
        t.fails(Status::InvalidArgument);   // rank 1
    }
    const int64_t axes[][2] = {{0, 0}, {1, 1}, {2, 0}, {-1, 0}};
    for (const auto& a : axes) {
        OpTest t;
        t.op("ReverseSequence", {t.input<float>({2, 2}, iota_float(4)), t.input<int64_t>({2}, {1, 1})});
        t.set_int("batch_axis", a[0]);
        t.set_int("time_axis", a[1]);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // one length per batch
        t.op("ReverseSequence", {t.input<float>({2, 3}, iota_float(6)), t.input<int64_t>({2}, {1, 1})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("ReverseSequence", {t.input<float>({2, 2}, iota_float(4)), t.input<int64_t>({2, 1}, {1, 1})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("ReverseSequence", {t.input<float>({2, 2}, iota_float(4)), t.input<float>({2}, {1, 1})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.opset = 9;
        t.op("ReverseSequence", {t.input<float>({2, 2}, iota_float(4)), t.input<int64_t>({2}, {1, 1})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;   // longer than the time axis, known at compile time
        t.op("ReverseSequence", {t.input<float>({2, 2}, iota_float(4)), t.constant<int64_t>({2}, {1, 3})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("ReverseSequence", {t.input<float>({2, 2}, iota_float(4)), t.input<int64_t>({2}, {-1, 1})});
        t.run_fails("sequence length -1 out of range 0..2");
    }
    {
        OpTest t;
        t.op("ReverseSequence", {t.input<float>({2, 2}, iota_float(4)), t.input<int64_t>({2}, {1, 9})});
        CHECK(t.infer() == Status::InvalidArgument);
        CHECK(t.infer_error.find("sequence length 9") != std::string::npos);
    }
}

// ---- top-k ---------------------------------------------------------------------------------------

TEST_CASE("TopK: largest and smallest, ties to the lower index, NaN as the largest, k before opset 10") {
    {
        OpTest t;
        t.op("TopK", {t.input<float>({3, 4}, iota_float(12)), t.constant<int64_t>({1}, {3})}, 2);
        t.go();
        CHECK(t.shape(0) == Shape{3, 3});
        CHECK(t.shape(1) == Shape{3, 3});
        CHECK(t.type(1) == ElementType::Int64);
        CHECK(t.out<float>(0) == F32{3, 2, 1, 7, 6, 5, 11, 10, 9});
        CHECK(t.out<int64_t>(1) == I64{3, 2, 1, 3, 2, 1, 3, 2, 1});
    }
    {
        OpTest t;   // smallest along axis 0, ties
        t.op("TopK", {t.input<float>({3, 2}, {1, 5, 1, 5, 0, 5}), t.constant<int64_t>({1}, {2})}, 2);
        t.set_int("axis", 0);
        t.set_int("largest", 0);
        t.go();
        CHECK(t.shape(0) == Shape{2, 2});
        CHECK(t.out<float>(0) == F32{0, 5, 1, 5});
        CHECK(t.out<int64_t>(1) == I64{2, 0, 0, 1});
    }
    {
        OpTest t;   // equal values: the lower index first
        t.op("TopK", {t.input<int64_t>({4}, {0, 0, 0, 0}), t.constant<int64_t>({1}, {3})}, 2);
        t.go();
        CHECK(t.out<int64_t>(0) == I64{0, 0, 0});
        CHECK(t.out<int64_t>(1) == I64{0, 1, 2});
    }
    for (int largest = 0; largest < 2; ++largest) {
        OpTest t;
        t.op("TopK", {t.input<float>({4}, {1, NAN, 3, NAN}), t.constant<int64_t>({1}, {3})}, 2);
        t.set_int("largest", largest);
        t.go();
        F32 v = t.out<float>(0);
        I64 want = largest ? I64{1, 3, 2} : I64{0, 2, 1};
        CHECK(t.out<int64_t>(1) == want);
        CHECK(std::isnan(v[2]) == !largest);
        CHECK(std::isnan(v[0]) == (largest == 1));
    }
    {
        OpTest t;   // opset 1: k is an attribute, largest always
        t.opset = 1;
        t.op("TopK", {t.input<int32_t>({4}, {4, 1, 3, 2})}, 2);
        t.set_int("k", 2);
        t.set_int("largest", 0);   // not an attribute before opset 11
        t.go();
        CHECK(t.out<int32_t>(0) == I32{4, 3});
        CHECK(t.out<int64_t>(1) == I64{0, 2});
    }
    {
        OpTest t;   // k 0: empty outputs
        t.op("TopK", {t.input<float>({2, 3}, iota_float(6)), t.constant<int32_t>({}, {0})}, 2);
        t.go();
        CHECK(t.shape(0) == Shape{2, 0});
        CHECK(t.out<float>(0).empty());
    }
}

TEST_CASE("TopK: random lines with repeated values against a stable sort, several threads") {
    std::mt19937 rng(7);
    const Shape shape{3, 37, 5};
    std::vector<float> x(3 * 37 * 5);
    for (float& v : x) v = (float)(rng() % 9) - 4.0f;
    for (int largest = 0; largest < 2; ++largest) {
        OpTest t;
        t.opset = 11;
        t.op("TopK", {t.input<float>(shape, x), t.constant<int64_t>({1}, {11})}, 2);
        t.set_int("axis", -2);
        t.set_int("largest", largest);
        REQUIRE(t.infer("CPU", "3") == Status::Ok);
        F32 values = t.out<float>(0);
        I64 indices = t.out<int64_t>(1);
        REQUIRE(values.size() == 3 * 11 * 5);
        for (int o = 0; o < 3; ++o)
            for (int i = 0; i < 5; ++i) {
                std::vector<int64_t> order(37);
                for (int j = 0; j < 37; ++j) order[j] = j;
                auto at = [&](int64_t j) { return x[(o * 37 + j) * 5 + i]; };
                std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
                    return largest ? at(a) > at(b) : at(a) < at(b);
                });
                for (int j = 0; j < 11; ++j) {
                    CHECK(indices[(o * 11 + j) * 5 + i] == order[j]);
                    CHECK(values[(o * 11 + j) * 5 + i] == at(order[j]));
                }
            }
    }
}

TEST_CASE("TopK: bad input") {
    {
        OpTest t;   // K known only at run time
        t.op("TopK", {t.input<float>({4}, iota_float(4)), t.input<int64_t>({1}, {2})}, 2);
        t.fails(Status::Unsupported);
        CHECK(t.error().find("data-dependent shape") != std::string::npos);
    }
    {
        OpTest t;
        t.op("TopK", {t.input<float>({4}, iota_float(4)), t.constant<int64_t>({2}, {2, 2})}, 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("TopK", {t.input<float>({4}, iota_float(4)), t.constant<int64_t>({1}, {5})}, 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("TopK", {t.input<float>({4}, iota_float(4)), t.constant<int64_t>({1}, {-1})}, 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("TopK", {t.input<float>({4}, iota_float(4)), t.constant<int64_t>({1}, {1})}, 2);
        t.set_int("axis", 1);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("TopK", {t.input<float>({}, {1}), t.constant<int64_t>({1}, {1})}, 2);
        t.fails(Status::InvalidArgument);   // a scalar has no axis
    }
    {
        OpTest t;
        t.op("TopK", {t.input<uint8_t>({4}, {1, 0, 1, 0}, ElementType::Bool), t.constant<int64_t>({1}, {1})}, 2);
        t.fails(Status::Unsupported);   // bool (every numeric type is supported)
    }
    {
        OpTest t;
        t.op("TopK", {t.input<float>({4}, iota_float(4)), t.constant<float>({1}, {1})}, 2);
        t.fails(Status::Unsupported);   // float K
    }
    {
        OpTest t;   // both outputs are required
        t.op("TopK", {t.input<float>({4}, iota_float(4)), t.constant<int64_t>({1}, {1})}, 1);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.opset = 9;
        t.op("TopK", {t.input<float>({4}, iota_float(4))}, 2);
        t.fails(Status::InvalidArgument);   // no attribute k
    }
    {
        OpTest t;
        t.opset = 9;
        t.op("TopK", {t.input<float>({4}, iota_float(4)), t.constant<int64_t>({1}, {1})}, 2);
        t.fails(Status::InvalidArgument);   // K is not an input before opset 10
    }
}

// ---- more normalizations -----------------------------------------------------------------------

namespace {

const F32 kSample = {1.76405239f, 0.400157213f, 0.97873801f, 2.24089313f, 1.867558f, -0.977277875f, 0.950088441f,
                     -0.151357204f, -0.103218853f, 0.410598516f, 0.144043565f, 1.45427346f, 0.761037707f, 0.121675014f,
                     0.443863243f, 0.333674341f};

// x normalized over the elements whose index differs only along `axes` (dims of `shape`):
// f(x, mean, variance) in double.
template <class F>
F32 over_groups(const F32& x, const Shape& shape, const std::vector<int>& axes, F f) {
    size_t rank = shape.size(), n = x.size();
    std::vector<int64_t> key(n);
    for (size_t e = 0; e < n; ++e) {   // the index with the normalized axes zeroed, as a key
        int64_t rest = (int64_t)e, k = 0, stride = 1;
        for (size_t d = rank; d-- > 0;) {
            int64_t i = rest % shape[d];
            rest /= shape[d];
            if (std::find(axes.begin(), axes.end(), (int)d) == axes.end()) k += i * stride;
            stride *= shape[d];
        }
        key[e] = k;
    }
    std::map<int64_t, std::pair<double, double>> moments;   // sum, count
    for (size_t e = 0; e < n; ++e) { moments[key[e]].first += x[e]; moments[key[e]].second += 1; }
    std::map<int64_t, double> variance;
    for (size_t e = 0; e < n; ++e) {
        double m = moments[key[e]].first / moments[key[e]].second;
        variance[key[e]] += (x[e] - m) * (x[e] - m) / moments[key[e]].second;
    }
    F32 y(n);
    for (size_t e = 0; e < n; ++e)
        y[e] = (float)f(x[e], moments[key[e]].first / moments[key[e]].second, variance[key[e]], e);
    return y;
}

}  // namespace

TEST_CASE("LpNormalization: p 1 and 2, axes, a zero line") {
    {
        OpTest t;
        t.op("LpNormalization", {t.input<float>({2, 2}, {3, 4, 6, 8})});
        t.go();
        check_close(t.out<float>(), {0.6f, 0.8f, 0.6f, 0.8f});
        CHECK(t.prepared.in_place);
    }
    {
        OpTest t;   // p 1 sums magnitudes
        t.op("LpNormalization", {t.input<float>({2, 2}, {3, -1, 1, 3})});
        t.set_int("axis", 0);
        t.set_int("p", 1);
        t.go();
        check_close(t.out<float>(), {0.75f, -0.25f, 0.25f, 0.75f});
    }
    {
        OpTest t;   // a zero norm gives zeros, not NaN
        t.op("LpNormalization", {t.input<float>({2, 3}, {0, 0, 0, 1, 2, 2})});
        t.go();
        check_close(t.out<float>(), {0, 0, 0, 1.0f / 3, 2.0f / 3, 2.0f / 3});
    }
    {
        OpTest t;   // axis 1 of a rank 3 tensor
        t.op("LpNormalization", {t.input<float>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})});
        t.set_int("axis", 1);
        REQUIRE(t.infer("CPU", "2") == Status::Ok);
        check_close(t.out<float>(), {1 / std::sqrt(10.0f), 2 / std::sqrt(20.0f), 3 / std::sqrt(10.0f), 4 / std::sqrt(20.0f),
                                     5 / std::sqrt(74.0f), 6 / std::sqrt(100.0f), 7 / std::sqrt(74.0f), 8 / std::sqrt(100.0f)});
    }
}

TEST_CASE("LpNormalization: bad input") {
    {
        OpTest t;
        t.op("LpNormalization", {t.input<float>({2, 2}, {3, 4, 6, 8})});
        t.set_int("p", 3);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("LpNormalization", {t.input<float>({2, 2}, {3, 4, 6, 8})});
        t.set_int("axis", 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("LpNormalization", {t.input<float>({}, {3})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("LpNormalization", {t.input<int64_t>({2}, {3, 4})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.op("LpNormalization", {t.input<float>({2}, {3, 4}), t.input<float>({2}, {3, 4})});
        t.fails(Status::InvalidArgument);
    }
}

TEST_CASE("MeanVarianceNormalization: default axes, chosen axes, a constant group") {
    auto mvn = [](double x, double mean, double variance, size_t) { return (x - mean) / (std::sqrt(variance) + 1e-9); };
    {
        OpTest t;   // axes 0, 2, 3: per channel
        t.op("MeanVarianceNormalization", {t.input<float>({2, 2, 2, 2}, kSample)});
        t.go();
        check_close(t.out<float>(), over_groups(kSample, {2, 2, 2, 2}, {0, 2, 3}, mvn));
        CHECK(t.prepared.in_place);
    }
    {
        OpTest t;
        t.op("MeanVarianceNormalization", {t.input<float>({4, 4}, kSample)});
        t.set_ints("axes", {-1});
        t.go();
        check_close(t.out<float>(), over_groups(kSample, {4, 4}, {1}, mvn));
    }
    {
        OpTest t;   // a constant row gives zeros
        t.op("MeanVarianceNormalization", {t.input<float>({2, 3}, {1, 2, 3, 4, 4, 4})});
        t.set_ints("axes", {1});
        REQUIRE(t.infer() == Status::Ok);
        check_close(t.out<float>(), {-1.22474487f, 0, 1.22474487f, 0, 0, 0});
    }
}

TEST_CASE("MeanVarianceNormalization: bad input") {
    {
        OpTest t;   // the default axes need rank 4
        t.op("MeanVarianceNormalization", {t.input<float>({2, 2, 4}, kSample)});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("MeanVarianceNormalization", {t.input<float>({4, 4}, kSample)});
        t.set_ints("axes", {1, -1});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.opset = 8;
        t.op("MeanVarianceNormalization", {t.input<float>({2, 2, 2, 2}, kSample)});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.op("MeanVarianceNormalization", {t.input<int32_t>({1, 1, 1, 2}, {1, 2})});
        t.fails(Status::Unsupported);
    }
}

TEST_CASE("RMSNormalization: axes, broadcast scale, epsilon") {
    auto rms = [](const F32& x, const F32& scale, int64_t rows, int64_t inner, double epsilon) {
        F32 y(x.size());
        for (int64_t r = 0; r < rows; ++r) {
            double squares = 0;
            for (int64_t j = 0; j < inner; ++j) squares += (double)x[r * inner + j] * x[r * inner + j];
            double inv = 1 / std::sqrt(squares / inner + epsilon);
            for (int64_t j = 0; j < inner; ++j) y[r * inner + j] = (float)(x[r * inner + j] * inv * scale[j % scale.size()]);
        }
        return y;
    };
    {
        OpTest t;
        t.opset = 23;
        t.op("RMSNormalization", {t.input<float>({2, 3}, {1, 2, 3, -1, 0, 1}), t.input<float>({3}, {1, 2, 0.5f})});
        t.go();
        check_close(t.out<float>(), rms({1, 2, 3, -1, 0, 1}, {1, 2, 0.5f}, 2, 3, 1e-5));
        CHECK(t.prepared.in_place);
    }
    {
        OpTest t;   // axis 0: one row; a scale of the whole shape
        t.opset = 23;
        F32 scale(kSample.rbegin(), kSample.rend());
        t.op("RMSNormalization", {t.input<float>({4, 4}, kSample), t.input<float>({4, 4}, scale)});
        t.set_int("axis", 0);
        t.set_float("epsilon", 0.1f);
        t.go();
        check_close(t.out<float>(), rms(kSample, scale, 1, 16, 0.1f));
    }
    {
        OpTest t;   // axis -2 of rank 3, a scale of [1, 2] broadcast over the rows
        t.opset = 23;
        t.op("RMSNormalization", {t.input<float>({2, 4, 2}, kSample), t.input<float>({1, 2}, {2, -1})});
        t.set_int("axis", -2);
        REQUIRE(t.infer("CPU", "2") == Status::Ok);
        check_close(t.out<float>(), rms(kSample, {2, -1}, 2, 8, 1e-5));
    }
}

TEST_CASE("RMSNormalization: bad input") {
    {
        OpTest t;   // opset 23 op
        t.opset = 22;
        t.op("RMSNormalization", {t.input<float>({2, 3}, iota_float(6)), t.input<float>({3}, {1, 1, 1})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.opset = 23;
        t.op("RMSNormalization", {t.input<float>({2, 3}, iota_float(6)), t.input<float>({2}, {1, 1})});
        t.fails(Status::InvalidArgument);   // scale does not broadcast to [3]
    }
    {
        OpTest t;
        t.opset = 23;
        t.op("RMSNormalization", {t.input<float>({2, 3}, iota_float(6)), t.input<float>({2, 3}, iota_float(6))});
        t.set_int("axis", 1);
        t.fails(Status::InvalidArgument);   // scale larger than the normalized shape
    }
    {
        OpTest t;
        t.opset = 23;
        t.op("RMSNormalization", {t.input<float>({2, 3}, iota_float(6)), t.input<float>({3}, {1, 1, 1})});
        t.set_int("axis", -3);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.opset = 23;
        t.op("RMSNormalization", {t.input<float>({2, 3}, iota_float(6)), t.input<float>({3}, {1, 1, 1})});
        t.set_int("stash_type", 10);
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.opset = 23;
        t.op("RMSNormalization", {t.input<float>({2, 3}, iota_float(6))});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.opset = 23;
        t.op("RMSNormalization", {t.input<float>({2, 3}, iota_float(6)), t.input<int64_t>({3}, {1, 1, 1})});
        t.fails(Status::Unsupported);
    }
}

TEST_CASE("GroupNormalization: scale and bias per group (opset 18) and per channel (opset 21)") {
    const F32 scale{0.5f, -1, 2, 1.5f}, bias{0.1f, 0.2f, -0.3f, 0.4f};
    for (uint32_t opset : {18u, 21u}) {
        INFO("opset " << opset);
        OpTest t;
        t.opset = opset;
        F32 s = opset == 21 ? scale : F32{scale[0], scale[1]}, b = opset == 21 ? bias : F32{bias[0], bias[1]};
        t.op("GroupNormalization", {t.input<float>({2, 4, 2}, kSample), t.input<float>({(int64_t)s.size()}, s),
                                    t.input<float>({(int64_t)b.size()}, b)});
        t.set_int("num_groups", 2);
        t.set_float("epsilon", 1e-3f);
        t.go();
        CHECK(t.prepared.in_place);
        // groups of 2 channels x 2: axes 1 and 2 of the shape [2 batches, 2 groups, 4]
        F32 want = over_groups(kSample, {2, 2, 4}, {2}, [&](double x, double mean, double variance, size_t e) {
            size_t channel = e / 2 % 4, p = opset == 21 ? channel : channel / 2;
            return (x - mean) / std::sqrt(variance + 1e-3) * s[p] + b[p];
        });
        check_close(t.out<float>(), want);
    }
    {
        OpTest t;   // rank 2, one group per channel, compiled
        t.opset = 21;
        t.op("GroupNormalization", {t.input<float>({4, 4}, kSample), t.input<float>({4}, {1, 1, 1, 1}), t.input<float>({4}, {0, 0, 0, 0})});
        t.set_int("num_groups", 4);
        REQUIRE(t.infer() == Status::Ok);
        check_close(t.out<float>(), F32(16, 0.0f), 1e-5, 1e-6);   // one element per group normalizes to 0
    }
}

TEST_CASE("GroupNormalization: bad input") {
    auto group_norm = [](OpTest& t, int64_t params) {
        t.op("GroupNormalization", {t.input<float>({2, 4, 2}, kSample), t.input<float>({params}, F32(params, 1.0f)),
                                    t.input<float>({params}, F32(params, 0.0f))});
    };
    {
        OpTest t;
        t.opset = 21;
        group_norm(t, 4);
        t.fails(Status::InvalidArgument);   // num_groups missing
    }
    for (int64_t groups : {3, 0, -2}) {
        OpTest t;
        t.opset = 21;
        group_norm(t, 4);
        t.set_int("num_groups", groups);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // opset 21: one value per channel
        t.opset = 21;
        group_norm(t, 2);
        t.set_int("num_groups", 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // opset 18: one value per group
        t.opset = 18;
        group_norm(t, 4);
        t.set_int("num_groups", 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.opset = 17;
        group_norm(t, 4);
        t.set_int("num_groups", 4);
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.opset = 21;
        group_norm(t, 4);
        t.set_int("num_groups", 4);
        t.set_int("stash_type", 16);
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.opset = 21;
        t.op("GroupNormalization", {t.input<float>({4}, {1, 2, 3, 4}), t.input<float>({1}, {1}), t.input<float>({1}, {0})});
        t.set_int("num_groups", 1);
        t.fails(Status::InvalidArgument);   // rank 1
    }
}

// ---- loss ops ------------------------------------------------------------------------------------

TEST_CASE("NegativeLogLikelihoodLoss: reductions, weights, ignore_index, spatial targets") {
    const F32 x{-1.2f, -0.5f, -2.0f, -0.3f, -1.5f, -0.9f};
    struct Case { const char* reduction; bool weight; bool ignore; F32 want; };
    const Case cases[] = {
        {"none", false, false, {0.5f, 0.9f}},
        {"sum", false, false, {1.4f}},
        {"mean", false, false, {0.7f}},
        {"none", true, false, {0.25f, 1.8f}},
        {"sum", true, false, {2.05f}},
        {"mean", true, false, {0.82f}},     // 2.05 / (0.5 + 2)
        {"none", true, true, {0, 1.8f}},
        {"mean", true, true, {0.9f}},       // 1.8 / 2: the ignored target's weight is left out
        {"mean", false, true, {0.9f}},
    };
    for (const Case& k : cases) {
        INFO(k.reduction << " weight " << k.weight << " ignore " << k.ignore);
        OpTest t;
        std::vector<InputRef> inputs{t.input<float>({2, 3}, x), t.input<int64_t>({2}, {1, 2})};
        if (k.weight) inputs.push_back(t.input<float>({3}, {0.2f, 0.5f, 2.0f}));
        t.op("NegativeLogLikelihoodLoss", inputs);
        t.set_string("reduction", k.reduction);
        if (k.ignore) t.set_int("ignore_index", 1);
        t.go();
        CHECK(t.shape() == (k.want.size() == 1 ? Shape{} : Shape{2}));
        check_close(t.out<float>(), k.want);
    }
    {
        OpTest t;   // the default reduction is mean; a negative ignore_index; int32 targets
        t.op("NegativeLogLikelihoodLoss", {t.input<float>({2, 3}, x), t.input<int32_t>({2}, {-1, 2})});
        t.set_int("ignore_index", -1);
        t.go();
        check_close(t.out<float>(), {0.9f});
    }
    {
        OpTest t;   // [N, C, d1]: target [N, d1]
        t.op("NegativeLogLikelihoodLoss", {t.input<float>({1, 2, 2}, {-0.1f, -0.2f, -2.3f, -1.6f}), t.input<int64_t>({1, 2}, {1, 0})});
        t.set_string("reduction", "none");
        REQUIRE(t.infer() == Status::Ok);
        check_close(t.out<float>(), {2.3f, 0.2f});
    }
}

TEST_CASE("NegativeLogLikelihoodLoss: bad input") {
    auto nll = [](OpTest& t, const Shape& x_shape, const Shape& target_shape, int64_t weights = 0) {
        int64_t n = 1, m = 1;
        for (int64_t d : x_shape) n *= d;
        for (int64_t d : target_shape) m *= d;
        std::vector<InputRef> inputs{t.input<float>(x_shape, F32(n, -1.0f)), t.input<int64_t>(target_shape, I64(m, 0))};
        if (weights) inputs.push_back(t.input<float>({weights}, F32(weights, 1.0f)));
        t.op("NegativeLogLikelihoodLoss", inputs);
    };
    {
        OpTest t;
        nll(t, {3}, {3});
        t.fails(Status::InvalidArgument);   // no class dimension
    }
    {
        OpTest t;
        nll(t, {2, 3}, {3});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        nll(t, {2, 3, 4}, {2, 3});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        nll(t, {2, 3}, {2}, 2);
        t.fails(Status::InvalidArgument);   // weight of 2 for 3 classes
    }
    {
        OpTest t;
        nll(t, {2, 3}, {2});
        t.set_string("reduction", "max");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.opset = 11;
        nll(t, {2, 3}, {2});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.op("NegativeLogLikelihoodLoss", {t.input<float>({2, 3}, F32(6, -1.0f)), t.input<float>({2}, {0, 1})});
        t.fails(Status::Unsupported);   // float targets
    }
    {
        OpTest t;
        t.op("NegativeLogLikelihoodLoss", {t.input<int64_t>({2, 3}, I64(6, 1)), t.input<int64_t>({2}, {0, 1})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.op("NegativeLogLikelihoodLoss", {t.input<float>({2, 3}, F32(6, -1.0f)), t.input<int64_t>({2}, {0, 1})}, 2);
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("NegativeLogLikelihoodLoss", {t.input<float>({2, 3}, F32(6, -1.0f)), t.constant<int64_t>({2}, {0, 3})});
        t.fails(Status::InvalidArgument);
        CHECK(t.error().find("target 3 out of range for 3 classes") != std::string::npos);
    }
    {
        OpTest t;   // ignore_index does not cover another bad target
        t.op("NegativeLogLikelihoodLoss", {t.input<float>({2, 3}, F32(6, -1.0f)), t.input<int64_t>({2}, {-1, -2})});
        t.set_int("ignore_index", -1);
        t.run_fails("target -2 out of range for 3 classes");
    }
    {
        OpTest t;
        t.op("NegativeLogLikelihoodLoss", {t.input<float>({2, 3}, F32(6, -1.0f)), t.input<int32_t>({2}, {0, 7})});
        CHECK(t.infer() == Status::InvalidArgument);
    }
}

TEST_CASE("SoftmaxCrossEntropyLoss: log_prob output, weights, ignore_index, large scores, spatial labels") {
    const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), l3 = std::log(3.0);
    {
        OpTest t;
        t.op("SoftmaxCrossEntropyLoss", {t.input<float>({2, 3}, {1, 2, 3, 1, 1, 1}), t.input<int64_t>({2}, {2, 0})}, 2);
        t.set_string("reduction", "none");
        t.go();
        CHECK(t.shape(0) == Shape{2});
        CHECK(t.shape(1) == Shape{2, 3});
        check_close(t.out<float>(0), {(float)(lse - 3), (float)l3});
        check_close(t.out<float>(1), {(float)(1 - lse), (float)(2 - lse), (float)(3 - lse), (float)-l3, (float)-l3, (float)-l3});
    }
    {
        OpTest t;   // mean (the default) without the second output
        t.op("SoftmaxCrossEntropyLoss", {t.input<float>({2, 3}, {1, 2, 3, 1, 1, 1}), t.input<int64_t>({2}, {2, 0})});
        t.go();
        CHECK(t.shape() == Shape{});
        check_close(t.out<float>(), {(float)((lse - 3 + l3) / 2)});
    }
    for (const char* reduction : {"mean", "sum"}) {
        OpTest t;   // weights 1, 2, 3; label 0 ignored
        t.op("SoftmaxCrossEntropyLoss", {t.input<float>({2, 3}, {1, 2, 3, 1, 1, 1}), t.input<int64_t>({2}, {2, 0}),
                                         t.input<float>({3}, {1, 2, 3})});
        t.set_string("reduction", reduction);
        t.set_int("ignore_index", 0);
        t.go();
        double sum = (lse - 3) * 3;
        check_close(t.out<float>(), {(float)(reduction[0] == 'm' ? sum / 3 : sum)});
    }
    {
        OpTest t;   // log_softmax, not log(softmax): no -inf for a far class
        t.op("SoftmaxCrossEntropyLoss", {t.input<float>({1, 2}, {1000, 0}), t.input<int64_t>({1}, {1})}, 2);
        t.go();
        check_close(t.out<float>(0), {1000});
        check_close(t.out<float>(1), {0, -1000});
    }
    {
        OpTest t;   // [N, C, d1]
        t.op("SoftmaxCrossEntropyLoss", {t.input<float>({1, 2, 2}, {0, 0, 0, (float)l3}), t.input<int32_t>({1, 2}, {0, 1})});
        REQUIRE(t.infer() == Status::Ok);
        check_close(t.out<float>(), {(float)((std::log(2.0) - std::log(0.75)) / 2)});
    }
}

TEST_CASE("SoftmaxCrossEntropyLoss: bad input") {
    {
        OpTest t;
        t.op("SoftmaxCrossEntropyLoss", {t.input<float>({2, 3}, F32(6, 1.0f)), t.input<int64_t>({2}, {0, 1})}, 3);
        t.fails(Status::InvalidArgument);   // three outputs
    }
    {
        OpTest t;
        t.op("SoftmaxCrossEntropyLoss", {t.input<float>({2, 3, 2}, F32(12, 1.0f)), t.input<int64_t>({2, 3}, I64(6, 0))});
        t.fails(Status::InvalidArgument);   // labels [N, d1] is [2, 2]
    }
    {
        OpTest t;
        t.op("SoftmaxCrossEntropyLoss", {t.input<float>({2, 3}, F32(6, 1.0f)), t.input<int64_t>({2}, {0, 1}),
                                         t.input<float>({1, 3}, {1, 1, 1})});
        t.fails(Status::InvalidArgument);   // weight of rank 2
    }
    {
        OpTest t;
        t.op("SoftmaxCrossEntropyLoss", {t.input<float>({2, 3}, F32(6, 1.0f)), t.input<int64_t>({2}, {0, 1})});
        t.set_string("reduction", "average");
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.opset = 11;
        t.op("SoftmaxCrossEntropyLoss", {t.input<float>({2, 3}, F32(6, 1.0f)), t.input<int64_t>({2}, {0, 1})});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.op("SoftmaxCrossEntropyLoss", {t.input<float>({2, 3}, F32(6, 1.0f)), t.input<int64_t>({2}, {0, 3})}, 2);
        t.run_fails("target 3 out of range for 3 classes");
    }
    {
        OpTest t;
        t.op("SoftmaxCrossEntropyLoss", {t.input<float>({2, 3}, F32(6, 1.0f)), t.input<int64_t>({2}, {-3, 1})});
        CHECK(t.infer("TEMPLATE") == Status::InvalidArgument);
    }
}

// ---- all of them ---------------------------------------------------------------------------------

TEST_CASE("index, normalization and loss ops: random malformed nodes fail with a Status, never crash") {
    // Random op, opset, input types, shapes, values (known or not, absent), output counts and
    // attributes. A prepare that succeeds must describe outputs that can be allocated and a
    // run that returns (Ok or a Status); the sanitizer builds catch what this cannot see.
    const char* ops[] = {"GatherElements", "GatherND", "ScatterElements", "Scatter", "ScatterND", "OneHot",
                         "ReverseSequence", "TopK", "LpNormalization", "MeanVarianceNormalization", "RMSNormalization",
                         "GroupNormalization", "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"};
    const char* int_names[] = {"axis", "batch_dims", "k", "p", "largest", "sorted", "num_groups", "ignore_index",
                               "batch_axis", "time_axis", "stash_type"};
    const char* reductions[] = {"none", "add", "mul", "max", "min", "sum", "mean", "bad"};
    MalformedPicker picker(20261129);
    auto pick = [&](uint32_t n) { return picker.pick(n); };
    auto special = [&]() { return picker.special(); };
    uint32_t prepared = 0, ran = 0;
    for (int iteration = 0; iteration < 40000; ++iteration) {
        OpTest t;
        t.opset = pick(2) ? 23 : 7 + pick(17);
        uint32_t which = pick(sizeof ops / sizeof ops[0]);
        const char* op = ops[which];
        // mostly the op's own input count, and shapes related to the first input's, so that
        // enough nodes get past prepare
        const uint32_t arity[] = {2, 2, 3, 3, 3, 3, 2, 2, 1, 1, 2, 3, 3, 3};
        uint32_t num_inputs = pick(4) ? arity[which] : pick(5);
        Shape base(1 + pick(4));
        for (int64_t& d : base) d = 1 + pick(3);
        std::vector<InputRef> inputs;
        for (uint32_t i = 0; i < num_inputs; ++i) {
            if (pick(10) == 0) { inputs.push_back(t.model.absent()); continue; }
            ElementType type = pick(3) == 0 ? ElementType::Int64 : pick(2) ? ElementType::Float32 : picker.any_type();
            Shape shape;
            switch (pick(6)) {
                case 0: case 1: shape = base; break;
                case 2: shape = base; if (shape.size() > 1) shape.erase(shape.begin() + 1); break;   // a loss target
                case 3: shape = {base.size() > 1 ? base[1] : base[0]}; break;   // per channel
                case 4: shape = base; shape.push_back(1 + pick(2)); break;      // GatherND's tuples
                default: shape.resize(pick(5)); for (int64_t& d : shape) d = pick(4); break;
            }
            size_t elements = 1;
            for (int64_t d : shape) elements *= (size_t)d;
            std::vector<unsigned char> bytes(elements * element_size(type));
            for (unsigned char& b : bytes) b = (unsigned char)picker.rng();
            if (type == ElementType::Int64 && pick(4))
                for (size_t k = 0; k < elements; ++k) {
                    int64_t v = pick(8) == 0 ? special() : (int64_t)pick(4) - 1;
                    std::memcpy(&bytes[k * 8], &v, 8);
                }
            if (type == ElementType::Float32 && pick(2))
                for (size_t k = 0; k < elements; ++k) {
                    float v = (float)pick(7) - 3.0f;
                    std::memcpy(&bytes[k * 4], &v, 4);
                }
            if (type == ElementType::Bool) for (unsigned char& b : bytes) b &= 1;
            inputs.push_back(pick(2) ? t.constant<unsigned char>(shape, bytes, type) : t.input<unsigned char>(shape, bytes, type));
        }
        uint32_t outputs = StringView(op) == StringView("TopK") ? 2 : 1;
        t.op(op, inputs, pick(4) ? outputs : 1 + pick(3));
        for (const char* name : int_names) if (pick(5) == 0) t.set_int(name, pick(4) == 0 ? special() : (int64_t)pick(5) - 1);
        if (pick(5) == 0) {
            std::vector<int64_t> v(pick(5));
            for (int64_t& x : v) x = pick(2) ? special() : (int64_t)pick(5) - 1;
            t.set_ints("axes", v);
        }
        if (pick(3) == 0) t.set_string("reduction", reductions[pick(8)]);
        if (pick(8) == 0) t.set_float("epsilon", pick(2) ? 0.0f : -1.0f);
        INFO(std::string(op) << " opset " << t.opset << " iteration " << iteration);
        t.prepare_and_run_any(&prepared, &ran);
    }
    MESSAGE("prepared " << prepared << ", ran " << ran);
    CHECK(prepared > 800);   // the generator reaches the kernels' bodies, not only their checks
    CHECK(ran > 600);
}
