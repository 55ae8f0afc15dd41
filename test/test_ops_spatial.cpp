// runtime.h spatial kernels (GridSample, AffineGrid, Col2Im, DeformConv, RoiAlign,
// CenterCropPad, MaxUnpool, Upsample, LpPool, LRN): each kernel is driven through prepare/run
// on a one-node model and checked against values worked out by hand and against a naive
// double-precision reference written here (GridSample recursively per dim as ONNX's
// reference, Col2Im as the adjoint of im2col, DeformConv tap by tap, LpPool and LRN as plain
// loops); each kind of bad input against its exact Status and a message naming the node.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
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

std::vector<float> iota_float(int n, float from = 0) {
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = from + (float)i;
    return v;
}

using test::random_floats;

int64_t product(const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, double rtol = 1e-5, double atol = 1e-5) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i << ": " << got[i] << ", expected " << want[i]);
        if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
        else CHECK(std::fabs((double)got[i] - want[i]) <= atol + rtol * std::fabs((double)want[i]));
    }
}

// ---- a naive GridSample, structured as ONNX's reference (one dim at a time) ----------------

struct GridRef {
    std::string mode = "linear", padding = "zeros";
    bool align = false;

    double reflect(double x, double lo, double hi) const {
        double range = hi - lo;
        if (range <= 0) return lo;
        while (x < lo || x > hi) x = x < lo ? 2 * lo - x : 2 * hi - x;   // mirror until inside
        return x;
    }
    // the pixel at index i of a 1-D line (ONNX's _pixel_at_array)
    double pixel(const std::function<double(int64_t)>& line, int64_t i, int64_t size, double lo, double hi) const {
        if (padding == "zeros") return i >= 0 && i < size ? line(i) : 0.0;
        if (padding == "reflection") i = (int64_t)reflect((double)i, lo, hi);
        i = i < 0 ? 0 : i >= size ? size - 1 : i;
        return line(i);
    }
    // value of the sub-array starting at dim d (offset `base`) at coordinates x[d..]
    double value(const std::vector<float>& data, const std::vector<int64_t>& dims, size_t d, int64_t base,
                 const std::vector<double>& x, const std::vector<double>& lo, const std::vector<double>& hi) const {
        if (d == dims.size()) return data[(size_t)base];
        int64_t stride = 1;
        for (size_t k = d + 1; k < dims.size(); ++k) stride *= dims[k];
        auto line = [&](int64_t i) { return value(data, dims, d + 1, base + i * stride, x, lo, hi); };
        if (mode == "nearest") return pixel(line, (int64_t)x[d], dims[d], lo[d], hi[d]);
        double f = std::floor(x[d]), t = x[d] - f;
        int64_t i0 = (int64_t)f;
        if (mode == "linear")
            return (1 - t) * pixel(line, i0, dims[d], lo[d], hi[d]) + t * pixel(line, i0 + 1, dims[d], lo[d], hi[d]);
        const double a = -0.75;
        auto k = [&](double s) {
            s = std::fabs(s);
            return s <= 1 ? ((a + 2) * s - (a + 3)) * s * s + 1 : s < 2 ? ((a * s - 5 * a) * s + 8 * a) * s - 4 * a : 0.0;
        };
        double v = 0;
        for (int j = -1; j <= 2; ++j) v += k(t - j) * pixel(line, i0 + j, dims[d], lo[d], hi[d]);
        return v;
    }
    // Y for X [N, C, dims...] and grid [N, out..., r]
    std::vector<float> run(const std::vector<float>& X, const Shape& xs, const std::vector<float>& G, const Shape& gs) const {
        size_t r = xs.size() - 2;
        std::vector<int64_t> dims(xs.begin() + 2, xs.end());
        int64_t points = product(Shape(gs.begin() + 1, gs.end() - 1)), plane = product(dims);
        std::vector<float> y;
        for (int64_t n = 0; n < xs[0]; ++n)
            for (int64_t c = 0; c < xs[1]; ++c) {
                std::vector<float> data(X.begin() + (n * xs[1] + c) * plane, X.begin() + (n * xs[1] + c + 1) * plane);
                for (int64_t p = 0; p < points; ++p) {
                    std::vector<double> x(r), lo(r), hi(r);
                    for (size_t d = 0; d < r; ++d) {
                        float g = G[(size_t)((n * points + p) * (int64_t)r + (int64_t)(r - 1 - d))];
                        float size = (float)dims[d];
                        x[d] = align ? (g + 1) / 2.0f * (size - 1) : ((g + 1) * size - 1) / 2.0f;
                        lo[d] = align ? 0 : -0.5;
                        hi[d] = align ? size - 1 : size - 0.5;
                        if (mode == "nearest") x[d] = std::nearbyint(x[d]);
                        if (x[d] < lo[d] || x[d] > hi[d]) {
                            if (padding == "border") x[d] = x[d] < 0 ? 0 : x[d] > size - 1 ? size - 1 : x[d];
                            else if (padding == "reflection") x[d] = reflect(x[d], lo[d], hi[d]);
                        }
                    }
                    y.push_back((float)value(data, dims, 0, 0, x, lo, hi));
                }
            }
        return y;
    }
};

}  // namespace

TEST_CASE("spatial ops: every op of the table is found") {
    const char* ours[] = {"GridSample", "AffineGrid", "Col2Im", "DeformConv", "RoiAlign", "CenterCropPad", "MaxUnpool", "Upsample",
                          "LpPool", "LRN"};
    for (const char* op : ours) {
        INFO(std::string(op));
        CHECK(find_builtin_kernel(op) != nullptr);
    }
}

// ---- grid sample and affine grid ------------------------------------------------------------

TEST_CASE("GridSample: corners and centre, zeros, border and reflection padding, nearest halves, cubic at a tap") {
    auto sample2d = [](const char* mode, const char* padding, int64_t align, const F32& grid, uint32_t opset = 16) {
        OpTest t;
        t.opset = opset;
        t.op("GridSample", {t.input<float>({1, 1, 2, 2}, {1, 2, 3, 4}), t.input<float>({1, 1, (int64_t)grid.size() / 2, 2}, grid)});
        t.set_string("mode", mode);
        t.set_string("padding_mode", padding);
        t.set_int("align_corners", align);
        t.go();
        return t.out<float>();
    };
    // align_corners 1: (-1, -1) is X[0][0], (1, 1) X[1][1], (0, 0) the mean; (x 1, y -1) is X[0][1]
    check_close(sample2d("bilinear", "zeros", 1, {-1, -1, 1, 1, 0, 0, 1, -1}), {1, 4, 2.5f, 2});
    // align_corners 0: (-1, -1) is the corner of pixel (0, 0): a quarter of it with zeros
    check_close(sample2d("bilinear", "zeros", 0, {0, 0, -1, -1}), {2.5f, 0.25f});
    check_close(sample2d("bilinear", "border", 0, {-1, -1, 3, 3}), {1, 4});
    check_close(sample2d("nearest", "zeros", 1, {-0.9f, 0.9f}), {3});
    check_close(sample2d("bicubic", "border", 1, {-1, -1, 1, 1}), {1, 4});
    auto sample1d = [](const char* mode, const char* padding, int64_t align, const F32& grid) {
        OpTest t;
        t.opset = 20;
        t.op("GridSample", {t.input<float>({1, 1, 3}, {10, 20, 30}), t.input<float>({1, (int64_t)grid.size(), 1}, grid)});
        t.set_string("mode", mode);
        t.set_string("padding_mode", padding);
        t.set_int("align_corners", align);
        t.go();
        CHECK(t.shape() == Shape{1, 1, (int64_t)grid.size()});
        return t.out<float>();
    };
    // x -1.5 with align_corners: -0.5, reflected to 0.5 (15), clamped to 0 (10), half a zero (5)
    check_close(sample1d("linear", "reflection", 1, {-1.5f}), {15});
    check_close(sample1d("linear", "border", 1, {-1.5f}), {10});
    check_close(sample1d("linear", "zeros", 1, {-1.5f}), {5});
    // nearest rounds halves to even: 0.5 -> 0, 1.5 -> 2
    check_close(sample1d("nearest", "zeros", 1, {-0.5f, 0.5f}), {10, 30});
    // cubic on a tap is the tap; far outside with zeros is 0, with border the edge
    check_close(sample1d("cubic", "zeros", 1, {0.0f, 1e30f}), {20, 0});
    check_close(sample1d("cubic", "border", 1, {1e30f, -1e30f}), {30, 10});
    // reflection without align_corners mirrors about the pixel edges: x -0.5 rounds to 0 (10);
    // x -1.5 rounds to -2, reflected about -0.5 to 1 (20)
    check_close(sample1d("nearest", "reflection", 0, {-1.0f, -1.6667f}), {10, 20});
}

