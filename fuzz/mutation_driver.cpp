// An in-process mutation fuzzer for the parser targets (fuzz/parser_targets.h), built with the
// ordinary compiler in every build so that ctest runs the targets a fixed number of times
// (ctest fuzz:safetensors, fuzz:manifest) without clang or libFuzzer; the libFuzzer binaries
// (EMBER_FUZZ=ON) stay the deep, coverage-guided run.
//
//   ember_fuzz_parsers safetensors|manifest RUNS [SEED]     run RUNS mutated inputs
//   ember_fuzz_parsers safetensors|manifest --seeds DIR     write the seeds (a libFuzzer corpus)
//
// Note [Mutation driver]
// Without coverage feedback, a mutator must stay close to valid inputs to reach past the first
// checks. So it mutates the structure it knows: the header text of a safetensors file (whose
// 8-byte length is then rewritten to match, except in one mutation of eight, so the length
// checks are fuzzed too) and its data section separately; a manifest as text. The mutations are
// libFuzzer's kinds (bit flips, bytes set to boundary values, erased, inserted, duplicated or
// spliced ranges) plus tokens of the formats' own grammar ("dtype", "data_offsets", brackets,
// numbers at type limits). Feedback is the rejection message with its numbers and quoted names
// taken out: an input that is rejected for a reason not seen before, or accepted, joins the
// corpus (at most 4096 inputs), so the run spreads over the parsers' checks the way coverage
// would. The random stream is seeded: a run is reproducible, and a finding prints the input.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "parser_targets.h"

namespace {

using Bytes = std::vector<uint8_t>;

// xorshift64*: small, seeded, the same on every machine.
struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
  bool one_in(size_t n) { return below(n) == 0; }
};

const std::vector<std::string>& tokens() {
  static const std::vector<std::string> t = {
      "\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"__metadata__\"", "\"F32\"", "\"F64\"", "\"BOOL\"", "\"I8\"",
      "\"U8\"", "\"BF16\"", "{", "}", "[", "]", ",", ":", "\"", "\\", "\\u0000", "\\ud800", "0", "1", "-1", "1e400",
      "0.5", "4294967296", "9223372036854775807", "18446744073709551615", "18446744073709551616", "null", "true",
      "[0,0]", "[]", "{}", "\"format\"", "\"ember.checkpoint.v1\"", "\"run\"", "\"step\"", "\"epoch\"", "\"weights\"",
      "\"state\"", "\"best\"", "\"split\"", "\"path\"", "\"bytes\"", "\"crc32\"", "\"../x\"", "\"/etc/passwd\"",
      "\"step-1/../../x\"", "\"\"", "\xff", "\xc3\xa9", " "};
  return t;
}

// One libFuzzer-style mutation of `b` (text or bytes), using `other` for splicing.
void mutate_bytes(Bytes& b, const Bytes& other, Rng& rng) {
  const size_t n = b.size();
  switch (rng.below(8)) {
    case 0:  // flip a bit
      if (n) b[rng.below(n)] ^= static_cast<uint8_t>(1u << rng.below(8));
      break;
    case 1: {  // set a byte to a boundary value or a random one
      static const uint8_t values[] = {0, 1, 0x7f, 0x80, 0xff, '"', '{', '}', '[', ']', ',', ':', '0', '9', '-', '.', 'e'};
      if (n) b[rng.below(n)] = rng.one_in(3) ? static_cast<uint8_t>(rng.next()) : values[rng.below(sizeof values)];
      break;
    }
    case 2: {  // erase a range
      if (!n) break;
      const size_t at = rng.below(n), len = 1 + rng.below(std::min<size_t>(n - at, 16));
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + len));
      break;
    }
    case 3:
    case 4: {  // insert a grammar token
      const std::string& t = tokens()[rng.below(tokens().size())];
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(rng.below(n + 1)), t.begin(), t.end());
      break;
    }
    case 5: {  // duplicate a range
      if (!n) break;
      const size_t at = rng.below(n), len = 1 + rng.below(std::min<size_t>(n - at, 64));
      const Bytes copy(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + len));
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(rng.below(n + 1)), copy.begin(), copy.end());
      break;
    }
    case 6: {  // splice a range of another input
      if (other.empty()) break;
      const size_t at = rng.below(other.size()), len = 1 + rng.below(std::min<size_t>(other.size() - at, 64));
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(rng.below(n + 1)), other.begin() + static_cast<std::ptrdiff_t>(at),
               other.begin() + static_cast<std::ptrdiff_t>(at + len));
      break;
    }
    default: {  // replace a number with a number at a type limit, or one near it
      for (size_t tries = 0; tries < 8 && n; ++tries) {
        size_t at = rng.below(n);
        if (b[at] < '0' || b[at] > '9') continue;
        size_t end = at;
        while (at > 0 && b[at - 1] >= '0' && b[at - 1] <= '9') --at;
        while (end < b.size() && b[end] >= '0' && b[end] <= '9') ++end;
        const std::string old(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(end));
        const std::string t = rng.one_in(2) ? tokens()[20 + rng.below(8)]
                                            : std::to_string(std::max<long long>(
                                                  0, std::atoll(old.substr(0, 15).c_str()) + static_cast<long long>(rng.below(17)) - 8));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(end));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), t.begin(), t.end());
        break;
      }
    }
  }
}

