// SVG plots for the run report (train/svg_plot.h).

#include "svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace ember::train::svg {

namespace {

constexpr const char* kAxisColor = "#444";
constexpr const char* kGridColor = "#e6e6e6";
constexpr const char* kFont = "font-family=\"system-ui, sans-serif\"";
// Approximate width of a character of 12 px text, for laying out legends and labels.
constexpr double kCharWidth = 6.6;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A tick label: as many decimals as the tick step needs; powers of ten as 1e-3 where plain
// decimals would be long.
std::string tick_label(double v, double step, bool percent) {
  char buf[32];
  if (percent) {
    const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step * 100) + 1e-9)));
    std::snprintf(buf, sizeof buf, "%.*f%%", decimals, v * 100);
    return buf;
  }
  if (v == 0) return "0";
  if (step < 1e-3 || std::fabs(v) >= 1e5) {
    // 2e-5, 1.5e-4: scientific for every tick of such an axis, without the exponent's zeros.
    std::snprintf(buf, sizeof buf, "%.3g", v);
    std::string s = buf;
    if (s.find('e') == std::string::npos) {
      std::snprintf(buf, sizeof buf, "%.2e", v);
      s = buf;
      const size_t e = s.find('e');
      std::string mantissa = s.substr(0, e);
      while (mantissa.back() == '0') mantissa.pop_back();
      if (mantissa.back() == '.') mantissa.pop_back();
      s = mantissa + s.substr(e);
    }
    const size_t e = s.find('e');
    std::string exponent = s.substr(e + 1);
    const bool negative = exponent[0] == '-';
    if (exponent[0] == '-' || exponent[0] == '+') exponent.erase(0, 1);
    while (exponent.size() > 1 && exponent[0] == '0') exponent.erase(0, 1);
    return s.substr(0, e) + "e" + (negative ? "-" : "") + exponent;
  }
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string stroke_attributes(Stroke s, const std::string& color) {
  switch (s) {
    case Stroke::solid: return "stroke=\"" + color + "\" stroke-width=\"2\"";
    case Stroke::dashed: return "stroke=\"" + color + "\" stroke-width=\"2\" stroke-dasharray=\"6 4\"";
    case Stroke::faint: return "stroke=\"" + color + "\" stroke-width=\"1\" stroke-opacity=\"0.4\"";
  }
  return "";
}

// The legend as rows of entries starting at (x, y), wrapped at `right`. Returns the SVG and sets
// `rows` to the number of rows used.
std::string legend_svg(const std::vector<LegendEntry>& entries, double x, double y, double right, int& rows) {
  std::string out;
  rows = entries.empty() ? 0 : 1;
  double cx = x;
  for (const LegendEntry& e : entries) {
    const double w = 26 + kCharWidth * static_cast<double>(e.label.size()) + 14;
    if (cx + w > right && cx > x) {
      cx = x;
      y += 18;
      ++rows;
    }
    out += "<line x1=\"" + num(cx) + "\" y1=\"" + num(y - 4) + "\" x2=\"" + num(cx + 20) + "\" y2=\"" + num(y - 4) +
           "\" " +
           (e.stroke == Stroke::faint ? "stroke=\"" + e.color + "\" stroke-width=\"2\" stroke-opacity=\"0.45\""
                                      : stroke_attributes(e.stroke, e.color)) +
           "/>";
    out += "<text x=\"" + num(cx + 26) + "\" y=\"" + num(y) + "\" font-size=\"12\" fill=\"#222\">" + escape(e.label) +
           "</text>";
    cx += w;
  }
  return out;
}

int legend_rows(const std::vector<LegendEntry>& entries, double width) {
  int rows = 0;
  (void)legend_svg(entries, 0, 0, width, rows);
  return rows;
}

