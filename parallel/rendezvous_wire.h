#pragma once
// The pieces the TCP and file rendezvous share (rendezvous_tcp.cpp, rendezvous.cpp): the wire
// format's constants, big-endian integers, and the wording of errors. Internal to parallel/.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "../core/error.h"
#include "rendezvous.h"

namespace ember::parallel::detail {

// Note [Rendezvous protocol] in rendezvous.h.
inline constexpr std::string_view kHelloMagic = "EMBERRDV";  // hello, and rank 0's answer
inline constexpr std::string_view kAckMagic = "EMBERACK";
inline constexpr std::string_view kFileMagic = "EMBERRDF";
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kMaxKeyBytes = 256;

inline std::string errno_message(int err) { return std::error_code(err, std::generic_category()).message(); }

inline std::string seconds(std::chrono::milliseconds t) {
  std::ostringstream os;
  os << t.count() / 1000.0 << " s";
  return os.str();
}

// "rank 3", "ranks 1-7, 9".
inline std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) os << ", ";
    os << ranks[i];
    if (j > i) os << "-" << ranks[j];
    i = j + 1;
  }
  return os.str();
}

// The first bytes of a buffer, quoted, non-printable ones as \xNN.
inline std::string quoted_bytes(const std::vector<uint8_t>& b, size_t max = 16) {
  std::string s = "'";
  for (size_t i = 0; i < b.size() && i < max; ++i) {
    const uint8_t c = b[i];
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      s += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      s += "\\x";
      s += hex[c >> 4];
      s += hex[c & 15];
    }
  }
  return s + (b.size() > max ? "...'" : "'");
}

inline void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}
inline void put_u64(std::vector<uint8_t>& b, uint64_t v) {
  for (int s = 56; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}
inline void put_bytes(std::vector<uint8_t>& b, std::string_view s) { b.insert(b.end(), s.begin(), s.end()); }
inline uint32_t get_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
inline uint64_t get_u64(const uint8_t* p) { return (uint64_t{get_u32(p)} << 32) | get_u32(p + 4); }
inline bool has_prefix(const uint8_t* p, size_t n, std::string_view magic) {
  return std::equal(p, p + std::min(n, magic.size()), magic.begin());
}

// "tcp rendezvous 'nccl-id' (rank 1 of 3)": how every error starts.
inline std::string rendezvous_who(const char* transport, const std::string& key, int rank, int world_size) {
  return std::string(transport) + " rendezvous '" + key + "' (rank " + std::to_string(rank) + " of " +
         std::to_string(world_size) + ")";
}

inline void check_args(const std::string& who, int rank, int world_size, const std::string& key,
                       const std::vector<uint8_t>& payload) {
  EMBER_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, who, ": rank ", rank, " is outside a world of size ",
              world_size);
  EMBER_CHECK(!key.empty() && key.size() <= kMaxKeyBytes, who, ": the key must have 1 to ", kMaxKeyBytes,
              " bytes, got ", key.size());
  EMBER_CHECK(rank != 0 || payload.size() <= kRendezvousMaxPayload, who, ": a payload of ", payload.size(),
              " bytes is over the limit of ", kRendezvousMaxPayload, " bytes (1 MiB)");
}

}  // namespace ember::parallel::detail
