// Small helpers shared by the unit tests: tensor construction shorthands, element-wise closeness
// checks, the message of a thrown ember::Error, and a guard that restores the thread count.
#pragma once

#include <catch2/catch.hpp>
#include <ember/ember.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <unistd.h>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace ember::testing {

// n values drawn uniformly from [-1, 1) by a seeded std::mt19937 (raw buffers for kernel tests).
template <typename T>
std::vector<T> random_vector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(u(rng));
  return v;
}

// max |a - b| / (1 + |b|) over the elements.
template <typename T>
double max_rel_diff(const std::vector<T>& a, const std::vector<T>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])) /
                        (1.0 + std::abs(static_cast<double>(b[i]))));
  return m;
}

// The elements of t, converted to double.
inline std::vector<double> vec(const Tensor& t) { return t.to_vector<double>(); }

// An f64 tensor of the given shape.
inline Tensor f64(const std::vector<double>& v, const Shape& shape, bool requires_grad = false) {
  return from_vector<double>(v, shape, {.dtype = DType::f64, .requires_grad = requires_grad});
}

// An i64 tensor of the given shape (class labels, indices).
inline Tensor i64(const std::vector<int64_t>& v, const Shape& shape) { return from_vector<int64_t>(v, shape); }

// The message of the ember::Error that f throws, or a marker that makes the check fail.
template <typename F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no ember::Error thrown>";
}

// Checks actual against expected element by element: a NaN expected value needs a NaN, an
// infinite one needs exactly that infinity, and any other value must match within abs_tol
// (Approx margin) or rel_tol (Approx epsilon; -1 means the same as abs_tol).
inline void check_close(const std::vector<double>& actual, const std::vector<double>& expected,
                        double abs_tol = 1e-12, double rel_tol = -1) {
  if (rel_tol < 0) rel_tol = abs_tol;
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("element " << i);
    if (std::isnan(expected[i])) {
      CHECK(std::isnan(actual[i]));
    } else if (std::isinf(expected[i])) {
      CHECK(actual[i] == expected[i]);
    } else {
      CHECK(actual[i] == Approx(expected[i]).margin(abs_tol).epsilon(rel_tol));
    }
  }
}

inline void check_close(const Tensor& actual, const std::vector<double>& expected, double abs_tol = 1e-12,
                        double rel_tol = -1) {
  check_close(actual.to_vector<double>(), expected, abs_tol, rel_tol);
}

// check_close with a relative tolerance of 1e-9 whatever abs_tol is (the loss and reduction
// tests have always compared that way).
inline void check_close_rel9(const std::vector<double>& actual, const std::vector<double>& expected,
                             double abs_tol = 1e-12) {
  check_close(actual, expected, abs_tol, 1e-9);
}

// check_close with an absolute margin and Catch's default relative tolerance (Approx epsilon
// 100 * float epsilon): the pooling and batch-norm tests' comparison.
inline void check_close_margin(const std::vector<double>& actual, const std::vector<double>& expected,
                               double abs_tol = 1e-12) {
  check_close(actual, expected, abs_tol, std::numeric_limits<float>::epsilon() * 100);
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Restores the thread count a test changed.
struct ThreadsGuard {
  int prev = get_num_threads();
  ~ThreadsGuard() { set_num_threads(prev); }
};

// A fresh, empty directory under the system temp dir, removed with everything in it at scope
// end. Names carry a prefix, the process id and a counter, so parallel ctest runs never collide.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix) {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// The whole content of a file ("" when it cannot be read), and a file written with exactly `text`.
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
}

// Every batch of `epochs` passes over `loader`, in order.
inline std::vector<data::Batch> run_epochs(data::DataLoader& loader, int epochs) {
  std::vector<data::Batch> out;
  for (int e = 0; e < epochs; ++e)
    for (auto& batch : loader) out.push_back(batch);
  return out;
}

// A run that saves its loader's position inside the loop body once it stands at `at`, then
// "crashes" (the loader is destroyed mid-epoch): the position saved (where the run ended when it
// never stood at `at`).
inline data::LoaderPosition position_at_crash(const data::Dataset& dataset, const data::LoaderOptions& options,
                                              data::LoaderPosition at) {
  data::DataLoader run(dataset, options);
  for (int64_t e = 0; e <= at.epoch; ++e)
    for (auto& batch : run) {
      (void)batch;
      if (run.position() == at) return run.position();
    }
  return run.position();
}

}  // namespace ember::testing