std::string svg_open(const std::string& cls, int width, int height, const std::string& extra = "") {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"" + cls + "\" viewBox=\"0 0 " + std::to_string(width) +
         " " + std::to_string(height) + "\" width=\"" + std::to_string(width) + "\" height=\"" +
         std::to_string(height) + "\" " + kFont + extra + ">";
}

std::string title_svg(const std::string& title, double x, double y) {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"15\" font-weight=\"600\" fill=\"#111\">" +
         escape(title) + "</text>";
}

}  // namespace

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / magnitude;
  const double step = (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * magnitude;
  std::vector<double> ticks;
  for (double k = std::floor(lo / step + 1e-9); k <= std::ceil(hi / step - 1e-9); k += 1) ticks.push_back(k * step);
  return ticks;
}

std::string line_plot(const LinePlot& p) {
  // The data's ranges.
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const Series& s : p.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (p.log_y && s.y[i] <= 0)) continue;
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]);
      y_hi = std::max(y_hi, s.y[i]);
    }
  const bool empty = !std::isfinite(x_lo);
  if (empty) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  if (p.from_zero) y_lo = std::min(0.0, y_lo);
  if (p.percent) y_lo = std::max(0.0, y_lo), y_hi = std::min(1.0, std::max(y_hi, y_lo + 0.01));
  if (x_lo == 0 && x_hi <= 0) x_hi = 1;
  const auto ty = [&](double v) { return p.log_y ? std::log10(v) : v; };
  std::vector<double> yt = nice_ticks(ty(y_lo), ty(y_hi), 5);
  std::vector<double> xt = nice_ticks(std::min(0.0, x_lo), x_hi, 6);
  const double X0 = xt.front(), X1 = xt.back();
  double Y0 = yt.front(), Y1 = yt.back();
  if (p.percent) Y0 = std::max(0.0, Y0), Y1 = std::min(1.0, Y1);
  if (p.log_y) {
    // Ticks at the powers of ten (and 2 and 5 times them when the range is short).
    Y0 = std::floor(ty(y_lo));
    Y1 = std::max(Y0 + 1, std::ceil(ty(y_hi)));
    yt.clear();
    for (double e = Y0; e <= Y1 + 1e-9; e += 1) {
      yt.push_back(e);
      if (Y1 - Y0 <= 2 && e < Y1) yt.push_back(e + std::log10(2.0)), yt.push_back(e + std::log10(5.0));
    }
  }

  const int rows = legend_rows(p.legend, p.width - 80);
  const double left = 70, right = p.width - 18, top = 34 + rows * 18 + 8, bottom = p.height - 46;
  const auto px = [&](double x) { return left + (x - X0) / (X1 - X0) * (right - left); };
  const auto py = [&](double y) { return bottom - (ty(y) - Y0) / (Y1 - Y0) * (bottom - top); };

  char mapping[256];
  std::snprintf(mapping, sizeof mapping,
                " id=\"%s\" data-x0=\"%.9g\" data-x1=\"%.9g\" data-y0=\"%.9g\" data-y1=\"%.9g\" data-px0=\"%.1f\" "
                "data-px1=\"%.1f\" data-py0=\"%.1f\" data-py1=\"%.1f\"%s%s",
                escape(p.id).c_str(), X0, X1, Y0, Y1, left, right, bottom, top, p.percent ? " data-percent=\"1\"" : "",
                p.log_y ? " data-log=\"1\"" : "");
  std::string out = svg_open("plot line-plot", p.width, p.height, mapping);
  out += title_svg(p.title, left, 20);
  int unused = 0;
  out += legend_svg(p.legend, left, 42, right, unused);
  // The drawing area, grid and ticks.
  out += "<rect data-check=\"" + escape(p.id) + "\" x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" +
         num(right - left) + "\" height=\"" + num(bottom - top) + "\" fill=\"#fff\" stroke=\"" + kGridColor + "\"/>";
  const double y_step = yt.size() > 1 ? yt[1] - yt[0] : 1;
  for (double v : yt) {
    if (v < Y0 - 1e-9 || v > Y1 + 1e-9) continue;
    const double y = bottom - (v - Y0) / (Y1 - Y0) * (bottom - top);
    out += "<line x1=\"" + num(left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(right) + "\" y2=\"" + num(y) +
           "\" stroke=\"" + kGridColor + "\"/>";
    out += "<line x1=\"" + num(left - 5) + "\" y1=\"" + num(y) + "\" x2=\"" + num(left) + "\" y2=\"" + num(y) +
           "\" stroke=\"" + kAxisColor + "\"/>";
    const std::string label = p.log_y ? tick_label(std::pow(10.0, v), std::pow(10.0, std::floor(v)), false)
                                      : tick_label(v, y_step, p.percent);
    out += "<text x=\"" + num(left - 8) + "\" y=\"" + num(y + 4) + "\" font-size=\"11\" text-anchor=\"end\" fill=\"" +
           kAxisColor + "\">" + label + "</text>";
  }
  const double x_step = xt.size() > 1 ? xt[1] - xt[0] : 1;
  for (double v : xt) {
    const double x = px(v);
    out += "<line x1=\"" + num(x) + "\" y1=\"" + num(bottom) + "\" x2=\"" + num(x) + "\" y2=\"" + num(bottom + 5) +
           "\" stroke=\"" + kAxisColor + "\"/>";
    out += "<text x=\"" + num(x) + "\" y=\"" + num(bottom + 18) + "\" font-size=\"11\" text-anchor=\"middle\" fill=\"" +
           kAxisColor + "\">" + tick_label(v, x_step, false) + "</text>";
  }
  out += "<line x1=\"" + num(left) + "\" y1=\"" + num(bottom) + "\" x2=\"" + num(right) + "\" y2=\"" + num(bottom) +
         "\" stroke=\"" + kAxisColor + "\"/>";
  out += "<line x1=\"" + num(left) + "\" y1=\"" + num(top) + "\" x2=\"" + num(left) + "\" y2=\"" + num(bottom) +
         "\" stroke=\"" + kAxisColor + "\"/>";
  out += "<text x=\"" + num((left + right) / 2) + "\" y=\"" + num(p.height - 8) +
         "\" font-size=\"12\" text-anchor=\"middle\" fill=\"#222\">" + escape(p.x_label) + "</text>";
  out += "<text transform=\"translate(16 " + num((top + bottom) / 2) +
         ") rotate(-90)\" font-size=\"12\" text-anchor=\"middle\" fill=\"#222\">" + escape(p.y_label) + "</text>";
  if (empty)
    out += "<text x=\"" + num((left + right) / 2) + "\" y=\"" + num((top + bottom) / 2) +
           "\" font-size=\"13\" text-anchor=\"middle\" fill=\"#888\">no data recorded</text>";

  // The series: faint ones first, under the others.
  for (int pass = 0; pass < 2; ++pass) {
    for (const Series& s : p.series) {
      if ((s.stroke == Stroke::faint) != (pass == 0)) continue;
      std::string points;
      size_t count = 0;
      const auto flush = [&] {
        if (count > 0)
          out += "<polyline data-series=\"" + escape(s.label) + "\" fill=\"none\" " +
                 stroke_attributes(s.stroke, s.color) + " stroke-linejoin=\"round\" points=\"" + points + "\"/>";
        points.clear();
        count = 0;
      };
      size_t finite = 0;
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i]) || (p.log_y && s.y[i] <= 0)) {
          flush();
          continue;
        }
        points += (count ? " " : "") + num(px(s.x[i])) + "," + num(py(s.y[i]));
        ++count;
        ++finite;
      }
      flush();
      if (s.stroke != Stroke::faint && finite <= 60)
        for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
          if (std::isfinite(s.y[i]) && std::isfinite(s.x[i]) && !(p.log_y && s.y[i] <= 0))
            out += "<circle cx=\"" + num(px(s.x[i])) + "\" cy=\"" + num(py(s.y[i])) + "\" r=\"3\" fill=\"" + s.color +
                   "\"/>";
    }
  }
  out += "</svg>";
  return out;
}

