#pragma once
// Host-side reordering between (n, c, s) and channels-last (n, s, c) element order, for the tests
// that run a channels-last kernel against the NCHW one on the same values (s = h * w for a 4-D
// tensor; a filter (k, c, kh, kw) is n = k, s = kh * kw).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ember::testing {

// to_channels_last: v in (n, c, s) order -> (n, s, c); otherwise the reverse.
template <typename T>
std::vector<T> permute_channels(const std::vector<T>& v, int64_t n, int64_t c, int64_t s, bool to_channels_last) {
  std::vector<T> r(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < s; ++j) {
        const auto ncs = static_cast<size_t>((i * c + ch) * s + j), nsc = static_cast<size_t>((i * s + j) * c + ch);
        if (to_channels_last)
          r[nsc] = v[ncs];
        else
          r[ncs] = v[nsc];
      }
  return r;
}

}  // namespace ember::testing
