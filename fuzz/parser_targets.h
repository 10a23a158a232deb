#pragma once
// Fuzz targets for the parsers of untrusted files that are not images: the safetensors reader
// (io::parse_safetensors, the weights of every checkpoint and --init-weights) and the checkpoint
// manifest (train::parse_manifest, checkpoint.json). Shared by the libFuzzer binaries
// (fuzz_safetensors, fuzz_manifest: clang, EMBER_FUZZ=ON) and by the in-process mutation driver
// that ctest runs on every build (fuzz/mutation_driver.cpp: ctest fuzz:safetensors,
// fuzz:manifest).
//
// Each target runs one input: the parser either accepts it or throws ember::Error. Anything else
// is a finding, reported by throw Finding: another exception type (std::bad_alloc, a
// std::out_of_range or a json exception leaking out), an accepted input that breaks an invariant
// the parser promises (below), or a parse slower than kSlowInputSeconds (the parsers are linear:
// Note [Linear header parsing] in io/safetensors.cpp). A crash is a finding too, caught by the
// sanitizers in the libFuzzer build and by the signal in the driver's.

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace ember::fuzz {

// An input the target does not accept as handled.
struct Finding : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One input that takes longer than this is a finding.
inline constexpr double kSlowInputSeconds = 1.0;

// io::parse_safetensors; when accepted: the tensors exactly fill the data section, names are
// unique, BOOL bytes are 0 or 1, and a second parse gives the same tensors. Returns the
// rejection's message ("" when the input was accepted): the driver's feedback.
std::string safetensors_one(std::span<const uint8_t> bytes);
// train::parse_manifest; when accepted: the file names stay inside the checkpoint directory,
// step and epoch are non-negative, and a second parse gives the same manifest. Returns as above.
std::string manifest_one(std::span<const uint8_t> bytes);

// Valid inputs to start from: files as ember writes them, and variants the format allows.
std::vector<std::vector<uint8_t>> safetensors_seeds();
std::vector<std::vector<uint8_t>> manifest_seeds();

}  // namespace ember::fuzz