std::string bar_plot(const BarPlot& p) {
  const size_t groups = p.values.size();
  const double bar = groups > 1 ? 9 : 14, gap = 8;
  const double row = bar * static_cast<double>(std::max<size_t>(1, groups)) + gap;
  size_t longest = 0;
  for (const std::string& c : p.categories) longest = std::max(longest, c.size());
  const int rows = legend_rows(p.legend, p.width - 40);
  const double left = std::min(200.0, 16 + kCharWidth * static_cast<double>(longest)), right = p.width - 60;
  const double top = 34 + rows * 18 + 8;
  const double bottom = top + row * static_cast<double>(p.categories.size());
  const int height = static_cast<int>(bottom + 44);
  std::string out = svg_open("plot bar-plot", p.width, height, " id=\"" + escape(p.id) + "\"");
  out += title_svg(p.title, 12, 20);
  int unused = 0;
  out += legend_svg(p.legend, 12, 42, right, unused);
  const auto px = [&](double v) { return left + v * (right - left); };
  for (int t = 0; t <= 100; t += 20) {
    const double x = px(t / 100.0);
    out += "<line x1=\"" + num(x) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x) + "\" y2=\"" + num(bottom) +
           "\" stroke=\"" + (t == 0 ? kAxisColor : kGridColor) + "\"/>";
    out += "<text x=\"" + num(x) + "\" y=\"" + num(bottom + 16) + "\" font-size=\"11\" text-anchor=\"middle\" fill=\"" +
           kAxisColor + "\">" + std::to_string(t) + "%</text>";
  }
  out += "<text x=\"" + num((left + right) / 2) + "\" y=\"" + num(bottom + 36) +
         "\" font-size=\"12\" text-anchor=\"middle\" fill=\"#222\">" + escape(p.x_label) + "</text>";
  out += "<g data-check=\"" + escape(p.id) + "\">";
  for (size_t c = 0; c < p.categories.size(); ++c) {
    const double y0 = top + row * static_cast<double>(c) + gap / 2;
    out += "<text x=\"" + num(left - 6) + "\" y=\"" + num(y0 + (row - gap) / 2 + 4) +
           "\" font-size=\"12\" text-anchor=\"end\" fill=\"#222\">" + escape(p.categories[c]) + "</text>";
    for (size_t g = 0; g < groups; ++g) {
      const double v = c < p.values[g].size() ? p.values[g][c] : NAN;
      if (!std::isfinite(v)) continue;
      const double y = y0 + bar * static_cast<double>(g);
      const std::string color = g < p.group_colors.size() ? p.group_colors[g] : "#1f77b4";
      out += "<rect x=\"" + num(left) + "\" y=\"" + num(y) + "\" width=\"" + num(std::max(0.5, px(v) - left)) +
             "\" height=\"" + num(bar - 1) + "\" fill=\"" + color + "\"/>";
      char value[16];
      std::snprintf(value, sizeof value, "%.1f%%", 100 * v);
      out += "<text x=\"" + num(px(v) + 4) + "\" y=\"" + num(y + bar - 2) + "\" font-size=\"" +
             (groups > 1 ? "9" : "11") + "\" fill=\"#333\">" + value + "</text>";
    }
  }
  out += "</g></svg>";
  return out;
}

