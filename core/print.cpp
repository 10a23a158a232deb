// PyTorch-style printing:
//   tensor([[1.0000, 2.0000],
//           [3.0000, 4.0000]], shape=(2, 2), dtype=float32, device=cpu, grad_fn=<MulBackward>)

#include <cmath>
#include <iomanip>
#include <sstream>

#include "autograd.h"
#include "tensor.h"

namespace ember {

namespace {

struct Format {
  bool integral = false;
  bool scientific = false;
  bool whole = false;  // floats that are all whole numbers print as "1." like PyTorch
  int precision = 4;
  int width = 0;
};

std::string format_value(double v, const Format& f) {
  std::ostringstream os;
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (f.integral) {
    os << static_cast<int64_t>(v);
  } else if (f.whole) {
    os << static_cast<int64_t>(v) << '.';
  } else if (f.scientific) {
    os << std::scientific << std::setprecision(f.precision) << v;
  } else {
    os << std::fixed << std::setprecision(f.precision) << v;
  }
  return os.str();
}

void print_rec(std::ostream& os, const std::vector<double>& v, const Shape& shape, int dim, int64_t& pos,
               const Format& f, int indent) {
  const int64_t edge = 3;  // like PyTorch's summarization: first/last 3 when a dim is long
  const bool summarize = static_cast<int64_t>(v.size()) > 1000;
  os << '[';
  const int64_t n = shape[dim];
  int64_t inner = 1;
  for (int d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * edge && i == edge) {
      os << "...";
      os << (dim + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
      pos += (n - 2 * edge) * inner;
      i = n - edge - 1;
      continue;
    }
    if (dim + 1 == shape.size()) {
      std::string s = format_value(v[pos++], f);
      os << std::string(std::max<int>(0, f.width - static_cast<int>(s.size())), ' ') << s;
    } else {
      print_rec(os, v, shape, dim + 1, pos, f, indent + 1);
    }
    if (i + 1 < n) os << (dim + 1 == shape.size() ? ", " : ",\n" + std::string(shape.size() - dim - 1 > 1 ? 1 : 0, '\n') + std::string(indent + 1, ' '));
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<double> v = to_vector<double>();
  Format f;
  f.integral = !is_floating(dtype());
  double max_abs = 0, min_abs = INFINITY;
  bool all_int = true;
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    max_abs = std::max(max_abs, std::abs(x));
    if (x != 0) min_abs = std::min(min_abs, std::abs(x));
    if (x != std::floor(x)) all_int = false;
  }
  if (!f.integral && (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY))) f.scientific = true;
  f.whole = !f.integral && all_int && !f.scientific;
  for (double x : v) f.width = std::max<int>(f.width, static_cast<int>(format_value(x, f).size()));

  std::ostringstream os;
  os << "tensor(";
  if (dim() == 0) {
    os << format_value(v[0], f);
  } else {
    int64_t pos = 0;
    print_rec(os, v, shape(), 0, pos, f, 7);
  }
  os << ", shape=" << shape() << ", dtype=" << dtype() << ", device=" << device();
  if (grad_fn()) {
    os << ", grad_fn=<" << grad_fn()->name << ">";
  } else if (requires_grad()) {
    os << ", requires_grad=True";
  }
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace ember
