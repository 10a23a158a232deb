// Run reports (train/run_report.h): the evaluation file with its thumbnails, the environment, and
// reading a run directory back (train/run_record.h). The page itself: train/report_page.cpp.

#include "run_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "../core/build_info.h"
#include "../core/device.h"
#include "../core/error.h"
#include "../io/atomic_file.h"
#include "../kernels/paths.h"
#include "../core/cpu/parallel.h"
#include "run_dir.h"
#include "run_record.h"

// stb_image_write encodes the thumbnails; a private copy of its implementation for this file.
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#endif
#include <stb_image_write.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace ember::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string base64(const std::string& bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = static_cast<uint8_t>(bytes[i]) << 16 | static_cast<uint8_t>(bytes[i + 1]) << 8 |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += kAlphabet[(v >> k) & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

void append_bytes(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
}

// A number of an event, NaN when it is null or absent; a value of another type is an error.
double number(const json& event, const char* key) {
  const auto it = event.find(key);
  if (it == event.end() || it->is_null()) return NAN;
  if (!it->is_number()) throw std::runtime_error(std::string("'") + key + "' is not a number");
  return it->get<double>();
}

}  // namespace

std::string thumbnail_png(const Tensor& image, const std::vector<double>& mean, const std::vector<double>& std,
                          int64_t max_side) {
  EMBER_CHECK(image.dim() == 3 && (image.size(0) == 1 || image.size(0) == 3),
              "thumbnail_png: expected a (1|3, H, W) "
              "image, got ",
              image.dim(), " dimensions");
  const int64_t c = image.size(0), h = image.size(1), w = image.size(2);
  const std::vector<float> v = image.to(Device::cpu()).to(DType::f32).contiguous().to_vector<float>();
  // Box-downscale by the integer factor that brings the longer side to max_side at most.
  const int64_t f = std::max<int64_t>(1, (std::max(h, w) + max_side - 1) / max_side);
  const int64_t th = std::max<int64_t>(1, h / f), tw = std::max<int64_t>(1, w / f);
  std::vector<uint8_t> pixels(static_cast<size_t>(th * tw * c));
  for (int64_t ch = 0; ch < c; ++ch) {
    const double m = ch < static_cast<int64_t>(mean.size()) ? mean[ch] : 0;
    const double s = ch < static_cast<int64_t>(std.size()) ? std[ch] : 1;
    for (int64_t y = 0; y < th; ++y)
      for (int64_t x = 0; x < tw; ++x) {
        double sum = 0;
        for (int64_t dy = 0; dy < f; ++dy)
          for (int64_t dx = 0; dx < f; ++dx) sum += v[static_cast<size_t>((ch * h + y * f + dy) * w + x * f + dx)];
        const double unit = (sum / static_cast<double>(f * f)) * s + m;  // Normalize undone: [0, 1]
        pixels[static_cast<size_t>((y * tw + x) * c + ch)] =
            static_cast<uint8_t>(std::lround(std::clamp(unit, 0.0, 1.0) * 255));
      }
  }
  std::string png;
  const int ok = stbi_write_png_to_func(append_bytes, &png, static_cast<int>(tw), static_cast<int>(th),
                                        static_cast<int>(c), pixels.data(), static_cast<int>(tw * c));
  EMBER_CHECK(ok != 0 && !png.empty(), "thumbnail_png: PNG encoding failed");
  return png;
}

void write_evaluation_file(const std::string& path, const EvalResult& ev, const std::vector<std::string>& classes,
                           int epoch, int64_t step) {
  json mistakes = json::array();
  for (const Mistake& m : ev.mistakes)
    mistakes.push_back({{"index", m.index},
                        {"true", m.truth},
                        {"predicted", m.predicted},
                        {"confidence", m.confidence},
                        {"png", base64(m.png)}});
  const auto finite = [](double v) { return std::isfinite(v) ? json(v) : json(); };
  json per_class = json::array();
  for (double a : ev.per_class_accuracy) per_class.push_back(finite(a));
  const json j{
      {"epoch", epoch},      {"step", step},       {"accuracy", finite(ev.accuracy)}, {"loss", finite(ev.loss)},
      {"count", ev.count},   {"classes", classes}, {"confusion", ev.confusion},       {"per_class_accuracy", per_class},
      {"mistakes", mistakes}};
  io::write_file_atomic(path, j.dump() + "\n");
}

std::string environment_json(int indent) {
  const BuildInfo& b = build_info();
  const ember::CpuFeatures& cpu = ember::cpu_features();
  const kernels::CpuPaths paths = kernels::cpu_paths();
  const json j{{"version", b.version},
               {"build_type", b.build_type},
               {"compiler", b.compiler},
               {"flavours", b.flavours},
               {"libraries", b.libraries},
               {"cpu",
                {{"model", cpu.model_name},
                 {"vendor", cpu.vendor},
                 {"family", cpu.family},
                 {"model_number", cpu.model},
                 {"stepping", cpu.stepping},
                 {"cores", std::thread::hardware_concurrency()},
                 {"features", ember::feature_list(cpu)},
                 {"widest_isa", ember::isa_name(ember::widest_isa(cpu))}}},
               {"gemm",
                {{"library", paths.blas_library},
                 {"kernels", paths.gemm_kernels},
                 {"kernels_isa", ember::isa_name(paths.gemm_isa)},
                 {"chosen_by", paths.gemm_chosen_by},
                 {"warning", paths.gemm_warning},
                 {"bf16", paths.bf16_gemm},
                 {"conv3x3", paths.conv3x3}}},
               {"threads", get_num_threads()},
               {"cuda_built", cuda_built()},
               {"cuda_devices", cuda_device_descriptions()}};
  return j.dump(indent);
}

