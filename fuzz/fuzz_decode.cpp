// libFuzzer target: image decoding + the ImageNet transforms, fused and composed.
//
//   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DEMBER_FUZZ=ON
//   cmake --build build-fuzz --target fuzz_decode -j2
//   python3 fuzz/make_seed_corpus.py fuzz-corpus && build-fuzz/fuzz/fuzz_decode fuzz-corpus -max_total_time=300
//
// The first input byte picks the options (RGB or gray, draft decode size, the transform's sizes,
// a flip); the rest are the file's bytes. For each input: probe_image_bytes and decode_image_bytes
// must either succeed or throw ember::Error (never crash, leak, overflow or hang: ASan + UBSan),
// a decoded image must have the shape the header promised (up to the draft scale), and the fused
// pipeline must equal the composed transforms bit for bit on it. Anything else aborts.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include <ember/data/image.h>
#include <ember/data/image_pipeline.h>
#include <ember/data/image_transforms.h>

using namespace ember;
using namespace ember::data;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_decode: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t opt = data[0];
  const std::span<const uint8_t> bytes(data + 1, size - 1);
  DecodeOptions o;
  o.mode = (opt & 1) ? ImageMode::Gray : ImageMode::RGB;
  o.max_pixels = int64_t{1} << 22;  // keep each run small: 4M pixels
  if (opt & 2) o.min_height = o.min_width = 1 + (opt >> 4);
  ImageInfo info;
  bool probed = false;
  try {
    info = probe_image_bytes(bytes, "fuzz");
    probed = true;
  } catch (const Error&) {
  }
  Tensor img;
  try {
    img = decode_image_bytes(bytes, "fuzz", o);
  } catch (const Error&) {
    return 0;
  }
  const int64_t c = o.mode == ImageMode::Gray ? 1 : 3;
  if (img.dim() != 3 || img.size(0) != c || img.size(1) < 1 || img.size(2) < 1) fail("decoded shape");
  if (probed && (opt & 2) == 0 && info.format != ImageFormat::unknown &&
      (img.size(1) != info.height || img.size(2) != info.width))
    fail("decoded size differs from the header's");
  // The transforms, fused against composed.
  const int64_t resize = 1 + ((opt >> 2) & 7) * 5, crop = 1 + ((opt >> 5) & 7) * 4;
  const std::vector<AnyTransform> tfs{
      Compose{Resize(resize), CenterCrop(crop), RandomHorizontalFlip(), ToTensor(), Normalize({0.5}, {0.25})},
      Compose{RandomResizedCrop(crop), RandomHorizontalFlip(), ToTensor()}};
  for (const AnyTransform& tf : tfs) {
    SampleRng a = sample_rng(opt, 0, size), b = a;
    const Tensor composed = tf->apply(img, a);
    const ImagePipeline p = plan_image_pipeline(tf);
    const auto [oh, ow] = fused_output_size(p, img.size(1), img.size(2));
    Tensor fused = empty({c, oh, ow});
    run_fused_pipeline(p, img, b, data::detail::to_tensor_lut(p.normalize, c), fused.data_ptr<float>());
    if (composed.shape() != fused.shape()) fail("fused shape");
    if (std::memcmp(composed.contiguous().data(), fused.data(), static_cast<size_t>(fused.numel()) * 4) != 0)
      fail("fused differs from composed");
  }
  return 0;
}
