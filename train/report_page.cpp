// The run report's HTML page (train/run_record.h): curves, per-class accuracy, confusion
// matrices, the most confident mistakes, configuration and environment, for one run or several
// compared.
//
// Note [Report plots as SVG]
// The plots are SVG written here in C++ (train/svg_plot.h), not drawn by a script in the browser:
// the page shows every plot with scripts disabled, in any viewer that renders SVG, and printed;
// the drawing code is tested without a browser, and the data is not stored twice (once as data,
// once as drawing). Per-step series are averaged into at most kMaxPoints points, which bounds the
// page size whatever the run's length (a 10-epoch run's report is well under 2 MB). The one
// script adds what needs a mouse: a read-out of every curve's value under the pointer, from the
// polyline points and the axis mapping each plot carries. It also records JavaScript errors in the
// page (shown at the top, and as data-js-errors on <html>) and sets data-report-ready="yes" when it
// has run, which the browser test (tests/cli/report_browser.py) checks.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "../core/build_info.h"
#include "run_record.h"
#include "svg_plot.h"

namespace ember::train {

using json = nlohmann::json;
using svg::escape;

namespace {

constexpr size_t kMaxPoints = 1000;

constexpr const char* kStyle = R"css(
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, sans-serif; color: #1a1a1a; background: #f4f5f7; margin: 0; }
main { max-width: 1260px; margin: 0 auto; padding: 18px 20px 40px; }
h1 { font-size: 24px; margin: 4px 0 2px; }
h2 { font-size: 18px; margin: 28px 0 10px; border-bottom: 1px solid #d8dbe0; padding-bottom: 4px; }
.sub { color: #555; margin: 0 0 12px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { background: #fff; border: 1px solid #dde0e5; border-radius: 8px; padding: 10px 14px; position: relative; }
.run-card { border-left: 6px solid var(--run); min-width: 260px; }
.run-card .name { font-weight: 600; font-size: 16px; }
.run-card .big { font-size: 26px; font-weight: 600; }
.run-card .status { font-size: 12px; padding: 1px 7px; border-radius: 10px; background: #e8f3e8; color: #24622a; }
.run-card .status.bad { background: #fbe9e9; color: #8a1f1f; }
.run-card .status.warn { background: #fff4dc; color: #7a5300; }
.run-card table td { padding: 0 12px 0 0; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(612px, 1fr)); gap: 12px; }
.plots .card { padding: 6px; }
svg.plot { display: block; max-width: 100%; height: auto; }
.plots svg.plot { width: 100%; }
.fit { display: inline-block; }
.tip { position: absolute; pointer-events: none; background: rgba(255,255,255,0.96); border: 1px solid #bbb;
       border-radius: 4px; padding: 4px 7px; font-size: 12px; white-space: nowrap; box-shadow: 0 1px 4px rgba(0,0,0,.15); }
.pair { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
.mistakes { display: grid; grid-template-columns: repeat(auto-fill, 96px); gap: 10px; max-width: 640px; }
.mistake { margin: 0; font-size: 11px; line-height: 1.3; text-align: center; }
.mistake img { width: 84px; height: 84px; object-fit: contain; image-rendering: pixelated; border: 1px solid #ccc;
               background: #000; display: block; margin: 0 auto 3px; }
.mistake .pred { color: #b01c1c; font-weight: 600; }
.mistake .idx { color: #777; }
table.kv { border-collapse: collapse; background: #fff; font-size: 13px; }
table.kv th, table.kv td { border: 1px solid #dde0e5; padding: 3px 8px; text-align: left; vertical-align: top; }
table.kv th { background: #f0f2f5; font-weight: 600; }
table.kv tr.differs td { background: #fff7d6; }
pre { background: #fff; border: 1px solid #dde0e5; padding: 8px; overflow: auto; max-height: 320px; font-size: 12px; }
.note { color: #666; font-style: italic; }
#js-errors { background: #fbe9e9; color: #8a1f1f; border: 1px solid #e0a0a0; padding: 8px; border-radius: 6px; }
footer { color: #777; font-size: 12px; margin-top: 30px; }
)css";

// Installed first, so that it sees errors in every later script.
constexpr const char* kErrorScript = R"js(
window.addEventListener('error', function (e) {
  var root = document.documentElement;
  root.setAttribute('data-js-errors', String(Number(root.getAttribute('data-js-errors') || 0) + 1));
  var box = document.getElementById('js-errors');
  if (box) { box.hidden = false; box.textContent += 'JavaScript error: ' + e.message + ' (line ' + e.lineno + ')\n'; }
});
)js";

constexpr const char* kScript = R"js(
(function () {
  'use strict';
  function fmt(v, percent) {
    if (percent) return (v * 100).toFixed(2) + '%';
    var a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
    var s = v.toPrecision(4);
    return s.indexOf('.') >= 0 ? s.replace(/0+$/, '').replace(/\.$/, '') : s;
  }
  function esc(s) { return s.replace(/[&<>"]/g, function (c) { return '&#' + c.charCodeAt(0) + ';'; }); }
  var NS = 'http://www.w3.org/2000/svg';
  // The value read-out: every series' point nearest to the pointer, read back through the axis
  // mapping the plot carries (train/svg_plot.h).
  document.querySelectorAll('svg.line-plot').forEach(function (svg) {
    var d = svg.dataset, X0 = +d.x0, X1 = +d.x1, Y0 = +d.y0, Y1 = +d.y1;
    var PX0 = +d.px0, PX1 = +d.px1, PY0 = +d.py0, PY1 = +d.py1, percent = d.percent === '1', log = d.log === '1';
    var series = {};
    svg.querySelectorAll('polyline[data-series]').forEach(function (line) {
      var name = line.getAttribute('data-series');
      var s = series[name] || (series[name] = {color: line.getAttribute('stroke'), xs: [], ys: []});
      line.getAttribute('points').trim().split(/\s+/).forEach(function (p) {
        var c = p.split(',');
        s.xs.push(Number(c[0]));
        s.ys.push(Number(c[1]));
      });
    });
    var guide = document.createElementNS(NS, 'line');
    guide.setAttribute('y1', PY1);
    guide.setAttribute('y2', PY0);
    guide.setAttribute('stroke', '#888');
    guide.setAttribute('stroke-dasharray', '3 3');
    guide.style.display = 'none';
    svg.appendChild(guide);
    var tip = document.createElement('div');
    tip.className = 'tip';
    tip.hidden = true;
    svg.parentNode.appendChild(tip);
    svg.addEventListener('mousemove', function (ev) {
      var m = svg.getScreenCTM();
      if (!m) return;
      var pt = svg.createSVGPoint();
      pt.x = ev.clientX;
      pt.y = ev.clientY;
      var p = pt.matrixTransform(m.inverse());
      if (p.x < PX0 || p.x > PX1 || p.y < PY1 || p.y > PY0) { guide.style.display = 'none'; tip.hidden = true; return; }
      guide.setAttribute('x1', p.x);
      guide.setAttribute('x2', p.x);
      guide.style.display = '';
      var rows = ['<b>epoch ' + (X0 + (p.x - PX0) / (PX1 - PX0) * (X1 - X0)).toFixed(2) + '</b>'];
      Object.keys(series).forEach(function (name) {
        var s = series[name], lo = 0, hi = s.xs.length - 1;
        if (hi < 0) return;
        while (lo < hi) { var mid = (lo + hi) >> 1; if (s.xs[mid] < p.x) lo = mid + 1; else hi = mid; }
        if (lo > 0 && Math.abs(s.xs[lo - 1] - p.x) < Math.abs(s.xs[lo] - p.x)) lo--;
        if (Math.abs(s.xs[lo] - p.x) > 15) return;
        var t = Y0 + (PY0 - s.ys[lo]) / (PY0 - PY1) * (Y1 - Y0);
        rows.push('<span style="color:' + s.color + '">&#9632;</span> ' + esc(name) + ': ' + fmt(log ? Math.pow(10, t) : t, percent));
      });
      tip.innerHTML = rows.join('<br>');
      tip.hidden = false;
      var box = svg.parentNode.getBoundingClientRect();
      tip.style.left = (ev.clientX - box.left + 14) + 'px';
      tip.style.top = (ev.clientY - box.top + 10) + 'px';
    });
    svg.addEventListener('mouseleave', function () { guide.style.display = 'none'; tip.hidden = true; });
  });
  // Where each checked element is on the page (x,y,width,height in CSS pixels), for tools that
  // look at a screenshot of it.
  document.querySelectorAll('[data-check]').forEach(function (el) {
    var r = el.getBoundingClientRect();
    el.setAttribute('data-box', [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]
      .map(function (v) { return Math.round(v); }).join(','));
  });
  var root = document.documentElement;
  root.setAttribute('data-page-height', String(Math.ceil(root.scrollHeight)));
  root.setAttribute('data-report-ready', 'yes');
})();
)js";

double number(const json& event, const char* key) {
  const auto it = event.find(key);
  return it != event.end() && it->is_number() ? it->get<double>() : NAN;
}

std::string text_of(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

std::string format(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string duration(double s) {
  if (!std::isfinite(s)) return "?";
  if (s < 60) return format("%.1f s", s);
  if (s < 3600)
    return std::to_string(static_cast<int>(s) / 60) + " min " + std::to_string(static_cast<int>(s) % 60) + " s";
  return std::to_string(static_cast<int>(s) / 3600) + " h " + std::to_string(static_cast<int>(s) % 3600 / 60) + " min";
}

// A per-step field, averaged into at most kMaxPoints points; x in epochs (step / steps per epoch).
svg::Series step_series(const RunRecord& r, double StepPoint::*field) {
  svg::Series s;
  const size_t n = r.steps.size();
  const size_t bucket = std::max<size_t>(1, (n + kMaxPoints - 1) / kMaxPoints);
  double sx = 0, sy = 0;
  size_t count = 0, finite = 0;
  const double spe = static_cast<double>(r.steps_per_epoch);
  for (auto it = r.steps.begin(); it != r.steps.end(); ++it) {
    sx += static_cast<double>(it->first) / spe;
    const double v = it->second.*field;
    if (std::isfinite(v)) sy += v, ++finite;
    if (++count == bucket || std::next(it) == r.steps.end()) {
      s.x.push_back(sx / static_cast<double>(count));
      s.y.push_back(finite ? sy / static_cast<double>(finite) : NAN);
      sx = sy = 0;
      count = finite = 0;
    }
  }
  return s;
}

// Where epoch e ends on the x axis (in epochs): e, or earlier for an epoch that --max-steps or an
// interrupt cut short.
double epoch_x(const RunRecord& r, int e) {
  int64_t last = -1;
  for (const auto& [step, p] : r.steps)
    if (p.epoch == e) last = step;
  if (last < 0) return e;
  return std::min<double>(e, static_cast<double>(last) / static_cast<double>(r.steps_per_epoch));
}

// An epoch field (or numerator / denominator of two) per epoch. Epochs without the value (not
// evaluated: --eval-every) are left out, so that the line joins the evaluated ones.
svg::Series epoch_series(const RunRecord& r, const char* key, const char* divide_by = nullptr) {
  svg::Series s;
  for (const auto& [e, event] : r.epochs) {
    double v = number(event, key);
    if (divide_by) v = v / number(event, divide_by);
    if (!std::isfinite(v)) continue;
    s.x.push_back(epoch_x(r, e));
    s.y.push_back(v);
  }
  return s;
}

struct Style {
  std::string label;
  svg::Stroke stroke;
};

// One run: its series in its color, with the style's label. Several: a legend entry per run and
// one per style in gray.
std::vector<svg::LegendEntry> legend(const std::vector<RunRecord>& runs, const std::vector<Style>& styles) {
  std::vector<svg::LegendEntry> out;
  if (runs.size() > 1)
    for (const RunRecord& r : runs) out.push_back({r.name, r.color, svg::Stroke::solid});
  for (const Style& s : styles) out.push_back({s.label, runs.size() > 1 ? "#666" : runs[0].color, s.stroke});
  return out;
}

svg::Series named(svg::Series s, const RunRecord& r, const std::vector<RunRecord>& runs, const Style& style) {
  s.label = runs.size() > 1 ? r.name + " " + style.label : style.label;
  s.color = r.color;
  s.stroke = style.stroke;
  return s;
}

std::string figure(const std::string& svg_text) { return "<div class=\"card\">" + svg_text + "</div>"; }

std::string curves(const std::vector<RunRecord>& runs) {
  const Style per_step{"train, per step", svg::Stroke::faint}, train{"train, epoch mean", svg::Stroke::solid},
      test{"test", svg::Stroke::dashed};
  std::string out = "<div class=\"plots\">";

  svg::LinePlot loss{.id = "loss", .title = "Loss", .x_label = "epoch", .y_label = "cross-entropy loss"};
  svg::LinePlot acc{.id = "accuracy", .title = "Accuracy", .x_label = "epoch", .y_label = "accuracy"};
  acc.percent = true;
  loss.from_zero = true;
  for (const RunRecord& r : runs) {
    loss.series.push_back(named(step_series(r, &StepPoint::loss), r, runs, per_step));
    loss.series.push_back(named(epoch_series(r, "train_loss"), r, runs, train));
    loss.series.push_back(named(epoch_series(r, "test_loss"), r, runs, test));
    acc.series.push_back(named(step_series(r, &StepPoint::acc), r, runs, per_step));
    acc.series.push_back(named(epoch_series(r, "train_acc"), r, runs, train));
    acc.series.push_back(named(epoch_series(r, "test_acc"), r, runs, test));
  }
  loss.legend = acc.legend = legend(runs, {per_step, train, test});
  out += figure(svg::line_plot(loss)) + figure(svg::line_plot(acc));

  const Style lr_style{"learning rate (param group 0)", svg::Stroke::solid};
  svg::LinePlot lr{.id = "lr", .title = "Learning-rate schedule", .x_label = "epoch", .y_label = "learning rate"};
  lr.from_zero = true;
  for (const RunRecord& r : runs) lr.series.push_back(named(step_series(r, &StepPoint::lr), r, runs, lr_style));
  lr.legend = legend(runs, {lr_style});
  out += figure(svg::line_plot(lr));

  const Style ips_step{"running mean in the epoch", svg::Stroke::faint}, ips_epoch{"epoch", svg::Stroke::solid};
  svg::LinePlot ips{.id = "throughput", .title = "Training throughput", .x_label = "epoch", .y_label = "images/s"};
  ips.from_zero = true;
  for (const RunRecord& r : runs) {
    ips.series.push_back(named(step_series(r, &StepPoint::images_per_sec), r, runs, ips_step));
    ips.series.push_back(named(epoch_series(r, "images_per_sec"), r, runs, ips_epoch));
  }
  ips.legend = legend(runs, {ips_step, ips_epoch});
  out += figure(svg::line_plot(ips));

  const Style stall_style{"time waiting for the data loader", svg::Stroke::solid};
  svg::LinePlot stall{.id = "loader-stall",
                      .title = "Data-loader stall",
                      .x_label = "epoch",
                      .y_label = "share of the epoch's training time"};
  stall.percent = true;
  stall.from_zero = true;
  for (const RunRecord& r : runs)
    stall.series.push_back(named(epoch_series(r, "loader_wait_seconds", "seconds"), r, runs, stall_style));
  stall.legend = legend(runs, {stall_style});
  out += figure(svg::line_plot(stall));
  return out + "</div>";
}

std::string run_card(const RunRecord& r) {
  std::string status = "finished", cls = "";
  const double last_step = r.steps.empty() ? NAN : static_cast<double>(r.steps.rbegin()->first);
  if (!r.diverged.is_null()) {
    status = "diverged at step " + text_of(r.diverged["step"]);
    cls = " bad";
  } else if (r.summary.is_null()) {
    status = "unfinished (no summary: still running, or stopped by a crash)";
    cls = " warn";
  } else if (r.summary.value("interrupted", false)) {
    status = "interrupted at step " + text_of(r.summary["steps"]);
    cls = " warn";
  } else if (r.summary.value("stop_reason", "") == "early_stop") {
    status = "stopped early at step " + text_of(r.summary["steps"]) + ": " + text_of(r.summary["stop_detail"]);
  } else if (r.summary.value("stop_reason", "") == "max_steps") {
    status = "stopped by --max-steps at step " + text_of(r.summary["steps"]);
  }
  double test_acc = r.summary.is_null() ? NAN : number(r.summary, "test_acc");
  double test_loss = r.summary.is_null() ? NAN : number(r.summary, "test_loss");
  if (!std::isfinite(test_acc) && !r.evaluation.is_null()) {
    test_acc = number(r.evaluation, "accuracy");
    test_loss = number(r.evaluation, "loss");
  }
  const json& c = r.config;
  std::string out = "<div class=\"card run-card\" style=\"--run:" + r.color + "\">";
  out += "<div class=\"name\">" + escape(r.name) + "</div>";
  out += "<div><span class=\"status" + cls + "\">" + escape(status) + "</span></div>";
  out += "<div class=\"big\">" + (std::isfinite(test_acc) ? format("%.2f%%", 100 * test_acc) : "&ndash;") +
         " <span style=\"font-size:13px;font-weight:400;color:#555\">test accuracy</span></div><table>";
  const auto row = [&](const std::string& k, const std::string& v) {
    out += "<tr><td>" + k + "</td><td>" + escape(v) + "</td></tr>";
  };
  row("model", text_of(c["model"]) + " on " + text_of(c["data"]));
  row("test loss", std::isfinite(test_loss) ? format("%.4f", test_loss) : "-");
  // --accum-steps: the batch a step sees.
  if (c.is_object() && c.value("accum_steps", 1) > 1)
    row("batch", text_of(c["batch_size"]) + " x " + text_of(c["accum_steps"]) + " accumulated per step");
  if (c.is_object() && c.contains("scheduler")) row("schedule", text_of(c["scheduler"]));
  row("steps", std::isfinite(last_step)
                   ? format("%.0f", last_step) + " (" +
                         format("%.2f", last_step / static_cast<double>(r.steps_per_epoch)) + " epochs)"
                   : "-");
  if (!r.summary.is_null()) {
    row("time", duration(number(r.summary, "seconds")));
    row("throughput", format("%.0f images/s", number(r.summary, "images_per_sec")));
  }
  row("directory", r.dir);
  return out + "</table></div>";
}

std::string per_class(const std::vector<RunRecord>& runs) {
  svg::BarPlot p{
      .id = "per-class", .title = "Per-class test accuracy", .x_label = "accuracy on the test images of the class"};
  for (const RunRecord& r : runs) {
    if (r.evaluation.is_null()) continue;
    if (p.categories.empty())
      for (const json& c : r.evaluation["classes"]) p.categories.push_back(text_of(c));
    std::vector<double> v;
    for (const json& a : r.evaluation["per_class_accuracy"]) v.push_back(a.is_number() ? a.get<double>() : NAN);
    p.values.push_back(v);
    p.group_colors.push_back(r.color);
    if (runs.size() > 1) p.legend.push_back({r.name, r.color, svg::Stroke::solid});
  }
  if (p.values.empty())
    return "<p class=\"note\" id=\"per-class\">No evaluation recorded (no evaluation.json in the run directory).</p>";
  return "<div class=\"card fit\">" + svg::bar_plot(p) + "</div>";
}

std::string evaluation_section(const RunRecord& r, size_t i) {
  const std::string id = std::to_string(i);
  std::string out = "<h2>" + (std::string("Final evaluation: ") + escape(r.name)) + "</h2>";
  if (r.evaluation.is_null())
    return out + "<p class=\"note\" id=\"confusion-" + id + "\">No evaluation recorded for this run (no " +
           "evaluation.json: the run was interrupted before one, or saved by an older ember).</p>";
  const json& ev = r.evaluation;
  out += "<p class=\"sub\">After epoch " + text_of(ev["epoch"]) + ", step " + text_of(ev["step"]) + ": " +
         text_of(ev["count"]) + " test images, accuracy " + format("%.2f%%", 100 * number(ev, "accuracy")) + ", loss " +
         format("%.4f", number(ev, "loss")) + ".</p><div class=\"pair\">";
  svg::HeatMap m{.id = "confusion-" + id, .title = "Confusion matrix (shade: share of the true class's row)"};
  for (const json& c : ev["classes"]) m.labels.push_back(text_of(c));
  for (const json& row : ev["confusion"]) {
    std::vector<long long> counts;
    for (const json& v : row) counts.push_back(v.is_number() ? v.get<long long>() : 0);
    m.counts.push_back(counts);
  }
  out += "<div class=\"card\">" + svg::heat_map(m) + "</div>";
  out +=
      "<div class=\"card\"><div style=\"font-weight:600;font-size:15px;margin-bottom:8px\">Most confident "
      "mistakes</div><div class=\"mistakes\" id=\"mistakes-" +
      id + "\" data-check=\"mistakes-" + id + "\">";
  const json mistakes = ev.value("mistakes", json::array());
  for (const json& mk : mistakes) {
    const auto cls = [&](const char* key) {
      const auto k = static_cast<size_t>(mk.value(key, 0));
      return k < m.labels.size() ? m.labels[k] : std::to_string(k);
    };
    const std::string index = mk.value("index", -1) >= 0 ? "#" + std::to_string(mk.value("index", -1)) : "";
    out += "<figure class=\"mistake\"><img alt=\"test image " + index + "\" src=\"data:image/png;base64," +
           escape(mk.value("png", std::string())) + "\"><figcaption><span class=\"pred\">" + escape(cls("predicted")) +
           "</span> " + format("%.0f%%", 100 * mk.value("confidence", 0.0)) + "<br>true: " + escape(cls("true")) +
           "<br><span class=\"idx\">" + index + "</span></figcaption></figure>";
  }
  if (mistakes.empty()) out += "<p class=\"note\">No misclassified test image.</p>";
  return out + "</div></div></div>";
}

std::string config_table(const std::vector<RunRecord>& runs) {
  std::vector<std::string> keys;
  for (const RunRecord& r : runs)
    for (const auto& [k, v] : r.config.items())
      if (k != "event" && k != "environment" && std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  std::string out = "<table class=\"kv\" id=\"config\"><tr><th>option</th>";
  for (const RunRecord& r : runs)
    out += "<th style=\"border-top:4px solid " + r.color + "\">" + escape(r.name) + "</th>";
  out += "</tr>";
  for (const std::string& k : keys) {
    std::vector<std::string> values;
    for (const RunRecord& r : runs) {
      const json v = r.config.contains(k) ? r.config[k] : json();
      std::string s = k == "classes" && v.is_array() ? std::to_string(v.size()) + ": " : "";
      if (k == "classes" && v.is_array()) {
        for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + text_of(v[i]);
        if (s.size() > 240) s = s.substr(0, 240) + " ...";
      } else {
        s = text_of(v);
      }
      values.push_back(s);
    }
    const bool differs =
        std::any_of(values.begin(), values.end(), [&](const std::string& v) { return v != values[0]; });
    out += std::string("<tr") + (differs ? " class=\"differs\"" : "") + "><th>" + escape(k) + "</th>";
    for (const std::string& v : values) out += "<td>" + escape(v) + "</td>";
    out += "</tr>";
  }
  return out + "</table>";
}

std::string environment(const std::vector<RunRecord>& runs) {
  std::string out = "<div id=\"environment\">";
  for (const RunRecord& r : runs) {
    out += "<h3>" + escape(r.name) + "</h3>";
    const json env = r.config.value("environment", json());
    if (!env.is_object()) {
      out += "<p class=\"note\">Not recorded (metrics written by an older ember).</p>";
      continue;
    }
    const json cpu = env.value("cpu", json::object()), gemm = env.value("gemm", json::object());
    out += "<table class=\"kv\">";
    const auto row = [&](const char* k, const std::string& v) {
      out += "<tr><th>" + std::string(k) + "</th><td>" + escape(v) + "</td></tr>";
    };
    row("ember", text_of(env["version"]) + " (" + text_of(env["build_type"]) + ", " + text_of(env["flavours"]) + ")");
    row("compiler", text_of(env["compiler"]));
    row("libraries", text_of(env["libraries"]));
    row("CPU",
        text_of(cpu["model"]) + ", " + text_of(cpu["cores"]) + " logical cores, widest " + text_of(cpu["widest_isa"]));
    row("GEMM / conv",
        text_of(gemm["kernels"]) + " kernels (" + text_of(gemm["kernels_isa"]) + "), " + text_of(gemm["library"]));
    row("threads", text_of(env["threads"]));
    std::string gpus;
    for (const json& g : env.value("cuda_devices", json::array())) gpus += (gpus.empty() ? "" : "; ") + text_of(g);
    row("CUDA devices", env.value("cuda_built", false) ? (gpus.empty() ? "none visible" : gpus) : "not in this build");
    out += "</table><details><summary>ember info --json</summary><pre>" + escape(env.dump(2)) + "</pre></details>";
  }
  return out + "</div>";
}

}  // namespace

std::string report_page(const std::vector<RunRecord>& runs) {
  std::string names;
  for (const RunRecord& r : runs) names += (names.empty() ? "" : ", ") + r.name;
  char when[64];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<title>ember report: " +
      escape(names) + "</title><script>" + kErrorScript + "</script><style>" + kStyle + "</style></head><body><main>";
  html += "<div id=\"js-errors\" hidden></div>";
  html += std::string("<h1>ember run report</h1><p class=\"sub\">") +
          (runs.size() > 1 ? "Comparing " + std::to_string(runs.size()) + " runs: " : "Run ") + escape(names) +
          ". Made " + when + " by ember " + escape(build_info().version) +
          ". Hover over a plot to read its values.</p>";
  html += "<div class=\"cards\" id=\"summary\">";
  for (const RunRecord& r : runs) html += run_card(r);
  html += "</div><h2>Training curves</h2>" + curves(runs);
  html += "<h2>Per-class accuracy</h2>" + per_class(runs);
  for (size_t i = 0; i < runs.size(); ++i) html += evaluation_section(runs[i], i);
  html += "<h2>Configuration</h2>";
  if (runs.size() > 1) html += "<p class=\"sub\">Highlighted: options that differ between the runs.</p>";
  html += config_table(runs);
  html += "<h2>Environment</h2>" + environment(runs);
  html += "<footer>Written by <code>ember report</code> from";
  for (const RunRecord& r : runs) html += " <code>" + escape(r.dir) + "</code>";
  html += ". One self-contained file: it needs no network.</footer></main><script>";
  html += kScript;
  html += "</script></body></html>\n";
  return html;
}

}  // namespace ember::train
