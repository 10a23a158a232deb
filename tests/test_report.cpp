// Run reports (train/run_report.h): the plots' ticks, thumbnails decoded back, the metrics stream
// appended after a crash, a 10-epoch run's page (every element, the size bound, the point budget),
// resumed streams and bad run directories.

#include <ember/data/image.h>
#include <ember/ember.h>
#include <ember/train/report.h>
#include <ember/train/run_report.h>
#include <ember/train/svg_plot.h>
#include <ember/train/terminal_text.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "test_util.h"

using namespace ember;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct TempDir : ember::testing::TempDir {
  TempDir() : ember::testing::TempDir("ember_test_report") {}
};

using testing::read_text;
using testing::write_text;

// The points="..." of the first element tagged `series` after `anchor` (empty when there is none).
// Plain searches: a regex spanning the page ([\s\S]*? in libstdc++ recurses once per character)
// can overflow the stack on a report of a few hundred kilobytes.
std::string points_after(const std::string& html, const std::string& anchor, const std::string& series) {
  const size_t a = html.find(anchor);
  if (a == std::string::npos) return "";
  const size_t s = html.find(series, a);
  if (s == std::string::npos) return "";
  const size_t p = html.find("points=\"", s), end_of_tag = html.find('>', s);
  if (p == std::string::npos || p > end_of_tag) return "";
  const size_t first = p + 8, last = html.find('"', first);
  return last == std::string::npos ? "" : html.substr(first, last - first);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

const std::vector<std::string> kClasses = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                           "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

// The metrics stream of a run: `epochs` epochs of `spe` steps, a step event every step.
std::string metrics_stream(int epochs, int64_t spe, bool summary = true, int64_t first_step = 1, int first_epoch = 1,
                           const std::string& resume = "") {
  std::string out = json{{"event", "config"},       {"model", "cnn"},
                         {"data", "fashion-mnist"}, {"epochs", epochs},
                         {"steps_per_epoch", spe},  {"classes", kClasses},
                         {"resume", resume},        {"environment", json::parse(train::environment_json())}}
                        .dump() +
                    "\n";
  int64_t step = first_step;
  for (int e = first_epoch; e <= epochs; ++e) {
    for (; step <= e * spe; ++step)
      out += json{{"event", "step"},
                  {"epoch", e},
                  {"step", step},
                  {"loss", 2.3 / (1 + 0.01 * step)},
                  {"acc", 1 - 0.9 / (1 + 0.01 * step)},
                  {"lr", 0.003},
                  {"images_per_sec", 4000}}
                 .dump() +
             "\n";
    out += json{{"event", "epoch"},       {"epoch", e},           {"train_loss", 1.0 / e},
                {"train_acc", 0.8},       {"test_loss", 1.2 / e}, {"test_acc", 0.85},
                {"images_per_sec", 4000}, {"seconds", 15.0},      {"loader_wait_seconds", 1.5}}
               .dump() +
           "\n";
  }
  if (summary)
    out += json{{"event", "summary"}, {"test_acc", 0.85},  {"test_loss", 0.3},    {"images_per_sec", 4000},
                {"seconds", 150.0},   {"steps", step - 1}, {"interrupted", false}}
               .dump() +
           "\n";
  return out;
}

// An evaluation with `mistakes` thumbnails of 64x64 RGB noise (PNG's worst case).
train::EvalResult evaluation(int mistakes) {
  train::EvalResult ev;
  ev.accuracy = 0.85;
  ev.loss = 0.3;
  ev.count = 10000;
  ev.confusion.assign(10, std::vector<int64_t>(10, 10));
  for (int c = 0; c < 10; ++c) ev.confusion[c][c] = 910, ev.per_class_accuracy.push_back(0.91);
  std::mt19937 rng(3);
  for (int i = 0; i < mistakes; ++i) {
    std::vector<float> v(3 * 64 * 64);
    for (float& x : v) x = std::normal_distribution<float>(0, 1)(rng);
    const Tensor image = from_vector<float>(v, {3, 64, 64});
    ev.mistakes.push_back({.index = i * 7,
                           .truth = i % 10,
                           .predicted = (i + 3) % 10,
                           .confidence = 0.99 - 0.01 * i,
                           .png = train::thumbnail_png(image, {0.5, 0.5, 0.5}, {0.25, 0.25, 0.25})});
  }
  return ev;
}

}  // namespace