std::string heat_map(const HeatMap& m) {
  const size_t n = m.labels.size();
  const double cell = n == 0 ? 30 : std::clamp(440.0 / static_cast<double>(n), 4.0, 42.0);
  const bool text = n <= 30;
  size_t longest = 0;
  for (const std::string& l : m.labels) longest = std::max(longest, l.size());
  const double label_w = text ? std::min(160.0, 12 + kCharWidth * static_cast<double>(longest)) : 24;
  const double left = label_w + 28, top = 52;
  const double grid = cell * static_cast<double>(n);
  const double bottom_labels = text ? label_w * 0.72 + 10 : 24;
  const int width = static_cast<int>(std::max(left + grid + 16, 380.0));
  const int height = static_cast<int>(top + grid + bottom_labels + 26);
  std::string out = svg_open("plot heat-map", width, height, " id=\"" + escape(m.id) + "\"");
  out += title_svg(m.title, 12, 20);
  out += "<text x=\"" + num(left + grid / 2) + "\" y=\"" + num(top - 8) +
         "\" font-size=\"12\" text-anchor=\"middle\" fill=\"#222\">predicted class</text>";
  out += "<text transform=\"translate(14 " + num(top + grid / 2) +
         ") rotate(-90)\" font-size=\"12\" text-anchor=\"middle\" fill=\"#222\">true class</text>";
  out += "<g data-check=\"" + escape(m.id) + "\">";
  for (size_t t = 0; t < n; ++t) {
    long long total = 0;
    for (size_t q = 0; q < n && q < m.counts[t].size(); ++q) total += m.counts[t][q];
    for (size_t q = 0; q < n; ++q) {
      const long long c = q < m.counts[t].size() ? m.counts[t][q] : 0;
      const double share = total > 0 ? static_cast<double>(c) / static_cast<double>(total) : 0;
      // White to dark blue; the diagonal in the same scale as the rest.
      const double s = std::sqrt(share);
      const int r = static_cast<int>(std::lround(255 - s * (255 - 8)));
      const int g = static_cast<int>(std::lround(255 - s * (255 - 69)));
      const int b = static_cast<int>(std::lround(255 - s * (255 - 148)));
      char fill[16];
      std::snprintf(fill, sizeof fill, "#%02x%02x%02x", r, g, b);
      const double x = left + cell * static_cast<double>(q), y = top + cell * static_cast<double>(t);
      out += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(cell) + "\" height=\"" + num(cell) +
             "\" fill=\"" + fill + "\" stroke=\"#fff\" stroke-width=\"" + (n <= 30 ? "1" : "0") + "\">";
      if (text) {
        char tip[64];
        std::snprintf(tip, sizeof tip, ": %lld (%.1f%% of the row)", c, 100 * share);
        out += "<title>true " + escape(m.labels[t]) + ", predicted " + escape(m.labels[q]) + tip + "</title>";
      }
      out += "</rect>";
      if (text && c > 0)
        out += "<text x=\"" + num(x + cell / 2) + "\" y=\"" + num(y + cell / 2 + 4) + "\" font-size=\"" +
               (cell >= 34 ? "11" : "9") + "\" text-anchor=\"middle\" fill=\"" + (s > 0.6 ? "#fff" : "#222") +
               "\" pointer-events=\"none\">" + std::to_string(c) + "</text>";
    }
  }
  out += "</g><rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(grid) + "\" height=\"" + num(grid) +
         "\" fill=\"none\" stroke=\"#bbb\"/>";
  if (text) {
    for (size_t i = 0; i < n; ++i) {
      const double mid = cell * static_cast<double>(i) + cell / 2;
      out += "<text x=\"" + num(left - 6) + "\" y=\"" + num(top + mid + 4) +
             "\" font-size=\"11\" text-anchor=\"end\" fill=\"#222\">" + escape(m.labels[i]) + "</text>";
      out += "<text transform=\"translate(" + num(left + mid + 4) + " " + num(top + grid + 8) +
             ") rotate(-45)\" font-size=\"11\" text-anchor=\"end\" fill=\"#222\">" + escape(m.labels[i]) + "</text>";
    }
  }
  out += "</svg>";
  return out;
}

}  // namespace ember::train::svg
