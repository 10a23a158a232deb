#include "shape.h"

#include <sstream>

namespace ember {

std::string shape_str(const Dims& s) {
  std::ostringstream os;
  os << '(';
  for (int i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  if (s.size() == 1) os << ',';
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Dims& s) { return os << shape_str(s); }

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Strides contiguous_strides(const Shape& s) {
  Strides st(s.size(), 1);
  int64_t acc = 1;
  for (int i = s.size() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

int normalize_dim(int64_t dim, int ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  EMBER_CHECK(dim >= lo && dim <= hi, op, ": dim ", dim, " is out of range for a tensor of ", ndim,
              " dimension", ndim == 1 ? "" : "s", " (expected ", lo, " to ", hi, ")");
  return static_cast<int>(dim < 0 ? dim + std::max(ndim, 1) : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int n = std::max(a.size(), b.size());
  Shape out(n, 1);
  for (int i = 0; i < n; ++i) {
    const int ia = a.size() - n + i, ib = b.size() - n + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    EMBER_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
                " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace ember
