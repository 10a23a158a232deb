// Channels-last max pooling on a CUDA device (Note [Channels-last max pooling] in
// kernels/cuda/pool.cu): the NHWC kernels against the NCHW ones on the same values — outputs,
// indices and the gathered gradients bit for bit, ties and NaN included, for every window shape
// the NCHW tests cover — and the layer: max_pool2d_with_indices (and max_pool2d where cuDNN does
// not serve, a ceil-mode window) on a channels-last CUDA tensor returns channels-last values,
// indices and input gradient equal to the NCHW layer's, without a copy through NCHW.

#include <ember/ember.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "../../kernels/cuda/pool.h"
#include "../../core/cuda/runtime.h"
#include "channels_last_data.h"
#include "device_buffer.h"
#include "random_data.h"

namespace {

using ember::DType;
using ember::kernels::Pool2dGeometry;
using ember::testing::DeviceBuffer;
using ember::testing::permute_channels;

struct Window {
  const char* name;
  int64_t in_h, in_w, k, s, p, d;
  bool ceil_mode;
};

Pool2dGeometry geometry(const Window& w, int64_t planes) {
  Pool2dGeometry g;
  g.planes = planes, g.in_h = w.in_h, g.in_w = w.in_w;
  g.kernel_h = g.kernel_w = w.k, g.stride_h = g.stride_w = w.s, g.pad_h = g.pad_w = w.p;
  g.dilation_h = g.dilation_w = w.d;
  g.out_h = ember::kernels::pool_output_size(w.in_h, w.k, w.p, w.s, w.d, w.ceil_mode);
  g.out_w = ember::kernels::pool_output_size(w.in_w, w.k, w.p, w.s, w.d, w.ceil_mode);
  return g;
}

template <typename T>
std::vector<T> downloaded(const DeviceBuffer<T>& b) {
  b.check_guards();
  return b.download();
}

template <typename T>
void require_same_bits(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    if (!ember::testing::kExactNanBits && std::isnan(static_cast<double>(want[i])))
      REQUIRE(std::isnan(static_cast<double>(got[i])));
    else
      REQUIRE(std::memcmp(&got[i], &want[i], sizeof(T)) == 0);
  }
}

// A copy of v one element in: data() + 1 of a buffer of it is off 16-byte alignment.
template <typename T>
std::vector<T> shifted(const std::vector<T>& v) {
  std::vector<T> r(1, v.empty() ? T(0.0f) : v.front());
  r.insert(r.end(), v.begin(), v.end());
  return r;
}
template <typename T>
std::vector<T> unshifted(const std::vector<T>& v) {
  return std::vector<T>(v.begin() + 1, v.end());
}

// n images of c channels: values on a coarse grid (so windows hold ties) and one NaN. The NHWC
// kernels take 16-byte packs of channels where c and the pointers allow (Note [Channels-last max
// pooling]); `shift` puts the data one element off alignment, which makes them take one channel
// per thread: the same bits either way.
template <typename T, typename I>
void check_window(const Window& w, int64_t n, int64_t c, uint64_t seed, bool shift = false) {
  const Pool2dGeometry g = geometry(w, n * c);
  const DType dt = ember::dtype_of<T>::value, it = ember::dtype_of<I>::value;
  const size_t in_n = static_cast<size_t>(g.planes * g.in_h * g.in_w);
  const size_t out_n = static_cast<size_t>(g.planes * g.out_h * g.out_w);
  std::vector<T> x(in_n), go(out_n);
  const std::vector<double> r = ember::testing::random_vector<double>(in_n + out_n, seed);
  for (size_t i = 0; i < in_n; ++i) x[i] = T(static_cast<float>(std::round(r[i] * 4) / 4));
  for (size_t i = 0; i < out_n; ++i) go[i] = T(static_cast<float>(r[in_n + i]));
  x[in_n / 3] = T(std::numeric_limits<float>::quiet_NaN());
  const int64_t in_s = g.in_h * g.in_w, out_s = g.out_h * g.out_w;

  DeviceBuffer<T> dx(x), dgo(go), out(out_n), gi(in_n);
  DeviceBuffer<I> idx(out_n);
  ember::kernels::gpu::max_pool2d_forward(dt, it, g, dx.data(), out.data(), idx.data());
  ember::kernels::gpu::max_pool2d_backward(dt, it, g, dgo.data(), idx.data(), gi.data());

  std::vector<T> x_cl = permute_channels(x, n, c, in_s, true), go_cl = permute_channels(go, n, c, out_s, true);
  const size_t k = shift ? 1 : 0;
  DeviceBuffer<T> dx_cl(shift ? shifted(x_cl) : x_cl), dgo_cl(shift ? shifted(go_cl) : go_cl);
  DeviceBuffer<T> out_cl(out_n + k), gi_cl(in_n + k);
  DeviceBuffer<I> idx_cl(out_n);
  ember::kernels::gpu::max_pool2d_forward_nhwc(dt, it, g, c, dx_cl.data() + k, out_cl.data() + k, idx_cl.data());
  ember::kernels::gpu::max_pool2d_backward_nhwc(dt, it, g, c, dgo_cl.data() + k, idx_cl.data(), gi_cl.data() + k);
  std::vector<T> got_out = downloaded(out_cl), got_gi = downloaded(gi_cl);
  if (shift) got_out = unshifted(got_out), got_gi = unshifted(got_gi);

  require_same_bits(permute_channels(got_out, n, c, out_s, false), downloaded(out), "values");
  REQUIRE(permute_channels(downloaded(idx_cl), n, c, out_s, false) == downloaded(idx));
  require_same_bits(permute_channels(got_gi, n, c, in_s, false), downloaded(gi), "input gradient");
}

