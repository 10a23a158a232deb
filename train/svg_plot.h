#pragma once
// Plots as inline SVG text for the run report (train/run_report.h): line charts with readable
// ticks, grouped horizontal bar charts and heat maps. Each returns one <svg> element that a page
// can embed as it is (Note [Report plots as SVG] in train/report_page.cpp).
//
// Every plot marks its drawing area with data-check="<id>" (the browser test looks for drawn
// pixels there), and a line plot carries its axis mapping (data-x0/x1/y0/y1 in data units,
// data-px0/px1/py0/py1 in SVG units) so that the page's script can read values back under the
// mouse.

#include <string>
#include <vector>

namespace ember::train::svg {

// How a series is drawn.
enum class Stroke {
  solid,   // 2 px line (dots at the points when there are few)
  dashed,  // 2 px dashed line (dots likewise)
  faint,   // 1 px translucent line: noisy per-step values under the per-epoch ones
};

struct Series {
  std::string label;  // what the hover read-out calls it ("run-a train loss")
  std::string color;  // CSS color
  Stroke stroke = Stroke::solid;
  std::vector<double> x, y;  // same length; a non-finite y breaks the line
};

// One legend entry: a short line in `stroke` and `color`, then the label.
struct LegendEntry {
  std::string label, color;
  Stroke stroke = Stroke::solid;
};

struct LinePlot {
  std::string id;  // data-check id of the drawing area
  std::string title, x_label, y_label;
  std::vector<Series> series{};
  std::vector<LegendEntry> legend{};
  bool percent = false;    // y in [0, 1], ticks as percentages
  bool from_zero = false;  // the y axis starts at 0
  bool log_y = false;      // log10 y axis (all finite y > 0)
  int width = 600, height = 330;
};
std::string line_plot(const LinePlot& plot);

// Horizontal bars grouped by category: values[g][c] is group g's bar for category c (a fraction in
// [0, 1], drawn as a percentage; non-finite: no bar).
struct BarPlot {
  std::string id, title, x_label;
  std::vector<std::string> categories{};
  std::vector<std::string> group_colors{};
  std::vector<std::vector<double>> values{};
  std::vector<LegendEntry> legend{};
  int width = 600;
};
std::string bar_plot(const BarPlot& plot);

// A square matrix of counts, each row shaded by its share of the row's total (rows: true class,
// columns: predicted). Counts are written in the cells and each cell has a tooltip when there
// are at most 30 classes.
struct HeatMap {
  std::string id, title;
  std::vector<std::string> labels{};
  std::vector<std::vector<long long>> counts{};
};
std::string heat_map(const HeatMap& map);

// The values of the axis ticks: about `target` round numbers (1, 2 or 5 times a power of ten)
// covering [lo, hi], inclusive of both ends' nearest ticks.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

// Text with &, <, >, " and ' escaped for HTML and SVG.
std::string escape(const std::string& text);

}  // namespace ember::train::svg