TEST_CASE("report: ticks are round numbers covering the range", "[report]") {
  const std::vector<double> unit = train::svg::nice_ticks(0, 1, 5);
  REQUIRE(unit.size() == 6);
  for (size_t i = 0; i < unit.size(); ++i) CHECK(unit[i] == Approx(0.2 * static_cast<double>(i)).margin(1e-12));
  const std::vector<double> t = train::svg::nice_ticks(0.23, 2.31, 5);
  REQUIRE(t.size() >= 4);
  CHECK(t.front() <= 0.23);
  CHECK(t.back() >= 2.31);
  CHECK(t[1] - t[0] == Approx(0.5));
  CHECK(train::svg::escape("<a href=\"x\">&'") == "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
}

TEST_CASE("report: a thumbnail is the image un-normalized, downscaled, as PNG", "[report]") {
  // A 1x128x96 image: left half 0.0, right half 1.0 after Normalize(mean 0.5, std 0.25) is undone.
  std::vector<float> v(128 * 96);
  for (int y = 0; y < 128; ++y)
    for (int x = 0; x < 96; ++x) v[y * 96 + x] = x < 48 ? -2.0f : 2.0f;
  const std::string png = train::thumbnail_png(from_vector<float>(v, {1, 128, 96}), {0.5}, {0.25}, 64);
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(png.data()), png.size());
  REQUIRE(data::detect_image_format(bytes) == data::ImageFormat::png);
  const Tensor back = data::decode_image_bytes(bytes, "thumbnail", {.mode = data::ImageMode::Gray});
  REQUIRE(back.shape() == Shape{1, 64, 48});  // factor 2
  const std::vector<uint8_t> px = back.contiguous().to_vector<uint8_t>();
  CHECK(px[0] == 0);
  CHECK(px[23] == 0);
  CHECK(px[24] == 255);
  CHECK(px[63 * 48 + 47] == 255);
}

TEST_CASE("report: a resumed run appends to its metrics stream after the last whole line", "[report]") {
  TempDir tmp;
  const fs::path p = tmp.path / "metrics.jsonl";
  write_text(p, "{\"event\":\"config\"}\n{\"event\":\"step\",\"st");  // a crash in the middle of a line
  {
    train::MetricsWriter w(p.string(), train::MetricsOpen::append);
    w.write_line("{\"event\":\"config\",\"resume\":\"x\"}");
  }
  CHECK(read_text(p) == "{\"event\":\"config\"}\n{\"event\":\"config\",\"resume\":\"x\"}\n");
  {
    train::MetricsWriter w(p.string());  // a new run empties it
    w.write_line("{}");
  }
  CHECK(read_text(p) == "{}\n");
}

TEST_CASE("report: a 10-epoch run's page has every element and stays under 2 MB", "[report]") {
  TempDir tmp;
  // The default recipe's shape at batch 64: 938 steps an epoch, a step event each.
  write_text(tmp.path / train::kMetricsFileName, metrics_stream(10, 938));
  train::write_evaluation_file((tmp.path / train::kEvaluationFileName).string(), evaluation(24), kClasses, 10, 9380);
  const fs::path out = tmp.path / train::kReportFileName;
  train::write_run_report({tmp.path.string()}, out.string());
  const std::string html = read_text(out);
  INFO("report size " << html.size());
  CHECK(html.size() <= 2'000'000);
  for (const char* id : {"summary", "loss", "accuracy", "lr", "throughput", "loader-stall", "per-class", "confusion-0",
                         "mistakes-0", "config", "environment", "js-errors"})
    CHECK(count(html, std::string("id=\"") + id + "\"") == 1);
  for (const char* check :
       {"loss", "accuracy", "lr", "throughput", "loader-stall", "per-class", "confusion-0", "mistakes-0"})
    CHECK(count(html, std::string("data-check=\"") + check + "\"") == 1);
  CHECK(count(html, "<img ") == 24);
  CHECK(count(html, "src=\"data:image/png;base64,") == 24);
  CHECK(html.find("http://") == html.find("http://www.w3.org/2000/svg"));  // no fetch from anywhere
  CHECK(html.find("https://") == std::string::npos);
  // Per-step series are averaged into at most 1000 points (9380 steps here).
  const std::regex polyline("data-series=\"train, per step\"[^>]*points=\"([^\"]*)\"");
  size_t seen = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), polyline); it != std::sregex_iterator(); ++it) {
    const size_t points = count((*it)[1].str(), ",");
    CHECK(points > 500);
    CHECK(points <= 1000);
    ++seen;
  }
  CHECK(seen == 2);  // loss and accuracy
  CHECK(html.find("Ankle boot") != std::string::npos);
  CHECK(html.find("finished") != std::string::npos);
}