// A safetensors file as its header text and data section, mutated apart (Note [Mutation driver]).
Bytes mutate_safetensors(const Bytes& in, const Bytes& other, Rng& rng) {
  if (in.size() < 8) {
    Bytes b = in;
    mutate_bytes(b, other, rng);
    return b;
  }
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | in[static_cast<size_t>(i)];
  const size_t h = static_cast<size_t>(std::min<uint64_t>(len, in.size() - 8));
  Bytes header(in.begin() + 8, in.begin() + 8 + static_cast<std::ptrdiff_t>(h)), data(in.begin() + 8 + static_cast<std::ptrdiff_t>(h), in.end());
  const size_t rounds = 1 + rng.below(4);
  for (size_t r = 0; r < rounds; ++r) mutate_bytes(rng.one_in(5) ? data : header, other, rng);
  uint64_t new_len = header.size();
  if (rng.one_in(8)) new_len = rng.one_in(2) ? rng.next() >> rng.below(64) : new_len + rng.below(17) - 8;
  Bytes out(8);
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(new_len >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// The rejection message without the numbers and names in it: the "feature" of an input. What
// follows " got " (a value from the input) goes, so does everything from the first quote to the
// last (the names, which may hold quotes), and every word with a character that the messages'
// own words do not have (digits, capitals, '_', '{'...).
std::string rejection_kind(const std::string& message) {
  // "..., got <the value>": the value is the input's, not the check's.
  std::string unquoted = message.substr(0, message.find(" got "));
  // From the first quote to the last: the names (which may hold quotes themselves).
  if (const size_t a = unquoted.find('\''), b = unquoted.rfind('\''); a != std::string::npos)
    unquoted.erase(a, b > a ? b - a + 1 : std::string::npos);
  std::string k, word;
  auto flush = [&] {
    const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || std::strchr("\"():,.-[]", c) != nullptr;
    });
    if (plain) k += word + ' ';
    word.clear();
  };
  for (const char c : unquoted) {
    if (c == ' ') flush();
    else word += c;
  }
  flush();
  return k.substr(0, 80);
}

std::string escaped(const Bytes& b) {
  std::string s;
  for (const uint8_t c : b) {
    char buf[8];
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      s += static_cast<char>(c);
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      s += buf;
    }
  }
  return s;
}

struct Target {
  std::string (*one)(std::span<const uint8_t>);  // the rejection's message, "" when accepted
  std::vector<Bytes> (*seeds)();
  bool structured;  // safetensors: header and data mutated apart
};

int run(const Target& target, const char* name, long long runs, uint64_t seed) {
  Rng rng{seed * 0x9E3779B97F4A7C15ull + 1};
  std::vector<Bytes> corpus = target.seeds();
  std::set<std::string> kinds;
  size_t accepted = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (long long i = 0; i < runs; ++i) {
    const Bytes& base = corpus[rng.below(corpus.size())];
    const Bytes& other = corpus[rng.below(corpus.size())];
    Bytes input;
    if (target.structured) {
      input = mutate_safetensors(base, other, rng);
    } else {
      input = base;
      const size_t rounds = 1 + rng.below(4);
      for (size_t r = 0; r < rounds; ++r) mutate_bytes(input, other, rng);
    }
    if (input.size() > (1u << 16)) input.resize(1u << 16);  // growth by duplication compounds: keep inputs small
    std::string why;
    try {
      why = target.one(input);
    } catch (const ember::fuzz::Finding& f) {
      std::printf("fuzz %s: FINDING after %lld executions (seed %llu): %s\ninput (%zu bytes): %s\n", name, i,
                  static_cast<unsigned long long>(seed), f.what(), input.size(), escaped(input).c_str());
      return 1;
    }
    if (why.empty()) ++accepted;
    if (corpus.size() < 4096 && kinds.insert(why.empty() ? "(accepted)" + std::to_string(input.size() % 7)
                                                          : rejection_kind(why)).second)
      corpus.push_back(std::move(input));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (std::getenv("EMBER_FUZZ_KINDS") != nullptr)
    for (const std::string& k : kinds) std::printf("  %s\n", k.c_str());
  std::printf("fuzz %s: %lld executions in %.1f s (%.0f/s), seed %llu, no finding; %zu accepted, %zu kinds of "
              "rejection, corpus %zu\n",
              name, runs, seconds, static_cast<double>(runs) / seconds, static_cast<unsigned long long>(seed),
              accepted, kinds.size(), corpus.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, Target> targets = {
      {"safetensors", {ember::fuzz::safetensors_one, ember::fuzz::safetensors_seeds, true}},
      {"manifest", {ember::fuzz::manifest_one, ember::fuzz::manifest_seeds, false}}};
  if (argc < 3 || targets.count(argv[1]) == 0) {
    std::fprintf(stderr, "usage: %s safetensors|manifest RUNS [SEED] | --seeds DIR\n", argv[0]);
    return 2;
  }
  const Target& target = targets.at(argv[1]);
  if (std::strcmp(argv[2], "--seeds") == 0 && argc == 4) {
    std::filesystem::create_directories(argv[3]);
    int i = 0;
    for (const Bytes& b : target.seeds()) {
      std::ofstream out(std::filesystem::path(argv[3]) / (std::string(argv[1]) + "-" + std::to_string(i++)),
                        std::ios::binary);
      out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    }
    return 0;
  }
  const long long runs = std::atoll(argv[2]);
  const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
  return run(target, argv[1], runs, seed);
}