RunRecord read_run(const std::string& dir) {
  EMBER_CHECK(fs::exists(dir), "run directory '", dir, "' does not exist");
  EMBER_CHECK(fs::is_directory(dir), "'", dir,
              "' is not a directory: give the directory of a run (ember train --save DIR)");
  const fs::path stream = fs::path(dir) / kMetricsFileName;
  EMBER_CHECK(fs::exists(stream), "'", dir, "' holds no ", kMetricsFileName,
              ": not the directory of a run saved by ember train --save");
  const std::vector<uint8_t> bytes = io::read_file(stream.string());
  const std::string text(bytes.begin(), bytes.end());
  EMBER_CHECK(!text.empty(), stream.string(), " is empty: the run wrote no metrics");
  RunRecord run;
  run.dir = dir;
  bool resumed = false;  // a `config` event came after other events: the next step starts over from there
  size_t start = 0;
  for (int line_no = 1; start < text.size(); ++line_no) {
    const size_t end = text.find('\n', start);
    EMBER_CHECK(end != std::string::npos, stream.string(), " line ", line_no,
                " is cut short (no end of line): the file is truncated or damaged");
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    const json e = json::parse(line, nullptr, /*allow_exceptions=*/false);
    EMBER_CHECK(e.is_object() && e.contains("event") && e["event"].is_string(), stream.string(), " line ", line_no,
                " is not a metrics event (a JSON object with an \"event\"; docs/metrics.md)");
    const std::string event = e["event"].get<std::string>();
    try {
      if (event == "config") {
        resumed = !run.steps.empty() || !run.epochs.empty();
        run.config = e;
        const double spe = number(e, "steps_per_epoch");
        run.steps_per_epoch = std::isfinite(spe) && spe >= 1 ? static_cast<int64_t>(spe) : 1;
      } else if (event == "step") {
        const auto step = static_cast<int64_t>(number(e, "step"));
        const int epoch = static_cast<int>(number(e, "epoch"));
        if (resumed) {
          // What the stream recorded past the checkpoint this run resumed from was trained again.
          run.steps.erase(run.steps.lower_bound(step), run.steps.end());
          run.epochs.erase(run.epochs.lower_bound(epoch), run.epochs.end());
          run.summary = run.diverged = json();
          resumed = false;
        }
        run.steps[step] = StepPoint{.epoch = epoch,
                                    .loss = number(e, "loss"),
                                    .acc = number(e, "acc"),
                                    .lr = number(e, "lr"),
                                    .images_per_sec = number(e, "images_per_sec")};
      } else if (event == "epoch") {
        run.epochs[static_cast<int>(number(e, "epoch"))] = e;
      } else if (event == "summary") {
        run.summary = e;
      } else if (event == "diverged") {
        run.diverged = e;
      }
    } catch (const std::exception& x) {
      EMBER_THROW(stream.string(), " line ", line_no, ": a '", event, "' event whose ", x.what());
    }
  }
  EMBER_CHECK(!run.config.is_null(), stream.string(), " has no config event: not a metrics stream of ember train");
  const fs::path evaluation = fs::path(dir) / kEvaluationFileName;
  if (fs::exists(evaluation)) {
    const std::vector<uint8_t> eb = io::read_file(evaluation.string());
    run.evaluation = json::parse(eb.begin(), eb.end(), nullptr, false);
    EMBER_CHECK(
        run.evaluation.is_object() && run.evaluation.contains("confusion") && run.evaluation.contains("classes"),
        evaluation.string(), " is damaged (not the JSON object ember train writes)");
  }
  return run;
}

void write_run_report(const std::vector<std::string>& run_dirs, const std::string& out) {
  EMBER_CHECK(!run_dirs.empty(), "no run directory given");
  static constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                            "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  std::vector<RunRecord> runs;
  for (const std::string& dir : run_dirs) {
    RunRecord r = read_run(dir);
    fs::path p = fs::path(dir).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    r.name = p.filename().string();
    if (r.name.empty() || r.name == ".") r.name = fs::absolute(p).lexically_normal().filename().string();
    for (const RunRecord& other : runs)
      if (other.name == r.name) r.name += " (" + std::to_string(runs.size() + 1) + ")";
    r.color = kColors[runs.size() % std::size(kColors)];
    runs.push_back(std::move(r));
  }
  EMBER_CHECK(!fs::is_directory(out), "--out '", out, "' is a directory; name a file in it, e.g. '",
              (fs::path(out) / kReportFileName).string(), "'");
  const fs::path folder = fs::path(out).parent_path();
  if (!folder.empty()) {
    std::error_code ec;
    fs::create_directories(folder, ec);
    EMBER_CHECK(!ec, "--out: cannot create directory '", folder.string(), "': ", ec.message());
  }
  // Any run's report.html may be replaced by a report; none of its other files.
  check_output_path("--out", out, run_dirs, kReportFileName);
  io::write_file_atomic(out, report_page(runs));
}

}  // namespace ember::train
