#include "low_precision.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>

#include "gradcheck.h"

namespace ember::testing {

namespace {

struct Run {
  Tensor out;                      // float64 CPU copy of the output
  std::vector<Tensor> grads;       // float64 CPU copies of the inputs' gradients (undefined: none)
  std::vector<DType> grad_dtypes;  // the gradients' own dtypes
};

// Forward on `inputs` (float64 CPU values, placed on `device` in `dtype`, made leaves), then
// backward of sum(out * w) with w rounded to the output's dtype.
Run run_case(const OpCase& c, const std::vector<Tensor>& inputs, const Tensor& w, Device device, DType dtype) {
  const Device saved = case_device();
  case_device() = device;
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.detach().to(device, dtype).requires_grad_(true));
  Run r;
  try {
    r.out = c.fn(leaves);
  } catch (...) {
    case_device() = saved;
    throw;
  }
  case_device() = saved;
  if (is_floating(r.out.dtype()) && r.out.requires_grad())
    sum(mul(r.out, w.to(device, r.out.dtype()))).backward();
  for (const Tensor& l : leaves) {
    r.grads.push_back(l.grad().defined() ? l.grad().to(Device::cpu(), DType::f64) : Tensor());
    r.grad_dtypes.push_back(l.grad().defined() ? l.grad().dtype() : dtype);
  }
  r.out = r.out.detach().to(Device::cpu(), DType::f64);
  return r;
}

// Largest |a - b| / max(1, |b|) over two float64 tensors of one shape; `where` names its element.
double worst_scaled_error(const Tensor& a, const Tensor& b, std::string* where) {
  const std::vector<double> av = a.contiguous().to_vector<double>(), bv = b.contiguous().to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    const bool both_nan = std::isnan(av[i]) && std::isnan(bv[i]);
    const double e = both_nan ? 0.0 : (av[i] == bv[i] ? 0.0 : std::abs(av[i] - bv[i]) / std::max(1.0, std::abs(bv[i])));
    if (!(e <= worst)) {  // also catches a NaN error (one side NaN)
      worst = std::isnan(e) ? INFINITY : e;
      std::ostringstream os;
      os << "element " << i << ": " << av[i] << " (16-bit) vs " << bv[i] << " (float32)";
      *where = os.str();
    }
  }
  return worst;
}

}  // namespace

const std::set<std::string>& cases_without_low_precision() {
  static const std::set<std::string> names = {};
  return names;
}

double unit_roundoff(DType dtype) {
  EMBER_CHECK(is_low_precision(dtype), "unit_roundoff: expected float16 or bfloat16, got ", dtype);
  return dtype == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

int64_t accumulation_length(const OpCase& c) {
  int64_t L = 2;
  for (const Shape& s : c.inputs) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    L = std::max(L, n);
  }
  return L;
}

double low_precision_tolerance(const OpCase& c, DType dtype) {
  return (4.0 + std::log2(static_cast<double>(accumulation_length(c)))) * unit_roundoff(dtype);
}

LowPrecisionResult check_low_precision(const OpCase& c, Device device, DType dtype) {
  LowPrecisionResult res;
  const double u = unit_roundoff(dtype), tol = low_precision_tolerance(c, dtype);
  // The case's inputs, rounded to the 16-bit dtype (and held as float64: exact).
  std::vector<Tensor> inputs;
  for (const Tensor& t : make_inputs(c)) inputs.push_back(t.to(dtype).to(DType::f64));
  // Output weights in [0.5, 1.5), rounded to the dtype so that both runs use the same values
  // (the output's shape comes from a float32 forward on the CPU).
  Tensor w;
  try {
    std::vector<Tensor> leaves;
    for (const Tensor& t : inputs) leaves.push_back(t.to(DType::f32));
    NoGradGuard ng;
    const Tensor out = c.fn(leaves);
    Generator g(0x5eed);
    w = add(rand(out.shape(), {.dtype = DType::f64}, g), 0.5).to(dtype).to(DType::f64);
  } catch (const Error& e) {
    res.refused = true;
    res.error = std::string("no float32 reference: ") + e.what();
    return res;
  }
  Run lp;
  try {
    lp = run_case(c, inputs, w, device, dtype);
  } catch (const Error& e) {
    res.refused = true;
    res.error = e.what();
    return res;
  }
  const Run ref = run_case(c, inputs, w, Device::cpu(), DType::f32);
  std::ostringstream report;
  auto compare = [&](const Tensor& a, const Tensor& b, const std::string& what) {
    if (a.shape() != b.shape()) {
      report << what << ": shape " << a.shape() << " vs " << b.shape() << "; ";
      res.worst_ratio = INFINITY;
      return;
    }
    std::string where;
    const double e = worst_scaled_error(a, b, &where);
    res.worst_ratio = std::max(res.worst_ratio, e / u);
    if (!(e <= tol)) report << what << " " << where << " (error " << e / u << " u, budget " << tol / u << " u); ";
  };
  compare(lp.out, ref.out, "output");
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    if (lp.grads[i].defined() != ref.grads[i].defined()) {
      report << "gradient of input " << i << " defined in one run only; ";
      res.worst_ratio = INFINITY;
    } else if (ref.grads[i].defined()) {
      if (lp.grad_dtypes[i] != dtype) {  // autograd keeps each gradient in its input's dtype
        report << "gradient of input " << i << " is " << lp.grad_dtypes[i] << "; ";
        res.worst_ratio = INFINITY;
      }
      compare(lp.grads[i], ref.grads[i], "gradient of input " + std::to_string(i));
    }
  }
  res.error = report.str();
  return res;
}

void check_low_precision_family(void (*add_cases)(std::vector<OpCase>&), Device device) {
  std::vector<OpCase> cases;
  add_cases(cases);
  REQUIRE(!cases.empty());
  const std::set<std::string>& refused = cases_without_low_precision();
  for (const OpCase& c : cases) {
    for (DType dtype : {DType::f16, DType::bf16}) {
      const LowPrecisionResult r = check_low_precision(c, device, dtype);
      INFO(c.name << " " << dtype << " on " << device << ": worst " << r.worst_ratio << " u, budget "
                  << low_precision_tolerance(c, dtype) / unit_roundoff(dtype) << " u");
      if (refused.count(c.name)) {
        INFO("listed in cases_without_low_precision(), so it must refuse 16-bit inputs");
        CHECK(r.refused);
        continue;
      }
      INFO(r.error);
      CHECK(!r.refused);
      CHECK(r.error.empty());
    }
  }
}

}  // namespace ember::testing