TEST_CASE("report: several runs overlay their curves with a legend entry each", "[report]") {
  TempDir tmp;
  for (const char* name : {"a", "b"}) {
    fs::create_directories(tmp.path / name);
    write_text(tmp.path / name / train::kMetricsFileName, metrics_stream(2, 20));
  }
  const fs::path out = tmp.path / "compare.html";
  train::write_run_report({(tmp.path / "a").string(), (tmp.path / "b").string()}, out.string());
  const std::string html = read_text(out);
  CHECK(count(html, "data-series=\"a train, epoch mean\"") == 2);  // loss and accuracy
  CHECK(count(html, "data-series=\"b test\"") == 2);
  CHECK(html.find("Comparing 2 runs: a, b") != std::string::npos);
  CHECK(count(html, "id=\"confusion-1\"") == 1);  // "no evaluation recorded" in place of the matrix
}

TEST_CASE("report: the test curve joins the evaluated epochs (--eval-every)", "[report]") {
  TempDir tmp;
  std::string s = metrics_stream(4, 5);
  // Epochs 1 and 3 not evaluated.
  std::string edited;
  for (size_t start = 0; start < s.size();) {
    const size_t end = s.find('\n', start);
    json line = json::parse(s.substr(start, end - start));
    if (line["event"] == "epoch" && (line["epoch"] == 1 || line["epoch"] == 3)) line["test_loss"] = nullptr;
    edited += line.dump() + "\n";
    start = end + 1;
  }
  write_text(tmp.path / train::kMetricsFileName, edited);
  const fs::path out = tmp.path / "r.html";
  train::write_run_report({tmp.path.string()}, out.string());
  const std::string html = read_text(out);
  const std::string test_points = points_after(html, "id=\"loss\"", "data-series=\"test\"");
  REQUIRE(!test_points.empty());
  CHECK(count(test_points, ",") == 2);              // epochs 2 and 4, one line
  CHECK(count(html, "data-series=\"test\"") == 2);  // loss and accuracy: one polyline each
}

TEST_CASE("report: a resumed stream replaces what was recorded past the checkpoint", "[report]") {
  TempDir tmp;
  // 2 epochs of 10 steps, then a crash at step 27 (no summary); resumed from the checkpoint at
  // step 20 and stopped by --max-steps at step 24.
  std::string s = metrics_stream(2, 10, false);
  for (int step = 21; step <= 27; ++step)
    s += json{{"event", "step"}, {"epoch", 3}, {"step", step}, {"loss", 9.0}}.dump() + "\n";
  s += json{{"event", "config"}, {"steps_per_epoch", 10}, {"resume", "run"}}.dump() + "\n";
  for (int step = 21; step <= 24; ++step)
    s += json{{"event", "step"}, {"epoch", 3}, {"step", step}, {"loss", 0.5}}.dump() + "\n";
  s += json{{"event", "summary"}, {"steps", 24}}.dump() + "\n";
  write_text(tmp.path / train::kMetricsFileName, s);
  const fs::path out = tmp.path / "r.html";
  train::write_run_report({tmp.path.string()}, out.string());
  const std::string html = read_text(out);
  // The per-step loss polyline: 24 points, the last at epoch 2.4, and no 9.0 left.
  const std::string points = points_after(html, "id=\"loss\"", "data-series=\"train, per step\"");
  REQUIRE(!points.empty());
  CHECK(count(points, ",") == 24);
  CHECK(html.find("2.40 epochs") != std::string::npos);
}