TEST_CASE("GridSample: random 2-D and 3-D inputs against the per-dim reference, every mode and padding") {
    std::mt19937 rng(1629);
    const char* modes[] = {"nearest", "linear", "cubic"};
    const char* paddings[] = {"zeros", "border", "reflection"};
    for (int r = 1; r <= 3; ++r)
        for (const char* mode : modes)
            for (const char* padding : paddings)
                for (int align = 0; align < 2; ++align) {
                    Shape xs{2, 3}, gs{2};
                    for (int d = 0; d < r; ++d) xs.push_back(1 + (int64_t)(rng() % 4));
                    for (int d = 0; d < r; ++d) gs.push_back(1 + (int64_t)(rng() % 3));
                    gs.push_back(r);
                    F32 x = random_floats(rng, (size_t)product(xs), -2, 2), grid = random_floats(rng, (size_t)product(gs), -1.7f, 1.7f);
                    OpTest t;
                    t.opset = 22;
                    t.op("GridSample", {t.input<float>(xs, x), t.input<float>(gs, grid)});
                    t.set_string("mode", mode);
                    t.set_string("padding_mode", padding);
                    t.set_int("align_corners", align);
                    INFO("rank " << r << " " << mode << " " << padding << " align " << align);
                    t.go();
                    GridRef ref;
                    ref.mode = mode;
                    ref.padding = padding;
                    ref.align = align != 0;
                    check_close(t.out<float>(), ref.run(x, xs, grid, gs), 1e-4, 1e-4);
                }
}

TEST_CASE("GridSample: bad input") {
    auto node = [](OpTest& t, const Shape& xs, const Shape& gs) {
        t.op("GridSample", {t.input<float>(xs, F32((size_t)product(xs), 1.0f)), t.input<float>(gs, F32((size_t)product(gs), 0.0f))});
    };
    { OpTest t; t.opset = 15; node(t, {1, 1, 2, 2}, {1, 1, 1, 2}); t.fails(Status::Unsupported); }
    { OpTest t; t.opset = 16; node(t, {1, 1, 2, 2, 2}, {1, 1, 1, 1, 3}); t.fails(Status::InvalidArgument); }   // 5-D before 20
    { OpTest t; t.opset = 20; node(t, {1, 1, 2, 2, 2, 2}, {1, 1, 1, 1, 1, 4}); t.fails(Status::Unsupported); }   // 4 spatial dims
    { OpTest t; t.opset = 20; node(t, {1, 1}, {1, 0}); t.fails(Status::InvalidArgument); }
    { OpTest t; node(t, {1, 1, 2, 2}, {1, 1, 1, 3}); t.fails(Status::InvalidArgument); }   // grid's last dim
    { OpTest t; node(t, {1, 1, 2, 2}, {2, 1, 1, 2}); t.fails(Status::InvalidArgument); }   // grid's N
    { OpTest t; node(t, {1, 1, 2, 2}, {1, 1, 2}); t.fails(Status::InvalidArgument); }      // grid's rank
    { OpTest t; t.opset = 16; node(t, {1, 1, 2, 2}, {1, 1, 1, 2}); t.set_string("mode", "linear"); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 20; node(t, {1, 1, 2, 2}, {1, 1, 1, 2}); t.set_string("mode", "bicubic"); t.fails(Status::InvalidArgument); }
    { OpTest t; node(t, {1, 1, 2, 2}, {1, 1, 1, 2}); t.set_string("padding_mode", "wrap"); t.fails(Status::InvalidArgument); }
    { OpTest t; node(t, {1, 1, 2, 2}, {1, 1, 1, 2}); t.set_int("align_corners", 2); t.fails(Status::InvalidArgument); }
    { OpTest t; node(t, {1, 1, 0, 2}, {1, 1, 1, 2}); t.fails(Status::InvalidArgument); }   // nothing to sample from
    {
        OpTest t;
        t.op("GridSample", {t.input<int64_t>({1, 1, 2, 2}, I64(4, 1)), t.input<float>({1, 1, 1, 2}, F32(2, 0.0f))});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.op("GridSample", {t.input<float>({1, 1, 2, 2}, F32(4, 1.0f))});
        t.fails(Status::InvalidArgument);
    }
}

TEST_CASE("AffineGrid: identity and translated grids, 2-D and 3-D, align_corners") {
    {
        OpTest t;   // identity over H 2, W 3: x at -2/3, 0, 2/3; y at -1/2, 1/2
        t.opset = 20;
        t.op("AffineGrid", {t.input<float>({1, 2, 3}, {1, 0, 0, 0, 1, 0}), t.constant<int64_t>({4}, {1, 5, 2, 3})});
        t.go();
        CHECK(t.shape() == Shape{1, 2, 3, 2});
        float a = 2.0f / 3;
        check_close(t.out<float>(), {-a, -0.5f, 0, -0.5f, a, -0.5f, -a, 0.5f, 0, 0.5f, a, 0.5f});
    }
    {
        OpTest t;   // align_corners: x at -1, 0, 1; y at -1, 1; x doubled, y shifted by 0.5
        t.opset = 20;
        t.op("AffineGrid", {t.input<float>({1, 2, 3}, {2, 0, 0, 0, 1, 0.5f}), t.constant<int64_t>({4}, {1, 1, 2, 3})});
        t.set_int("align_corners", 1);
        t.go();
        check_close(t.out<float>(), {-2, -0.5f, 0, -0.5f, 2, -0.5f, -2, 1.5f, 0, 1.5f, 2, 1.5f});
    }
    {
        OpTest t;   // 3-D, two images: z is the D axis; the second image swaps x and z
        t.opset = 20;
        t.op("AffineGrid", {t.input<float>({2, 3, 4}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0}),
                            t.constant<int64_t>({5}, {2, 1, 2, 1, 1})});
        t.set_int("align_corners", 1);
        t.go();
        CHECK(t.shape() == Shape{2, 2, 1, 1, 3});
        // D 2 (z -1, 1), H 1 (y -1 with align_corners), W 1 (x -1)
        check_close(t.out<float>(), {-1, -1, -1, -1, -1, 1, -1, -1, -1, 1, -1, -1});
    }
}

