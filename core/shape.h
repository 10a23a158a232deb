#pragma once
// Shape and stride vectors: a small inline array (no heap allocation), at most kMaxDims dims.

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "error.h"

namespace ember {

inline constexpr int kMaxDims = 8;

class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> v) { assign(v.begin(), v.end()); }
  explicit Dims(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }
  // n copies of value
  Dims(int n, int64_t value) {
    check_size(n);
    n_ = n;
    std::fill(d_, d_ + n, value);
  }
  template <typename It>
    requires(!std::is_integral_v<It>)
  Dims(It first, It last) { assign(first, last); }

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t* data() { return d_; }
  const int64_t* data() const { return d_; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  int64_t back() const { return d_[n_ - 1]; }
  void push_back(int64_t v) {
    check_size(n_ + 1);
    d_[n_++] = v;
  }
  void insert(int pos, int64_t v) {
    check_size(n_ + 1);
    for (int i = n_; i > pos; --i) d_[i] = d_[i - 1];
    d_[pos] = v;
    ++n_;
  }
  void erase(int pos) {
    for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
    --n_;
  }
  void resize(int n, int64_t value = 0) {
    check_size(n);
    for (int i = n_; i < n; ++i) d_[i] = value;
    n_ = n;
  }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(d_, d_ + n_); }

  friend bool operator==(const Dims& a, const Dims& b) {
    return a.n_ == b.n_ && std::equal(a.d_, a.d_ + a.n_, b.d_);
  }
  friend bool operator!=(const Dims& a, const Dims& b) { return !(a == b); }

 private:
  template <typename It>
  void assign(It first, It last) {
    const auto n = static_cast<int>(std::distance(first, last));
    check_size(n);
    n_ = n;
    std::copy(first, last, d_);
  }
  static void check_size(int n) {
    EMBER_CHECK(n <= kMaxDims, "tensors have at most ", kMaxDims, " dimensions, got ", n);
  }
  int64_t d_[kMaxDims] = {};
  int n_ = 0;
};

using Shape = Dims;
using Strides = Dims;

// "(2, 3)" as PyTorch prints sizes; "()" for a scalar.
std::string shape_str(const Dims& s);
std::ostream& operator<<(std::ostream& os, const Dims& s);

// Number of elements (1 for a scalar, 0 if any dim is 0).
int64_t numel_of(const Shape& s);
// Row-major contiguous strides for a shape.
Strides contiguous_strides(const Shape& s);
// Normalizes a possibly negative dim against ndim; throws "<op>: dim d out of range for a
// tensor of n dimensions".
int normalize_dim(int64_t dim, int ndim, const char* op);
// The broadcast shape of two shapes (NumPy rules); throws naming the op and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace ember
