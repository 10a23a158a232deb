// The --quick tree of 03_imagefolder: PNG and JPEG files written with stb_image_write, 3 classes
// ("sunset": warm, "forest": green, "sea": blue), each picture a gradient with noise and a few
// blobs, 40..80 pixels a side, so the classes are learnable in a few steps yet the files are real.

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <ember/core/error.h>

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif
#include <stb_image_write.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

void make_demo_tree(const std::filesystem::path& root, int per_class) {
  namespace fs = std::filesystem;
  fs::remove_all(root);
  std::mt19937 rng(3);
  const char* names[] = {"forest", "sea", "sunset"};
  const int tint[3][3] = {{40, 150, 50}, {30, 80, 170}, {200, 110, 40}};
  for (int c = 0; c < 3; ++c) {
    fs::create_directories(root / names[c]);
    for (int i = 0; i < per_class; ++i) {
      const int w = 40 + static_cast<int>(rng() % 41), h = 40 + static_cast<int>(rng() % 41);
      std::vector<unsigned char> px(static_cast<size_t>(w) * h * 3);
      const int bx = static_cast<int>(rng() % w), by = static_cast<int>(rng() % h), br = 5 + static_cast<int>(rng() % 10);
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
          for (int k = 0; k < 3; ++k) {
            int v = tint[c][k] + (y * 60) / h - 30 + static_cast<int>(rng() % 50) - 25;
            if ((x - bx) * (x - bx) + (y - by) * (y - by) < br * br) v = 255 - v;  // a blob
            px[(static_cast<size_t>(y) * w + x) * 3 + k] = static_cast<unsigned char>(v < 0 ? 0 : v > 255 ? 255 : v);
          }
      const std::string base = (root / names[c] / ("pic" + std::to_string(i))).string();
      const int ok = i % 2 ? stbi_write_jpg((base + ".jpg").c_str(), w, h, 3, px.data(), 90)
                           : stbi_write_png((base + ".png").c_str(), w, h, 3, px.data(), w * 3);
      EMBER_CHECK(ok != 0, "cannot write ", base);
    }
  }
}