TEST_CASE("AffineGrid: bad input") {
    auto node = [](OpTest& t, const Shape& theta, const I64& size) {
        t.op("AffineGrid", {t.input<float>(theta, F32((size_t)product(theta), 0.0f)), t.constant<int64_t>({(int64_t)size.size()}, size)});
    };
    { OpTest t; t.opset = 19; node(t, {1, 2, 3}, {1, 1, 2, 2}); t.fails(Status::Unsupported); }
    { OpTest t; t.opset = 20; node(t, {1, 2, 3}, {1, 1, 2}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 20; node(t, {1, 3, 4}, {1, 1, 2, 2}); t.fails(Status::InvalidArgument); }   // 3-D theta, 2-D size
    { OpTest t; t.opset = 20; node(t, {2, 2, 3}, {1, 1, 2, 2}); t.fails(Status::InvalidArgument); }   // N differs
    { OpTest t; t.opset = 20; node(t, {1, 2, 3}, {1, 1, -2, 2}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 20; node(t, {1, 2, 3}, {1, 1, 2, 2}); t.set_int("align_corners", -1); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 20; node(t, {1, 2, 3}, {1, 1, 1 << 20, 1 << 20}); t.fails(Status::LimitExceeded); }
    {
        OpTest t;
        t.opset = 20;
        t.op("AffineGrid", {t.input<float>({1, 2, 3}, F32(6, 0.0f)), t.input<int64_t>({4}, {1, 1, 2, 2})});
        t.fails(Status::Unsupported);
        CHECK(t.error().find("data-dependent shape") != std::string::npos);
    }
    {
        OpTest t;
        t.opset = 20;
        t.op("AffineGrid", {t.input<int64_t>({1, 2, 3}, I64(6, 0)), t.constant<int64_t>({4}, {1, 1, 2, 2})});
        t.fails(Status::Unsupported);
    }
}

// ---- col2im and deform conv -----------------------------------------------------------------

TEST_CASE("Col2Im: overlapping blocks add up, strides and pads, the ONNX example") {
    {
        OpTest t;   // 1-D image 4, block 2: k 0 at 0..2, k 1 at 1..3
        t.opset = 18;
        t.op("Col2Im", {t.input<float>({1, 2, 3}, {1, 2, 3, 10, 20, 30}), t.constant<int64_t>({1}, {4}), t.constant<int64_t>({1}, {2})});
        t.go();
        CHECK(t.shape() == Shape{1, 1, 4});
        check_close(t.out<float>(), {1, 12, 23, 30});
    }
    {
        OpTest t;   // image 5, block 2, stride 2, pads 1, 1: k 0 at -1, 1, 3; k 1 at 0, 2, 4
        t.opset = 18;
        t.op("Col2Im", {t.input<float>({1, 2, 3}, {1, 2, 3, 10, 20, 30}), t.constant<int64_t>({1}, {5}), t.constant<int64_t>({1}, {2})});
        t.set_ints("strides", {2});
        t.set_ints("pads", {1, 1});
        t.go();
        check_close(t.out<float>(), {10, 2, 20, 3, 30});
    }
    {
        OpTest t;   // the ONNX example: block 1 x 5 over a 5 x 5 image is a transpose
        t.opset = 18;
        t.op("Col2Im", {t.input<float>({1, 5, 5}, iota_float(25, 1)), t.constant<int64_t>({2}, {5, 5}), t.constant<int64_t>({2}, {1, 5})});
        t.go();
        CHECK(t.shape() == Shape{1, 1, 5, 5});
        F32 want(25);
        for (int h = 0; h < 5; ++h) for (int w = 0; w < 5; ++w) want[h * 5 + w] = (float)(w * 5 + h + 1);
        check_close(t.out<float>(), want);
    }
}

TEST_CASE("Col2Im: random 2-D and 3-D cases are the adjoint of im2col") {
    // <col2im(X), Z> == <X, im2col(Z)> for any image Z: im2col written here the plain way
    std::mt19937 rng(18);
    for (int iteration = 0; iteration < 24; ++iteration) {
        int r = 2 + iteration % 2;
        int64_t n = 1 + iteration % 2, c = 1 + (int64_t)(rng() % 2);
        I64 image(r), block(r), stride(r), dilation(r), pads(2 * r), blocks(r);
        int64_t kernel = 1, columns = 1;
        for (int d = 0; d < r; ++d) {
            image[d] = 3 + (int64_t)(rng() % 3);
            block[d] = 1 + (int64_t)(rng() % 2);
            stride[d] = 1 + (int64_t)(rng() % 2);
            dilation[d] = 1 + (int64_t)(rng() % 2);
            pads[d] = (int64_t)(rng() % 2);
            pads[r + d] = (int64_t)(rng() % 2);
            blocks[d] = (image[d] + pads[d] + pads[r + d] - (dilation[d] * (block[d] - 1) + 1)) / stride[d] + 1;
            kernel *= block[d];
            columns *= blocks[d];
        }
        F32 x = random_floats(rng, (size_t)(n * c * kernel * columns), -1, 1);
        int64_t image_size = product(image);
        F32 z = random_floats(rng, (size_t)(n * c * image_size), -1, 1);
        OpTest t;
        t.opset = 18;
        t.op("Col2Im", {t.input<float>({n, c * kernel, columns}, x), t.constant<int64_t>({r}, image), t.constant<int64_t>({r}, block)});
        t.set_ints("strides", stride);
        t.set_ints("dilations", dilation);
        t.set_ints("pads", pads);
        t.go();
        F32 y = t.out<float>();
        REQUIRE(y.size() == z.size());
        double left = 0, right = 0;
        for (size_t i = 0; i < y.size(); ++i) left += (double)y[i] * z[i];
        for (int64_t p = 0; p < n * c; ++p)
            for (int64_t k = 0; k < kernel; ++k)
                for (int64_t l = 0; l < columns; ++l) {
                    int64_t at = 0, kr = k, lr = l, stride_at = 1;
                    bool inside = true;
                    for (int d = r - 1; d >= 0; --d) {
                        int64_t i = (lr % blocks[d]) * stride[d] - pads[d] + (kr % block[d]) * dilation[d];
                        kr /= block[d];
                        lr /= blocks[d];
                        inside = inside && i >= 0 && i < image[d];
                        at += i * stride_at;
                        stride_at *= image[d];
                    }
                    if (inside) right += (double)x[(size_t)((p * kernel + k) * columns + l)] * z[(size_t)(p * image_size + at)];
                }
        INFO("iteration " << iteration);
        CHECK(std::fabs(left - right) <= 1e-4 * (1 + std::fabs(right)));
    }
}

TEST_CASE("Col2Im: bad input") {
    auto node = [](OpTest& t, const Shape& xs, const I64& image, const I64& block) {
        t.op("Col2Im", {t.input<float>(xs, F32((size_t)product(xs), 1.0f)), t.constant<int64_t>({(int64_t)image.size()}, image),
                        t.constant<int64_t>({(int64_t)block.size()}, block)});
    };
    { OpTest t; t.opset = 17; node(t, {1, 2, 3}, {4}, {2}); t.fails(Status::Unsupported); }
    { OpTest t; t.opset = 18; node(t, {1, 3, 3}, {4}, {2}); t.fails(Status::InvalidArgument); }   // 3 not a multiple of 2
    { OpTest t; t.opset = 18; node(t, {1, 2, 4}, {4}, {2}); t.fails(Status::InvalidArgument); }   // 3 blocks, not 4
    { OpTest t; t.opset = 18; node(t, {1, 6, 1}, {4}, {6}); t.fails(Status::InvalidArgument); }   // block larger than the image
    { OpTest t; t.opset = 18; node(t, {1, 2, 3}, {4, 4}, {2}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 18; node(t, {1, 2, 3}, {4}, {0}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 18; node(t, {2, 3}, {4}, {2}); t.fails(Status::InvalidArgument); }   // rank 2
    { OpTest t; t.opset = 18; node(t, {1, 2, 3}, {4}, {2}); t.set_ints("strides", {0}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 18; node(t, {1, 2, 3}, {4}, {2}); t.set_ints("pads", {1}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 18; node(t, {1, 2, 3}, {4}, {2}); t.set_ints("pads", {-1, 0}); t.fails(Status::InvalidArgument); }
    {
        OpTest t;
        t.opset = 18;
        t.op("Col2Im", {t.input<float>({1, 2, 3}, F32(6, 1.0f)), t.input<int64_t>({1}, {4}), t.constant<int64_t>({1}, {2})});
        t.fails(Status::Unsupported);
        CHECK(t.error().find("data-dependent shape") != std::string::npos);
    }
}

namespace {

// DeformConv tap by tap: X [N, C, H, W], W [M, C/group, kh, kw], offset [N, og*kh*kw*2, oh, ow]
F32 naive_deform_conv(const F32& x, const Shape& xs, const F32& w, const Shape& ws, const F32& offset, const F32* bias,
                      const F32* mask, int64_t group, int64_t offset_group, const I64& pads, const I64& strides,
                      const I64& dilations, int64_t oh, int64_t ow) {
    int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3], m = ws[0], cg = ws[1], kh = ws[2], kw = ws[3];
    F32 y((size_t)(n * m * oh * ow));
    auto at = [&](int64_t b, int64_t ch, double py, double px) {   // bilinear, zero outside
        double fy = std::floor(py), fx = std::floor(px), v = 0;
        for (int a = 0; a < 2; ++a)
            for (int e = 0; e < 2; ++e) {
                int64_t iy = (int64_t)fy + a, ix = (int64_t)fx + e;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                double wy = a ? py - fy : 1 - (py - fy), wx = e ? px - fx : 1 - (px - fx);
                v += wy * wx * x[(size_t)(((b * c + ch) * h + iy) * wd + ix)];
            }
        return v;
    };
    for (int64_t b = 0; b < n; ++b)
        for (int64_t o = 0; o < m; ++o)
            for (int64_t i = 0; i < oh; ++i)
                for (int64_t j = 0; j < ow; ++j) {
                    double acc = bias ? (*bias)[(size_t)o] : 0;
                    int64_t g = o / (m / group);
                    for (int64_t ci = 0; ci < cg; ++ci) {
                        int64_t ch = g * cg + ci, og = ch / (c / offset_group);
                        for (int64_t u = 0; u < kh; ++u)
                            for (int64_t v = 0; v < kw; ++v) {
                                int64_t k = u * kw + v;
                                auto off = [&](int64_t which) {
                                    return offset[(size_t)((((b * offset_group + og) * kh * kw + k) * 2 + which) * oh * ow + i * ow + j)];
                                };
                                double py = (double)(i * strides[0] - pads[0] + u * dilations[0]) + off(0);
                                double px = (double)(j * strides[1] - pads[1] + v * dilations[1]) + off(1);
                                double s = at(b, ch, py, px);
                                if (mask) s *= (*mask)[(size_t)(((b * offset_group + og) * kh * kw + k) * oh * ow + i * ow + j)];
                                acc += s * w[(size_t)(((o * cg + ci) * kh + u) * kw + v)];
                            }
                    }
                    y[(size_t)(((b * m + o) * oh + i) * ow + j)] = (float)acc;
                }
    return y;
}

}  // namespace

TEST_CASE("DeformConv: offsets move the taps, the mask scales them, bias") {
    {
        OpTest t;   // a 1x1 kernel of 2; offsets (dy, dx) (0.5, 0), (0, 0.5), (0, 0), (0.5, -5)
        t.opset = 19;
        t.op("DeformConv", {t.input<float>({1, 1, 2, 2}, {1, 2, 3, 4}), t.input<float>({1, 1, 1, 1}, {2}),
                            t.input<float>({1, 2, 2, 2}, {0.5f, 0, 0, 0.5f, 0, 0.5f, 0, -5})});
        t.go();
        CHECK(t.shape() == Shape{1, 1, 2, 2});
        // (0,0) at (0.5, 0): 2; (0,1) at (0, 1.5): half of 2; (1,0) at (1, 0): 3; (1,1) at (1.5, -4): 0
        check_close(t.out<float>(), {4, 2, 6, 0});
    }
    {
        OpTest t;   // the same with a mask and a bias
        t.opset = 19;
        t.op("DeformConv", {t.input<float>({1, 1, 2, 2}, {1, 2, 3, 4}), t.input<float>({1, 1, 1, 1}, {2}),
                            t.input<float>({1, 2, 2, 2}, F32(8, 0.0f)), t.input<float>({1}, {10}),
                            t.input<float>({1, 1, 2, 2}, {1, 0.5f, 0, -1})});
        t.go();
        check_close(t.out<float>(), {12, 12, 10, 2});
    }
}

TEST_CASE("DeformConv: random cases against the tap-by-tap reference, groups and offset groups") {
    std::mt19937 rng(19);
    for (int iteration = 0; iteration < 16; ++iteration) {
        int64_t group = 1 + iteration % 2, offset_group = 1 + (iteration / 2) % 2;
        int64_t n = 1 + iteration % 2, c = 2 * group * offset_group / (group < offset_group ? group : offset_group);
        int64_t m = 2 * group, kh = 1 + (int64_t)(rng() % 3), kw = 1 + (int64_t)(rng() % 3), h = 6, wd = 5;
        I64 pads{(int64_t)(rng() % 2), (int64_t)(rng() % 2), (int64_t)(rng() % 2), (int64_t)(rng() % 2)};
        I64 strides{1 + (int64_t)(rng() % 2), 1 + (int64_t)(rng() % 2)}, dilations{1 + (int64_t)(rng() % 2), 1};
        int64_t oh = (h + pads[0] + pads[2] - (dilations[0] * (kh - 1) + 1)) / strides[0] + 1;
        int64_t ow = (wd + pads[1] + pads[3] - (dilations[1] * (kw - 1) + 1)) / strides[1] + 1;
        Shape xs{n, c, h, wd}, ws{m, c / group, kh, kw}, os{n, offset_group * kh * kw * 2, oh, ow};
        Shape ms{n, offset_group * kh * kw, oh, ow};
        F32 x = random_floats(rng, (size_t)product(xs), -1, 1), w = random_floats(rng, (size_t)product(ws), -1, 1);
        F32 offset = random_floats(rng, (size_t)product(os), -2, 2), bias = random_floats(rng, (size_t)m, -1, 1);
        F32 mask = random_floats(rng, (size_t)product(ms), 0, 1);
        bool with_mask = iteration % 3 != 0, with_bias = iteration % 4 != 0;
        OpTest t;
        t.opset = 22;
        std::vector<InputRef> in{t.input<float>(xs, x), t.input<float>(ws, w), t.input<float>(os, offset),
                                 with_bias ? t.input<float>({m}, bias) : t.absent()};
        if (with_mask) in.push_back(t.input<float>(ms, mask));
        t.op("DeformConv", in);
        t.set_int("group", group);
        t.set_int("offset_group", offset_group);
        t.set_ints("pads", pads);
        t.set_ints("strides", strides);
        t.set_ints("dilations", dilations);
        t.set_ints("kernel_shape", {kh, kw});
        INFO("iteration " << iteration);
        t.go();
        CHECK(t.shape() == Shape{n, m, oh, ow});
        check_close(t.out<float>(), naive_deform_conv(x, xs, w, ws, offset, with_bias ? &bias : nullptr, with_mask ? &mask : nullptr,
                                                      group, offset_group, pads, strides, dilations, oh, ow), 1e-4, 1e-4);
    }
}

TEST_CASE("DeformConv: bad input") {
    // X [1, 2, 3, 3], W [2, 2, 2, 2]: output 2 x 2, offset [1, 8, 2, 2]
    auto node = [](OpTest& t, const Shape& ws, const Shape& os, const Shape& bias = {}, const Shape& mask = {}) {
        std::vector<InputRef> in{t.input<float>({1, 2, 3, 3}, F32(18, 1.0f)), t.input<float>(ws, F32((size_t)product(ws), 1.0f)),
                                 t.input<float>(os, F32((size_t)product(os), 0.0f))};
        if (!bias.empty() || !mask.empty()) in.push_back(bias.empty() ? t.absent() : t.input<float>(bias, F32((size_t)product(bias), 0.0f)));
        if (!mask.empty()) in.push_back(t.input<float>(mask, F32((size_t)product(mask), 1.0f)));
        t.op("DeformConv", in);
    };
    { OpTest t; t.opset = 19; node(t, {2, 2, 2, 2}, {1, 8, 2, 2}); t.go(); }   // the good node
    { OpTest t; t.opset = 18; node(t, {2, 2, 2, 2}, {1, 8, 2, 2}); t.fails(Status::Unsupported); }
    { OpTest t; t.opset = 19; node(t, {2, 2, 2, 2}, {1, 6, 2, 2}); t.fails(Status::InvalidArgument); }   // offset channels
    { OpTest t; t.opset = 19; node(t, {2, 2, 2, 2}, {1, 8, 3, 3}); t.fails(Status::InvalidArgument); }   // offset spatial
    { OpTest t; t.opset = 19; node(t, {2, 1, 2, 2}, {1, 8, 2, 2}); t.fails(Status::InvalidArgument); }   // W channels, group 1
    { OpTest t; t.opset = 19; node(t, {3, 1, 2, 2}, {1, 8, 2, 2}); t.set_int("group", 2); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 19; node(t, {2, 2, 2, 2}, {1, 8, 2, 2}); t.set_int("offset_group", 3); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 19; node(t, {2, 2, 2, 2}, {1, 8, 2, 2}); t.set_int("group", 0); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 19; node(t, {2, 2, 2, 2}, {1, 8, 2, 2}, {3}); t.fails(Status::InvalidArgument); }   // bias
    { OpTest t; t.opset = 19; node(t, {2, 2, 2, 2}, {1, 8, 2, 2}, {}, {1, 3, 2, 2}); t.fails(Status::InvalidArgument); }   // mask
    { OpTest t; t.opset = 19; node(t, {2, 2, 2, 2}, {1, 8, 2, 2}); t.set_ints("kernel_shape", {3, 3}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 19; node(t, {2, 2, 2, 2}, {1, 8, 2, 2}); t.set_ints("strides", {0, 1}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 19; node(t, {2, 2, 4, 4}, {1, 32, 1, 1}); t.fails(Status::InvalidArgument); }   // window past X
    { OpTest t; t.opset = 19; node(t, {2, 2, 2}, {1, 8, 2, 2}); t.fails(Status::InvalidArgument); }   // W's rank
    {
        OpTest t;
        t.opset = 19;
        t.op("DeformConv", {t.input<float>({1, 2, 3, 3}, F32(18, 1.0f)), t.input<float>({2, 2, 2, 2}, F32(16, 1.0f))});
        t.fails(Status::InvalidArgument);
    }
}

// ---- roi align ----------------------------------------------------------------------------------

TEST_CASE("RoiAlign: half_pixel and output_half_pixel on a ramp, avg and max, sampling grids") {
    F32 ramp(16);
    for (int i = 0; i < 16; ++i) ramp[i] = (float)i;   // X[i][j] = 4 i + j: bilinear is exact
    auto roi = [&](uint32_t opset, const char* mode, const char* transform, int64_t ratio, const F32& box) {
        OpTest t;
        t.opset = opset;
        t.op("RoiAlign", {t.input<float>({1, 1, 4, 4}, ramp), t.input<float>({1, 4}, box), t.input<int64_t>({1}, {0})});
        t.set_string("mode", mode);
        if (transform) t.set_string("coordinate_transformation_mode", transform);
        t.set_int("output_height", 2);
        t.set_int("output_width", 2);
        t.set_int("sampling_ratio", ratio);
        t.go();
        CHECK(t.shape() == Shape{1, 1, 2, 2});
        return t.out<float>();
    };
    // half_pixel: bins of 2 from -0.5, one sample each at 0.5 and 2.5
    check_close(roi(16, "avg", nullptr, 1, {0, 0, 4, 4}), {2.5f, 4.5f, 10.5f, 12.5f});
    // output_half_pixel (RoiAlign-10, or named): samples at 1 and 3
    check_close(roi(10, "avg", nullptr, 1, {0, 0, 4, 4}), {5, 7, 13, 15});
    check_close(roi(16, "avg", "output_half_pixel", 1, {0, 0, 4, 4}), {5, 7, 13, 15});
    // sampling_ratio 0: ceil(2 / 1) = 2 samples per side, at 0, 1 (and 2, 3): the bin's mean
    check_close(roi(16, "avg", nullptr, 0, {0, 0, 4, 4}), {2.5f, 4.5f, 10.5f, 12.5f});
    // max: of the four weighted corners at (0.5, 0.5): 0.25 * 5
    check_close(roi(16, "max", nullptr, 1, {0, 0, 4, 4}), {1.25f, 1.75f, 3.25f, 3.75f});
    // a box far outside the image samples nothing
    check_close(roi(16, "avg", nullptr, 1, {100, 100, 104, 104}), {0, 0, 0, 0});
    {
        OpTest t;   // two rois from two images, spatial_scale halves the coordinates
        F32 two(32);
        for (int i = 0; i < 32; ++i) two[i] = (float)(i % 16) + (i < 16 ? 0.0f : 100.0f);
        t.opset = 16;
        t.op("RoiAlign", {t.input<float>({2, 1, 4, 4}, two), t.input<float>({2, 4}, {0, 0, 8, 8, 0, 0, 8, 8}), t.input<int64_t>({2}, {1, 0})});
        t.set_float("spatial_scale", 0.5f);
        t.set_int("sampling_ratio", 1);
        t.go();
        check_close(t.out<float>(), {107.5f, 7.5f});   // one bin at the image's centre (1.5, 1.5)
    }
}

TEST_CASE("RoiAlign: bad input") {
    auto node = [](OpTest& t, const Shape& xs, const Shape& rois, const Shape& indices) {
        t.op("RoiAlign", {t.input<float>(xs, F32((size_t)product(xs), 1.0f)), t.input<float>(rois, F32((size_t)product(rois), 1.0f)),
                          t.input<int64_t>(indices, I64((size_t)product(indices), 0))});
    };
    { OpTest t; t.opset = 9; node(t, {1, 1, 4, 4}, {1, 4}, {1}); t.fails(Status::Unsupported); }
    { OpTest t; t.opset = 16; node(t, {1, 4, 4}, {1, 4}, {1}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 16; node(t, {1, 1, 4, 4}, {1, 5}, {1}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 16; node(t, {1, 1, 4, 4}, {2, 4}, {1}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 16; node(t, {1, 1, 0, 4}, {1, 4}, {1}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 16; node(t, {1, 1, 4, 4}, {1, 4}, {1}); t.set_string("mode", "sum"); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 16; node(t, {1, 1, 4, 4}, {1, 4}, {1}); t.set_string("coordinate_transformation_mode", "align_corners"); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 16; node(t, {1, 1, 4, 4}, {1, 4}, {1}); t.set_int("output_height", 0); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 16; node(t, {1, 1, 4, 4}, {1, 4}, {1}); t.set_int("sampling_ratio", -1); t.fails(Status::InvalidArgument); }
    {
        OpTest t;
        t.opset = 16;
        t.op("RoiAlign", {t.input<float>({1, 1, 4, 4}, F32(16, 1.0f)), t.input<float>({1, 4}, F32(4, 1.0f)), t.input<float>({1}, {0})});
        t.fails(Status::Unsupported);   // float batch indices
    }
    {
        OpTest t;
        t.opset = 16;
        t.op("RoiAlign", {t.input<float>({2, 1, 4, 4}, F32(32, 1.0f)), t.input<float>({1, 4}, F32(4, 1.0f)), t.constant<int64_t>({1}, {2})});
        t.fails(Status::InvalidArgument);
        CHECK(t.error().find("batch index 2 out of range for batch 2") != std::string::npos);
    }
    {
        OpTest t;
        t.opset = 16;
        t.op("RoiAlign", {t.input<float>({2, 1, 4, 4}, F32(32, 1.0f)), t.input<float>({1, 4}, F32(4, 1.0f)), t.input<int64_t>({1}, {-1})});
        t.run_fails("batch index -1 out of range for batch 2");
    }
    {
        OpTest t;   // a huge box: its sampling grid would be 2^29 per side
        t.opset = 16;
        t.op("RoiAlign", {t.input<float>({1, 1, 4, 4}, F32(16, 1.0f)), t.input<float>({1, 4}, {0, 0, 1e9f, 1e9f}), t.input<int64_t>({1}, {0})});
        t.run_fails("sampling grid");
    }
    {
        OpTest t;
        t.opset = 16;
        t.op("RoiAlign", {t.input<float>({1, 1, 4, 4}, F32(16, 1.0f)), t.input<float>({1, 4}, {0, 0, NAN, 1}), t.input<int64_t>({1}, {0})});
        t.run_fails("sampling grid");
    }
    {
        OpTest t;
        t.opset = 16;
        t.op("RoiAlign", {t.input<float>({2, 1, 4, 4}, F32(32, 1.0f)), t.input<float>({1, 4}, F32(4, 1.0f)), t.input<int64_t>({1}, {5})});
        CHECK(t.infer() == Status::InvalidArgument);
    }
}

// ---- center crop pad, max unpool and upsample ----------------------------------------------------

TEST_CASE("CenterCropPad: crop and pad around the centre, axes, any element type") {
    {
        OpTest t;   // [3, 4] to [2, 6]: rows 0..1 kept, one column of zeros before and after
        t.opset = 18;
        t.op("CenterCropPad", {t.input<float>({3, 4}, iota_float(12, 1)), t.constant<int64_t>({2}, {2, 6})});
        t.go();
        CHECK(t.shape() == Shape{2, 6});
        CHECK(t.out<float>() == F32{0, 1, 2, 3, 4, 0, 0, 5, 6, 7, 8, 0});
    }
    {
        OpTest t;   // odd differences: crop 5 to 2 starts at 1, pad 1 to 4 starts at 1
        t.opset = 18;
        t.op("CenterCropPad", {t.input<int64_t>({5, 1}, {1, 2, 3, 4, 5}), t.constant<int64_t>({2}, {2, 4})});
        t.go();
        CHECK(t.out<int64_t>() == I64{0, 2, 0, 0, 0, 3, 0, 0});
    }
    {
        OpTest t;   // axes [-2] of an HWC uint8 image: only W changes
        t.opset = 18;
        t.op("CenterCropPad", {t.input<uint8_t>({1, 3, 2}, {1, 2, 3, 4, 5, 6}), t.constant<int64_t>({1}, {1})});
        t.set_ints("axes", {-2});
        t.go();
        CHECK(t.shape() == Shape{1, 1, 2});
        CHECK(t.out<uint8_t>() == U8{3, 4});
    }
    {
        OpTest t;   // padding every axis from an empty one gives zeros; bool
        t.opset = 18;
        t.op("CenterCropPad", {t.input<uint8_t>({0, 2}, U8{}, ElementType::Bool), t.constant<int64_t>({2}, {2, 1})});
        t.go();
        CHECK(t.type() == ElementType::Bool);
        CHECK(t.out<uint8_t>() == U8{0, 0});
    }
}

TEST_CASE("CenterCropPad: bad input") {
    auto node = [](OpTest& t, const Shape& xs, const I64& shape) {
        t.op("CenterCropPad", {t.input<float>(xs, F32((size_t)product(xs), 1.0f)), t.constant<int64_t>({(int64_t)shape.size()}, shape)});
    };
    { OpTest t; t.opset = 17; node(t, {2, 2}, {1, 1}); t.fails(Status::Unsupported); }
    { OpTest t; t.opset = 18; node(t, {2, 2}, {1}); t.fails(Status::InvalidArgument); }   // one value for two axes
    { OpTest t; t.opset = 18; node(t, {2, 2}, {1, -1}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 18; node(t, {2, 2}, {1, 1}); t.set_ints("axes", {0, 0}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 18; node(t, {2, 2}, {1}); t.set_ints("axes", {2}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 18; node(t, {2, 2}, {1, 1, 1}); t.set_ints("axes", {0, 1, -1}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 18; node(t, {2, 2}, {1 << 20, 1 << 20}); t.fails(Status::LimitExceeded); }
    {
        OpTest t;
        t.opset = 18;
        t.op("CenterCropPad", {t.input<float>({2, 2}, F32(4, 1.0f)), t.input<int64_t>({2}, {1, 1})});
        t.fails(Status::Unsupported);
        CHECK(t.error().find("data-dependent shape") != std::string::npos);
    }
    {
        OpTest t;
        t.opset = 18;
        t.op("CenterCropPad", {t.input<float>({2, 2}, F32(4, 1.0f)), t.constant<float>({2}, {1, 1})});
        t.fails(Status::Unsupported);
    }
}

TEST_CASE("MaxUnpool: the ONNX examples, with and without output_shape, 1-D with pads") {
    {
        OpTest t;   // kernel 2 stride 2 of a 4 x 4 image
        t.opset = 11;
        t.op("MaxUnpool", {t.input<float>({1, 1, 2, 2}, {5, 6, 7, 8}), t.input<int64_t>({1, 1, 2, 2}, {5, 7, 13, 15})});
        t.set_ints("kernel_shape", {2, 2});
        t.set_ints("strides", {2, 2});
        t.go();
        CHECK(t.shape() == Shape{1, 1, 4, 4});
        CHECK(t.out<float>() == F32{0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 7, 0, 8});
    }
    {
        OpTest t;   // output_shape 5 x 5: the 4 x 4 result at its start (as ONNX's reference)
        t.opset = 11;
        t.op("MaxUnpool", {t.input<float>({1, 1, 2, 2}, {5, 6, 7, 8}), t.input<int64_t>({1, 1, 2, 2}, {5, 7, 13, 15}),
                           t.constant<int64_t>({4}, {1, 1, 5, 5})});
        t.set_ints("kernel_shape", {2, 2});
        t.set_ints("strides", {2, 2});
        t.go();
        CHECK(t.shape() == Shape{1, 1, 5, 5});
        F32 want(25, 0.0f);
        want[6] = 5;
        want[8] = 6;
        want[16] = 7;
        want[18] = 8;
        CHECK(t.out<float>() == want);
    }
    {
        OpTest t;   // 1-D, two channels, kernel 3 stride 1 pads 1 1: (3 - 1) - 2 + 3 = 3 per channel
        t.opset = 9;
        t.op("MaxUnpool", {t.input<float>({1, 2, 3}, {1, 2, 3, 4, 5, 6}), t.input<int64_t>({1, 2, 3}, {0, 2, 2, 3, 3, 5})});
        t.set_ints("kernel_shape", {3});
        t.set_ints("pads", {1, 1});
        t.go();
        CHECK(t.shape() == Shape{1, 2, 3});
        CHECK(t.out<float>() == F32{1, 0, 3, 5, 0, 6});   // a repeated index keeps the last value
    }
}

TEST_CASE("MaxUnpool: bad input") {
    auto node = [](OpTest& t, const Shape& xs, const Shape& is, const I64& indices = {}, const I64& kernel = {2, 2}) {
        t.op("MaxUnpool", {t.input<float>(xs, F32((size_t)product(xs), 1.0f)),
                           t.input<int64_t>(is, indices.empty() ? I64((size_t)product(is), 0) : indices)});
        t.set_ints("kernel_shape", kernel);
    };
    { OpTest t; t.opset = 8; node(t, {1, 1, 2, 2}, {1, 1, 2, 2}); t.fails(Status::Unsupported); }
    { OpTest t; node(t, {1, 1, 2, 2}, {1, 1, 2, 3}); t.fails(Status::InvalidArgument); }
    { OpTest t; node(t, {1, 2}, {1, 2}, {}, {2}); t.fails(Status::InvalidArgument); }
    { OpTest t; node(t, {1, 1, 2, 2}, {1, 1, 2, 2}, {}, {2}); t.fails(Status::InvalidArgument); }
    { OpTest t; node(t, {1, 1, 2, 2}, {1, 1, 2, 2}, {}, {0, 2}); t.fails(Status::InvalidArgument); }
    { OpTest t; node(t, {1, 1, 2, 2}, {1, 1, 2, 2}); t.set_ints("pads", {4, 4, 0, 0}); t.fails(Status::InvalidArgument); }
    { OpTest t; node(t, {1, 1, 2, 2}, {1, 1, 2, 2}); t.set_ints("strides", {1}); t.fails(Status::InvalidArgument); }
    {
        OpTest t;   // output_shape smaller than the unpooled 3 x 3
        t.op("MaxUnpool", {t.input<float>({1, 1, 2, 2}, F32(4, 1.0f)), t.input<int64_t>({1, 1, 2, 2}, I64(4, 0)),
                           t.constant<int64_t>({4}, {1, 1, 2, 3})});
        t.set_ints("kernel_shape", {2, 2});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;   // output_shape changing C
        t.op("MaxUnpool", {t.input<float>({1, 1, 2, 2}, F32(4, 1.0f)), t.input<int64_t>({1, 1, 2, 2}, I64(4, 0)),
                           t.constant<int64_t>({4}, {1, 2, 3, 3})});
        t.set_ints("kernel_shape", {2, 2});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.op("MaxUnpool", {t.input<float>({1, 1, 2, 2}, F32(4, 1.0f)), t.input<int32_t>({1, 1, 2, 2}, std::vector<int32_t>(4, 0))});
        t.set_ints("kernel_shape", {2, 2});
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.op("MaxUnpool", {t.input<float>({1, 1, 2, 2}, F32(4, 1.0f)), t.input<int64_t>({1, 1, 2, 2}, I64(4, 0)),
                           t.input<int64_t>({4}, {1, 1, 4, 4})});
        t.set_ints("kernel_shape", {2, 2});
        t.fails(Status::Unsupported);
        CHECK(t.error().find("data-dependent shape") != std::string::npos);
    }
    { OpTest t; node(t, {1, 1, 2, 2}, {1, 1, 2, 2}, {0, 1, 9, 3}); t.run_fails("index 9 out of range for 9 elements"); }
    { OpTest t; node(t, {1, 1, 2, 2}, {1, 1, 2, 2}, {0, -1, 2, 3}); t.run_fails("index -1 out of range"); }
    {
        OpTest t;
        node(t, {1, 1, 2, 2}, {1, 1, 2, 2}, {0, 1, 2, 30});
        CHECK(t.infer() == Status::InvalidArgument);
    }
}

TEST_CASE("Upsample: nearest with scales as an attribute (opset 7) and as an input (opset 9), linear") {
    F32 want{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4};
    {
        OpTest t;
        t.opset = 9;
        t.op("Upsample", {t.input<float>({1, 1, 2, 2}, {1, 2, 3, 4}), t.constant<float>({4}, {1, 1, 2, 3})});
        t.set_string("mode", "nearest");
        t.go();
        CHECK(t.shape() == Shape{1, 1, 4, 6});
        CHECK(t.out<float>() == want);
    }
    {
        OpTest t;
        t.opset = 7;
        t.op("Upsample", {t.input<float>({1, 1, 2, 2}, {1, 2, 3, 4})});
        REQUIRE(t.model.set_floats(t.node, "scales", Span<const float>(F32{1, 1, 2, 3}.data(), 4)) == Status::Ok);
        t.go();
        CHECK(t.out<float>() == want);
    }
    {
        OpTest t;   // linear, asymmetric: 1, 1.5, 2, 2 along W
        t.opset = 9;
        t.op("Upsample", {t.input<float>({1, 2}, {1, 2}), t.constant<float>({2}, {1, 2})});
        t.set_string("mode", "linear");
        t.go();
        check_close(t.out<float>(), {1, 1.5f, 2, 2});
    }
}

TEST_CASE("Upsample: bad input, and refused from opset 10") {
    { OpTest t; t.opset = 6; t.op("Upsample", {t.input<float>({1, 2}, {1, 2})}); t.fails(Status::Unsupported); }
    { OpTest t; t.opset = 7; t.op("Upsample", {t.input<float>({1, 2}, {1, 2})}); t.fails(Status::InvalidArgument); }   // no scales
    {
        OpTest t;
        t.opset = 9;
        t.op("Upsample", {t.input<float>({1, 2}, {1, 2}), t.constant<float>({3}, {1, 2, 2})});
        t.fails(Status::InvalidArgument);
    }
    {
        OpTest t;
        t.opset = 9;
        t.op("Upsample", {t.input<float>({1, 2}, {1, 2}), t.constant<float>({2}, {1, 2})});
        t.set_string("mode", "cubic");
        t.fails(Status::Unsupported);
    }
    {
        OpTest t;
        t.opset = 9;
        t.op("Upsample", {t.input<float>({1, 2}, {1, 2}), t.input<float>({2}, {1, 2})});
        t.fails(Status::Unsupported);
        CHECK(t.error().find("data-dependent shape") != std::string::npos);
    }
    {
        OpTest t;   // Upsample-10 is deprecated: compile refuses it, naming the version
        t.op("Upsample", {t.input<float>({1, 2}, {1, 2}), t.constant<float>({2}, {1, 2})});
        REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
        REQUIRE(t.model.finalize() == Status::Ok);
        t.model.opset = 10;
        Core core;
        CompiledModel compiled;
        CHECK(core.compile_model(t.model, "CPU", Span<const ConfigEntry>(), &compiled) == Status::Unsupported);
        CHECK(std::string(core.last_error()).find("Upsample-10") != std::string::npos);
    }
}

// ---- lp pool and lrn ------------------------------------------------------------------------------

TEST_CASE("LpPool: p 1, 2, 3 and a float p (opset 1), pads counting zero, strides, dilations and ceil_mode") {
    auto pool = [](uint32_t opset, const Shape& xs, const F32& x, const I64& kernel, int64_t p, const I64& pads = {},
                   const I64& strides = {}) {
        OpTest t;
        t.opset = opset;
        t.op("LpPool", {t.input<float>(xs, x)});
        t.set_ints("kernel_shape", kernel);
        t.set_int("p", p);
        if (!pads.empty()) t.set_ints("pads", pads);
        if (!strides.empty()) t.set_ints("strides", strides);
        t.go();
        return t.out<float>();
    };
    F32 x{1, -2, 3, -4};
    check_close(pool(11, {1, 1, 4}, x, {2}, 2), {std::sqrt(5.0f), std::sqrt(13.0f), 5});
    check_close(pool(11, {1, 1, 4}, x, {2}, 1), {3, 5, 7});
    check_close(pool(18, {1, 1, 4}, x, {2}, 3), {std::cbrt(9.0f), std::cbrt(35.0f), std::cbrt(91.0f)});
    check_close(pool(18, {1, 1, 4}, x, {2}, 2, {1, 1}, {2}), {1, std::sqrt(13.0f), 4});
    {
        OpTest t;   // LpPool-1: p 1.5 as a float
        t.opset = 1;
        t.op("LpPool", {t.input<float>({1, 1, 2}, {1, -4})});
        t.set_ints("kernel_shape", {2});
        t.set_float("p", 1.5f);
        t.go();
        check_close(t.out<float>(), {std::pow(1.0f + 8.0f, 1 / 1.5f)});
    }
    // 2-D, two planes, dilations 2 and ceil_mode (opset 18) against a plain loop
    std::mt19937 rng(18);
    F32 big = random_floats(rng, 2 * 5 * 6, -2, 2);
    OpTest t;
    t.opset = 18;
    t.op("LpPool", {t.input<float>({1, 2, 5, 6}, big)});
    t.set_ints("kernel_shape", {2, 2});
    t.set_ints("dilations", {2, 1});
    t.set_ints("strides", {2, 2});
    t.set_int("ceil_mode", 1);
    t.set_int("p", 3);
    t.go();
    // H: extent 3, (5 - 3) / 2 + 1 = 2; W: extent 2, ceil((6 - 2) / 2) + 1 = 3
    REQUIRE(t.shape() == Shape{1, 2, 2, 3});
    F32 want;
    for (int c = 0; c < 2; ++c)
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 3; ++j) {
                double sum = 0;
                for (int a = 0; a < 2; ++a)
                    for (int b = 0; b < 2; ++b) {
                        int h = i * 2 + a * 2, w = j * 2 + b;
                        if (h < 5 && w < 6) sum += std::pow(std::fabs((double)big[(size_t)((c * 5 + h) * 6 + w)]), 3);
                    }
                want.push_back((float)std::cbrt(sum));
            }
    check_close(t.out<float>(), want);
}

TEST_CASE("LpPool: bad input") {
    auto node = [](OpTest& t, const Shape& xs) { t.op("LpPool", {t.input<float>(xs, F32((size_t)product(xs), 1.0f))}); };
    { OpTest t; node(t, {1, 1, 4}); t.fails(Status::InvalidArgument); }   // no kernel_shape
    { OpTest t; node(t, {1, 4}); t.set_ints("kernel_shape", {2}); t.fails(Status::InvalidArgument); }
    { OpTest t; node(t, {1, 1, 4}); t.set_ints("kernel_shape", {2, 2}); t.fails(Status::InvalidArgument); }
    { OpTest t; node(t, {1, 1, 4}); t.set_ints("kernel_shape", {5}); t.fails(Status::InvalidArgument); }   // past X
    { OpTest t; node(t, {1, 1, 4}); t.set_ints("kernel_shape", {2}); t.set_int("p", 0); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 11; node(t, {1, 1, 4}); t.set_ints("kernel_shape", {2}); t.set_ints("dilations", {2}); t.fails(Status::InvalidArgument); }
    { OpTest t; t.opset = 18; node(t, {1, 1, 4}); t.set_ints("kernel_shape", {2}); t.set_int("ceil_mode", 2); t.fails(Status::InvalidArgument); }
    { OpTest t; node(t, {1, 1, 4}); t.set_ints("kernel_shape", {2}); t.set_string("auto_pad", "SAME"); t.fails(Status::InvalidArgument); }
    {
        OpTest t;
        t.op("LpPool", {t.input<int64_t>({1, 1, 4}, I64(4, 1))});
        t.set_ints("kernel_shape", {2});
        t.fails(Status::Unsupported);
    }
}

TEST_CASE("LRN: the channel window around c, sizes odd and even, other ranks") {
    auto lrn = [](const Shape& xs, const F32& x, int64_t size, float alpha, float beta, float bias) {
        OpTest t;
        t.op("LRN", {t.input<float>(xs, x)});
        t.set_int("size", size);
        t.set_float("alpha", alpha);
        t.set_float("beta", beta);
        t.set_float("bias", bias);
        t.go();
        return t.out<float>();
    };
    // size 3 (alpha / size 1): channels c-1..c+1; size 2: c..c+1
    check_close(lrn({1, 3, 1, 1}, {1, 2, 3}, 3, 3, 1, 1), {1.0f / 6, 2.0f / 15, 3.0f / 14});
    check_close(lrn({1, 3, 1, 1}, {1, 2, 3}, 2, 2, 1, 1), {1.0f / 6, 2.0f / 14, 3.0f / 10});
    // a 3-D input, two images, beta 0.75, against a plain loop
    std::mt19937 rng(13);
    F32 x = random_floats(rng, 2 * 5 * 3, -2, 2);
    F32 want(x.size());
    for (int n = 0; n < 2; ++n)
        for (int c = 0; c < 5; ++c)
            for (int i = 0; i < 3; ++i) {
                double sum = 0;
                for (int k = c - 2; k <= c + 2; ++k)
                    if (k >= 0 && k < 5) sum += (double)x[(size_t)((n * 5 + k) * 3 + i)] * x[(size_t)((n * 5 + k) * 3 + i)];
                want[(size_t)((n * 5 + c) * 3 + i)] = (float)(x[(size_t)((n * 5 + c) * 3 + i)] / std::pow(2.0 + 0.5 / 5 * sum, 0.75));
            }
    check_close(lrn({2, 5, 3}, x, 5, 0.5f, 0.75f, 2), want);
}

TEST_CASE("LRN: bad input") {
    { OpTest t; t.op("LRN", {t.input<float>({1, 3, 1, 1}, F32(3, 1.0f))}); t.fails(Status::InvalidArgument); }   // no size
    { OpTest t; t.op("LRN", {t.input<float>({1, 3, 1, 1}, F32(3, 1.0f))}); t.set_int("size", 0); t.fails(Status::InvalidArgument); }
    { OpTest t; t.op("LRN", {t.input<float>({3}, F32(3, 1.0f))}); t.set_int("size", 1); t.fails(Status::InvalidArgument); }
    { OpTest t; t.op("LRN", {t.input<int64_t>({1, 3, 1, 1}, I64(3, 1))}); t.set_int("size", 1); t.fails(Status::Unsupported); }
    { OpTest t; t.op("LRN", {t.input<float>({1, 3}, F32(3, 1.0f)), t.input<float>({1, 3}, F32(3, 1.0f))}); t.set_int("size", 1); t.fails(Status::InvalidArgument); }
}

TEST_CASE("spatial ops: infer on CPU and HETERO:TEMPLATE,CPU allocates nothing and matches prepare/run") {
    std::mt19937 rng(7);
    F32 x = random_floats(rng, 2 * 3 * 4 * 5, -1, 1), grid = random_floats(rng, 2 * 3 * 2 * 2, -1.2f, 1.2f);
    F32 first;
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        OpTest t;
        t.opset = 20;
        t.op("GridSample", {t.input<float>({2, 3, 4, 5}, x), t.input<float>({2, 3, 2, 2}, grid)});
        t.set_string("mode", "cubic");
        t.set_string("padding_mode", "reflection");
        REQUIRE(t.infer(device, "2") == Status::Ok);
        if (first.empty()) first = t.out<float>();
        else CHECK(t.out<float>() == first);
    }
    OpTest t;
    t.opset = 20;
    t.op("GridSample", {t.input<float>({2, 3, 4, 5}, x), t.input<float>({2, 3, 2, 2}, grid)});
    t.set_string("mode", "cubic");
    t.set_string("padding_mode", "reflection");
    t.go();
    CHECK(t.out<float>() == first);
}

TEST_CASE("spatial ops: random malformed nodes fail with a Status, never crash") {
    // Random op, opset, and inputs: mostly the op's intended ones (shapes derived from a random
    // X, shape-like inputs as constants) with random values (NaN, infinities, huge, negative
    // indices), some replaced by random shapes or types or left absent; random attributes. A
    // prepare that succeeds must describe outputs that can be allocated and a run that returns
    // (Ok or a Status); the sanitizer builds catch what this cannot see.
    const char* ops[] = {"GridSample", "AffineGrid", "Col2Im", "DeformConv", "RoiAlign", "CenterCropPad", "MaxUnpool", "Upsample",
                         "LpPool", "LRN"};
    const char* modes[] = {"linear", "bilinear", "nearest", "cubic", "bicubic", "avg", "max", "bad"};
    const char* paddings[] = {"zeros", "border", "reflection", "half_pixel", "output_half_pixel", "bad"};
    const float float_specials[] = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 0.5f, -1.5f};
    MalformedPicker picker(20261130);
    auto pick = [&](uint32_t n) { return picker.pick(n); };
    auto special = [&]() { return picker.special(); };
    uint32_t prepared = 0, ran = 0;
    for (int iteration = 0; iteration < 30000; ++iteration) {
        OpTest t;
        uint32_t which = pick(sizeof ops / sizeof ops[0]);
        const char* op = ops[which];
        const uint32_t since[] = {16, 20, 18, 19, 10, 18, 9, 7, 1, 1};
        t.opset = pick(4) ? since[which] + pick(23 - since[which]) : 7 + pick(17);
        int r = 1 + (int)pick(3);
        Shape x{1 + pick(2), 1 + pick(3)};
        for (int d = 0; d < r; ++d) x.push_back(1 + pick(4));
        int64_t n = x[0], c = x[1], k = 1 + pick(2), kernel = 1;
        for (int d = 0; d < r; ++d) kernel *= k;
        struct In { Shape shape; ElementType type; bool shape_like; };
        std::vector<In> want;   // the intended inputs
        I64 shape_values;       // for the shape-like ones
        switch (which) {
            case 0: { Shape g{n}; for (int d = 0; d < r; ++d) g.push_back(1 + pick(3)); g.push_back(r); want = {{x, ElementType::Float32, false}, {g, ElementType::Float32, false}}; break; }
            case 1: { int s = 2 + (int)pick(2); want = {{{n, s, s + 1}, ElementType::Float32, false}, {{s + 2}, ElementType::Int64, true}}; shape_values = {n, c, 1 + pick(3), 1 + pick(3), 1 + pick(3)}; break; }
            case 2: want = {{{n, c * kernel, 1 + pick(6)}, ElementType::Float32, false}, {{r}, ElementType::Int64, true}, {{r}, ElementType::Int64, true}}; shape_values = {1 + pick(4), 1 + pick(4), 1 + pick(4)}; break;
            case 3: {
                Shape w{c, c, k, k}, off{n, 2 * kernel, 1 + pick(3), 1 + pick(3)}, mask{n, kernel, off[2], off[3]};
                Shape x4{n, c, 2 + pick(3), 2 + pick(3)};
                want = {{x4, ElementType::Float32, false}, {w, ElementType::Float32, false}, {off, ElementType::Float32, false},
                        {{c}, ElementType::Float32, false}, {mask, ElementType::Float32, false}};
                break;
            }
            case 4: { int64_t rois = pick(4); Shape x4{n, c, 1 + pick(4), 1 + pick(4)}; want = {{x4, ElementType::Float32, false}, {{rois, 4}, ElementType::Float32, false}, {{rois}, ElementType::Int64, false}}; break; }
            case 5: want = {{x, picker.any_type(), false}, {{(int64_t)x.size()}, ElementType::Int64, true}}; for (size_t d = 0; d < x.size(); ++d) shape_values.push_back(pick(5)); break;
            case 6: want = {{x, ElementType::Float32, false}, {x, ElementType::Int64, false}, {{(int64_t)x.size()}, ElementType::Int64, true}}; for (size_t d = 0; d < x.size(); ++d) shape_values.push_back(pick(2) ? x[d] : x[d] * 2 + 1); break;
            case 7: want = {{x, ElementType::Float32, false}, {{(int64_t)x.size()}, ElementType::Float32, true}}; break;
            default: want = {{x, ElementType::Float32, false}}; break;
        }
        uint32_t num_inputs = pick(6) ? (uint32_t)want.size() - (which == 3 ? pick(3) : which == 6 ? pick(2) : 0) : pick(6);
        std::vector<InputRef> inputs;
        for (uint32_t i = 0; i < num_inputs; ++i) {
            if (pick(12) == 0) { inputs.push_back(t.model.absent()); continue; }
            In in = i < want.size() ? want[i] : In{x, ElementType::Float32, false};
            if (pick(8) == 0) in.type = picker.any_type();
            if (pick(8) == 0) { in.shape.resize(pick(5)); for (int64_t& d : in.shape) d = pick(4); }
            else if (pick(8) == 0 && !in.shape.empty()) in.shape[pick((uint32_t)in.shape.size())] = pick(5);
            size_t elements = 1;
            for (int64_t d : in.shape) elements *= (size_t)d;
            std::vector<unsigned char> bytes(elements * element_size(in.type));
            for (unsigned char& b : bytes) b = (unsigned char)picker.rng();
            for (size_t e = 0; e < elements; ++e) {
                if (in.type == ElementType::Int64) {
                    int64_t v = e < shape_values.size() && in.shape_like && pick(6) ? shape_values[e] : pick(8) == 0 ? special() : (int64_t)pick(5) - 1;
                    std::memcpy(&bytes[e * 8], &v, 8);
                } else if (in.type == ElementType::Float32) {
                    float v = pick(12) == 0 ? float_specials[pick(7)] : in.shape_like ? 1.0f + (float)pick(3) * 0.5f : (float)pick(17) * 0.25f - 2.0f;
                    std::memcpy(&bytes[e * 4], &v, 4);
                } else if (in.type == ElementType::Bool) {
                    bytes[e] &= 1;
                }
            }
            bool constant = in.shape_like ? pick(6) != 0 : pick(3) == 0;
            inputs.push_back(constant ? t.constant<unsigned char>(in.shape, bytes, in.type) : t.input<unsigned char>(in.shape, bytes, in.type));
        }
        t.op(op, inputs, pick(10) ? 1 : 2);
        if (pick(4) == 0) t.set_int("align_corners", pick(4) == 0 ? special() : (int64_t)pick(3) - 1);
        if (pick(5) == 0) t.set_int("group", pick(4) == 0 ? special() : (int64_t)pick(3));
        if (pick(5) == 0) t.set_int("offset_group", pick(4) == 0 ? special() : (int64_t)pick(3));
        if (pick(4) == 0) t.set_int("output_height", pick(4) == 0 ? special() : (int64_t)pick(4));
        if (pick(4) == 0) t.set_int("output_width", pick(4) == 0 ? special() : (int64_t)pick(4));
        if (pick(4) == 0) t.set_int("sampling_ratio", pick(4) == 0 ? special() : (int64_t)pick(4));
        bool kernel_shape = which == 6 || which == 8 ? pick(8) != 0 : pick(6) == 0;
        if (pick(4) == 0) t.set_int("p", pick(4) == 0 ? special() : (int64_t)pick(4));
        if (pick(4) == 0) t.set_int("size", pick(4) == 0 ? special() : (int64_t)pick(6));
        if (pick(6) == 0) t.set_int("ceil_mode", (int64_t)pick(3));
        if (pick(6) == 0) t.set_float("beta", pick(2) ? float_specials[pick(7)] : 0.75f);
        if (kernel_shape) t.set_ints("kernel_shape", pick(6) ? I64((size_t)r, k) : I64(pick(4), special()));
        for (const char* name : {"strides", "pads", "dilations", "axes"})
            if (pick(6) == 0) {
                std::vector<int64_t> v(pick(2) ? (size_t)(StringView(name) == StringView("pads") ? 2 * r : r) : pick(7));
                for (int64_t& e : v) e = pick(6) == 0 ? special() : (int64_t)pick(3) + (StringView(name) == StringView("pads") ? 0 : 1);
                t.set_ints(name, v);
            }
        if (pick(3) == 0) t.set_string("mode", modes[pick(8)]);
        if (pick(3) == 0) t.set_string("padding_mode", paddings[pick(6)]);
        if (pick(4) == 0) t.set_string("coordinate_transformation_mode", paddings[pick(6)]);
        if (pick(5) == 0) t.set_float("spatial_scale", pick(2) ? float_specials[pick(7)] : 0.5f);
        if (which == 7 && t.opset < 9 && pick(2)) {
            F32 scales((size_t)x.size(), 2.0f);
            if (pick(4) == 0) scales[pick((uint32_t)scales.size())] = float_specials[pick(7)];
            REQUIRE(t.model.set_floats(t.node, "scales", Span<const float>(scales.data(), scales.size())) == Status::Ok);
        }
        INFO(std::string(op) << " opset " << t.opset << " iteration " << iteration);
        t.prepare_and_run_any(&prepared, &ran);
    }
    MESSAGE("prepared " << prepared << ", ran " << ran);
    CHECK(prepared > 3000);   // the generator reaches the kernels' bodies, not only their checks
    CHECK(ran > 2500);
}
