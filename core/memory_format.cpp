// Memory formats (Note [Memory formats] in memory_format.h): the stride rules, and the Tensor
// methods and factory that take a format.

#include "memory_format.h"

#include "autograd.h"
#include "tensor.h"

namespace ember {

const char* memory_format_name(MemoryFormat format) {
  switch (format) {
    case MemoryFormat::contiguous: return "contiguous";
    case MemoryFormat::channels_last: return "channels_last";
    case MemoryFormat::preserve: return "preserve";
  }
  return "unknown";
}

namespace {
// The dims of a 4-D tensor from the fastest-moving to the slowest in channels-last memory: C, W, H, N.
constexpr int kChannelsLastInnerToOuter[4] = {1, 3, 2, 0};
}  // namespace

Strides strides_in(const Shape& shape, MemoryFormat format) {
  EMBER_CHECK(format != MemoryFormat::preserve, "strides_in: MemoryFormat::preserve names no strides");
  if (format == MemoryFormat::contiguous) return contiguous_strides(shape);
  EMBER_CHECK(shape.size() == 4, "channels_last memory format needs a 4-D (N, C, H, W) tensor, got shape ", shape);
  Strides st(4, 1);
  int64_t acc = 1;
  for (int d : kChannelsLastInnerToOuter) {
    st[d] = acc;
    acc *= std::max<int64_t>(shape[d], 1);
  }
  return st;
}

bool is_contiguous_in(const Shape& shape, const Strides& strides, MemoryFormat format) {
  EMBER_CHECK(format != MemoryFormat::preserve, "is_contiguous: MemoryFormat::preserve is not a layout to check");
  if (format == MemoryFormat::channels_last && shape.size() != 4) return false;
  if (numel_of(shape) == 0) return true;
  const Strides want = strides_in(shape, format);
  for (int d = 0; d < shape.size(); ++d)
    if (shape[d] != 1 && strides[d] != want[d]) return false;
  return true;
}

MemoryFormat suggest_memory_format(const Shape& shape, const Strides& strides) {
  if (shape.size() != 4) return MemoryFormat::contiguous;
  const bool channels_last = strides == strides_in(shape, MemoryFormat::channels_last);
  return channels_last && strides != contiguous_strides(shape) ? MemoryFormat::channels_last
                                                               : MemoryFormat::contiguous;
}

// ---- Tensor methods ------------------------------------------------------------------------------

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::contiguous) return is_contiguous();
  return is_contiguous_in(shape(), strides(), format);
}

MemoryFormat Tensor::suggest_memory_format() const { return ember::suggest_memory_format(shape(), strides()); }

Tensor Tensor::contiguous(MemoryFormat format) const {
  EMBER_CHECK(format != MemoryFormat::preserve,
              "contiguous: MemoryFormat::preserve is not a format to make a tensor contiguous in (use clone())");
  // A channels-last tensor must also carry the exact channels-last strides (an (N, 1, H, W) tensor
  // passes both checks), so that suggest_memory_format() names the format it was asked for.
  if (format == MemoryFormat::channels_last && is_contiguous(format) && suggest_memory_format() == format)
    return *this;
  if (format == MemoryFormat::contiguous && is_contiguous()) return *this;
  return clone(format);
}

Tensor Tensor::clone(MemoryFormat format) const {
  const MemoryFormat f = format == MemoryFormat::preserve ? suggest_memory_format() : format;
  Tensor out = empty(shape(), {.dtype = dtype(), .device = device()}, f);
  {
    NoGradGuard g;
    out.copy_(*this);
  }
  if (any_requires_grad({this})) {
    record("CloneBackward", {*this}, {out}, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  }
  return out;
}

Tensor empty(const Shape& shape, TensorOptions opt, MemoryFormat format) {
  EMBER_CHECK(format != MemoryFormat::preserve, "empty: MemoryFormat::preserve has no tensor to preserve the format of");
  Tensor t = empty(shape, {.dtype = opt.dtype, .device = opt.device});
  if (format == MemoryFormat::channels_last) {
    // Same storage (the same number of elements), channels-last strides.
    t = make_tensor(t.storage(), shape, strides_in(shape, format), 0, opt.dtype);
  }
  if (opt.requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace ember
