// StepGuard (Note [Divergence guard] in step_guard.h).

#include "step_guard.h"

#include <vector>

#include "../core/autograd.h"
#include "../core/error.h"
#include "../layers/elementwise.h"
#include "../layers/index.h"

namespace ember::train {

StepGuard::StepGuard(Device device) {
  flag_ = zeros({1}, {.dtype = DType::f32, .device = device});
  for (Tensor* t : {&finite_steps_, &loss_sum_, &correct_sum_, &last_loss_, &bad_loss_, &step_loss_, &step_correct_})
    *t = zeros({1}, {.dtype = DType::f64, .device = device});
}

void StepGuard::start_epoch(int64_t steps_before) {
  steps_before_ = steps_before;
  for (Tensor* t : {&finite_steps_, &loss_sum_, &correct_sum_}) t->zero_();
}

void StepGuard::record(const Tensor& loss, const Tensor& correct, int64_t n) {
  EMBER_CHECK(loss.numel() == 1 && loss.is_floating_point(), "StepGuard::record: the loss must be one floating "
              "element, got ", describe(loss));
  EMBER_CHECK(correct.numel() == 1, "StepGuard::record: the correct count must be one element, got ",
              describe(correct));
  NoGradGuard no_grad;
  const Tensor l = loss.detach().to(DType::f64).reshape({1});
  const Tensor finite = eq(sub(l, l), 0.0);  // false for NaN and +-inf alone (inf - inf is NaN)
  const Tensor was = flag_.to(DType::f64);   // 1 once an earlier step was not finite
  const Tensor fin = finite.to(DType::f64);
  const Tensor ok = mul(fin, rsub(was, 1.0));          // this step counts: finite, and none before was not
  const Tensor newly = mul(rsub(fin, 1.0), rsub(was, 1.0));  // the first non-finite step
  flag_.copy_(maximum(was, rsub(fin, 1.0)));
  finite_steps_.add_(ok);
  // where, not a product: 0 * NaN is NaN.
  loss_sum_.add_(mul(where(finite, l, zeros_like(l)), mul(ok, static_cast<double>(n))));
  correct_sum_.add_(mul(correct.detach().to(DType::f64).reshape({1}), ok));
  last_loss_.copy_(where(gt(ok, 0.5), l, last_loss_));
  bad_loss_.copy_(where(gt(newly, 0.5), l, bad_loss_));
  step_loss_.copy_(l);
  step_correct_.copy_(correct.detach().reshape({1}));
}

StepGuard::Totals StepGuard::read() const {
  const std::vector<double> v = cat({flag_.to(DType::f64), finite_steps_, loss_sum_, correct_sum_, last_loss_,
                                     bad_loss_, step_loss_, step_correct_})
                                    .to_vector<double>();
  Totals t;
  t.diverged = v[0] != 0;
  t.finite_steps = static_cast<int64_t>(v[1]);
  t.first_bad_step = steps_before_ + t.finite_steps + 1;
  t.last_finite_step = steps_before_ + t.finite_steps;
  t.loss_sum = v[2];
  t.correct = v[3];
  t.last_finite_loss = v[4];
  t.first_bad_loss = v[5];
  t.step_loss = v[6];
  t.step_correct = v[7];
  return t;
}

}  // namespace ember::train