const std::vector<Window>& windows() {
  static const std::vector<Window> all = {
      {"2x2 stride 2", 8, 10, 2, 2, 0, 1, false},
      {"3x3 stride 2 pad 1 (ResNet's, overlapping)", 9, 11, 3, 2, 1, 1, false},
      {"3x3 stride 1 pad 1 dilation 2", 9, 8, 3, 1, 1, 2, false},
      {"2x2 stride 2 ceil_mode, odd input", 7, 9, 2, 2, 0, 1, true},
      {"3x3 stride 2 pad 1 ceil_mode", 10, 6, 3, 2, 1, 1, true},
  };
  return all;
}

}  // namespace

TEMPLATE_TEST_CASE("cuda channels-last max pooling equals NCHW: values, indices, gradients, bit for bit",
                   "[cuda][pool][channels_last]", float, double, ember::BFloat16) {
  uint64_t seed = 700;
  for (const Window& w : windows()) {
    // 1 and 3 channels one per thread; 24 and 32 in packs (three and four of 8 bf16 values, six
    // and eight of 4 floats, twelve and sixteen of 2 doubles), and 32 off alignment.
    for (const int64_t c : {int64_t{1}, int64_t{3}, int64_t{24}, int64_t{32}}) {
      INFO(w.name << ", " << c << " channels");
      check_window<TestType, int64_t>(w, 2, c, seed++);
      check_window<TestType, int32_t>(w, 2, c, seed++);
    }
    INFO(w.name << ", 32 channels one element off alignment");
    check_window<TestType, int32_t>(w, 2, 32, seed++, /*shift=*/true);
  }
}

TEST_CASE("cuda channels-last max pooling refuses planes that are not whole images", "[cuda][pool][channels_last]") {
  const Pool2dGeometry g = geometry(windows()[0], 5);
  DeviceBuffer<float> x(5 * 80), out(5 * 20);
  DeviceBuffer<int64_t> idx(5 * 20);
  try {
    ember::kernels::gpu::max_pool2d_forward_nhwc(DType::f32, DType::i64, g, 2, x.data(), out.data(), idx.data());
    FAIL("5 planes of 2 channels were accepted");
  } catch (const ember::Error& e) {
    CHECK(std::string(e.what()).find("5 planes are not images of 2 channels") != std::string::npos);
  }
}

TEST_CASE("max_pool2d_with_indices on a channels-last CUDA tensor pools in place: NCHW's values, no copy",
          "[cuda][pool][channels_last]") {
  using namespace ember;
  const Shape shape{4, 16, 12, 10};
  const std::vector<float> v = testing::random_vector<float>(static_cast<size_t>(numel_of(shape)), 5);
  const Tensor x = from_vector<float>(v, shape).to(Device::cuda(0));
  const Pool2dOptions opt{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true};
  for (const DType dt : {DType::f32, DType::bf16}) {
    INFO(dt);
    const Tensor a = x.to(dt).detach().requires_grad_(true);
    const Tensor b = x.to(dt).contiguous(MemoryFormat::channels_last).detach().requires_grad_(true);
    const auto [ya, ia] = max_pool2d_with_indices(a, opt);
    cuda::synchronize();
    cuda::reset_peak_memory_stats(0);
    const int64_t before = cuda::memory_stats(0).allocated_bytes;
    const auto [yb, ib] = max_pool2d_with_indices(b, opt);
    const int64_t out_bytes = yb.numel() * (dtype_size(dt) + 8);  // values and int64 indices
    // The outputs alone; a copy through NCHW would add x's bytes.
    CHECK(cuda::memory_stats(0).peak_allocated_bytes - before <= out_bytes + 1024);
    CHECK(yb.is_contiguous(MemoryFormat::channels_last));
    CHECK(ib.is_contiguous(MemoryFormat::channels_last));
    CHECK(yb.to_vector<double>() == ya.to_vector<double>());
    CHECK(ib.to_vector<int64_t>() == ia.to_vector<int64_t>());
    const Tensor g = from_vector<float>(testing::random_vector<float>(static_cast<size_t>(ya.numel()), 6), ya.shape())
                         .to(Device::cuda(0), dt);
    const Tensor ga = ember::grad({ya}, {a}, {g})[0];
    const Tensor gb = ember::grad({yb}, {b}, {g.contiguous(MemoryFormat::channels_last)})[0];
    CHECK(gb.is_contiguous(MemoryFormat::channels_last));
    CHECK(gb.to_vector<double>() == ga.to_vector<double>());
    // max_pool2d with a ceil-mode window (which cuDNN does not compute) takes the same kernels.
    const Tensor yc = max_pool2d(b, opt);
    CHECK(yc.is_contiguous(MemoryFormat::channels_last));
    CHECK(yc.to_vector<double>() == ya.to_vector<double>());
  }
}