TEST_CASE("report: bad run directories are refused by name and nothing is written", "[report]") {
  TempDir tmp;
  const fs::path out = tmp.path / "out.html";
  const auto refused = [&](const std::string& dir, const std::string& message) {
    INFO(dir);
    CHECK_THROWS_WITH(train::write_run_report({dir}, out.string()), Catch::Contains(message));
    CHECK_FALSE(fs::exists(out));
  };
  refused((tmp.path / "missing").string(), "run directory '" + (tmp.path / "missing").string() + "' does not exist");
  fs::create_directories(tmp.path / "empty");
  refused((tmp.path / "empty").string(), "holds no metrics.jsonl");
  fs::create_directories(tmp.path / "zero");
  write_text(tmp.path / "zero" / "metrics.jsonl", "");
  refused((tmp.path / "zero").string(), "is empty");
  fs::create_directories(tmp.path / "cut");
  const std::string whole = metrics_stream(1, 5);
  write_text(tmp.path / "cut" / "metrics.jsonl", whole.substr(0, whole.size() - 20));
  refused((tmp.path / "cut").string(), "line 8 is cut short (no end of line): the file is truncated or damaged");
  fs::create_directories(tmp.path / "garbage");
  write_text(tmp.path / "garbage" / "metrics.jsonl", "{\"event\":\"config\"}\nnot json\n");
  refused((tmp.path / "garbage").string(), "line 2 is not a metrics event");
  fs::create_directories(tmp.path / "noconfig");
  write_text(tmp.path / "noconfig" / "metrics.jsonl", "{\"event\":\"step\",\"step\":1,\"epoch\":1}\n");
  refused((tmp.path / "noconfig").string(), "has no config event");
  fs::create_directories(tmp.path / "badtype");
  write_text(tmp.path / "badtype" / "metrics.jsonl", "{\"event\":\"config\"}\n{\"event\":\"step\",\"step\":\"x\"}\n");
  refused((tmp.path / "badtype").string(), "line 2: a 'step' event whose 'step' is not a number");
}

TEST_CASE("terminal text: names from files print without control bytes, commands quote them", "[report]") {
  // Note [Printing untrusted names]: an escape sequence in a class name is printed as text.
  CHECK(train::printable("cat\x1b]0;owned\x07") == "cat\\e]0;owned\\x07");
  CHECK(train::printable("a\rb\tc\x7f") == "a\\rb\\tc\\x7f");
  CHECK(train::printable("caf\xc3\xa9 a\\b") == "caf\xc3\xa9 a\\b");  // UTF-8 and backslashes as they are
  CHECK(train::printable("one\ntwo") == "one\\ntwo");
  CHECK(train::printable("one\ntwo\x1b", train::Newlines::keep) == "one\ntwo\\e");
  CHECK(train::shell_quote("runs/a-1.b") == "runs/a-1.b");
  CHECK(train::shell_quote("") == "''");
  CHECK(train::shell_quote("my run") == "'my run'");
  CHECK(train::shell_quote("it's") == "'it'\\''s'");
  CHECK(train::shell_quote("x\x1b[2J'\\") == "$'x\\e[2J\\'\\\\'");
  // What bash makes of each quoted word is the name, byte for byte.
  for (const std::string name : {"plain", "my run", "it's", "$(touch pwned)", "a;b|c&d>e", "`x`", "x\x1b[2J'\\y",
                                 "tab\tnew\nline", "*?[]~{}", ""}) {
    const std::string command = "printf %s " + train::shell_quote(name);
    std::FILE* p = ::popen(("bash -c " + train::shell_quote(command)).c_str(), "r");
    REQUIRE(p != nullptr);
    std::string out;
    for (int c; (c = std::fgetc(p)) != EOF;) out += static_cast<char>(c);
    CHECK(::pclose(p) == 0);
    CHECK(out == name);
    CHECK(train::printable(train::shell_quote(name)).find('\x1b') == std::string::npos);
  }
}
