// Dropout with autograd.
//
// The keep-mask comes from bernoulli() (core/generator.h), so it follows the documented Philox
// layout: element i (row-major over x's shape) is kept when the float32 uniform drawn for it is
// below 1 - p. One call consumes ceil(numel / 4) Philox blocks of `gen`, on every device, so a
// seed reproduces the same mask on the CPU and on a GPU.

#include "../core/op_helpers.h"
#include "elementwise.h"
#include "nn_functional.h"

namespace ember {

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability p must be in [0, 1], got ", p);
  detail::check_floating("dropout", x);
  if (!training || p == 0.0) return x;

  // The mask with the 1 / (1 - p) scale folded in: 0 or 1 / (1 - p). p == 1 drops everything
  // (and must not compute 1 / 0), without drawing from the generator, as PyTorch.
  Tensor scaled_mask, y;
  if (p != 1.0)
    detail::check_not_capturing(x.device(), "dropout",
                                "draws its mask from the host's random generator: a CUDA graph would freeze the "
                                "generator's position and replay one mask forever");
  {
    NoGradGuard no_grad;
    const TensorOptions opt{.dtype = x.dtype(), .device = x.device()};
    scaled_mask = p == 1.0 ? zeros(x.shape(), opt) : mul(bernoulli(x.shape(), 1.0 - p, opt, gen), 1.0 / (1.0 - p));
    y = mul(x, scaled_mask);
  }
  if (any_requires_grad({&x})) {
    SavedTensor sm(scaled_mask, "DropoutBackward");
    const DType dt = x.dtype();
    record("DropoutBackward", {x}, {y}, [=](const std::vector<Tensor>& g) {
      if (!g[0].defined()) return std::vector<Tensor>{Tensor()};
      return std::vector<Tensor>{mul(g[0], sm.get()).to(dt)};
    });
  }
  return y;
}

}  // namespace ember
