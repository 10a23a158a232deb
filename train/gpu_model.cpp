#include "gpu_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../core/error.h"

namespace ember::train {

namespace detail {
extern const char* const kGpuCalibrationJson;  // generated from calibration/gpu.json
}

using json = nlohmann::json;

namespace {

// Datasheet figures, dense (no sparsity): NVIDIA H100 SXM5 and H200 SXM datasheets. Both have 132
// SMs and the same tensor cores; the H200 has more and faster HBM (HBM3e). NVLink 4: 900 GB/s per
// GPU both directions; one NDR InfiniBand port per GPU: 400 Gb/s.
const std::vector<GpuSpec>& gpus() {
  static const std::vector<GpuSpec> table = {
      {"h100", "NVIDIA H100 SXM5 80 GB", 3350, 989, 494, 67, 67, 132, 80, 25, 450, 50},
      {"h200", "NVIDIA H200 SXM 141 GB", 4800, 989, 494, 67, 67, 132, 141, 25, 450, 50},
  };
  return table;
}

double peak_tflops(const GpuSpec& g, cuda::Math m) {
  switch (m) {
    case cuda::Math::tensor_16: return g.tensor16_tflops;
    case cuda::Math::tensor_tf32: return g.tf32_tflops;
    case cuda::Math::fp64: return g.fp64_tflops;
    case cuda::Math::cuda_core: break;
  }
  return g.fp32_tflops;
}

double lookup(const std::map<std::string, double>& m, const std::string& key, double fallback) {
  auto it = m.find(key);
  return it == m.end() ? fallback : it->second;
}

bool is_host_copy(const cuda::LedgerEntry& e) {
  return e.kind == cuda::CallKind::copy && (e.kernel.find("HtoD") != std::string::npos ||
                                            e.kernel.find("DtoH") != std::string::npos ||
                                            e.kernel.find("HtoH") != std::string::npos);
}

// The kernel lab (kernels/labs, docs/labs.md) that teaches the fix for a row bound the way it is.
std::string lab_for(const OpRow& r) {
  if (r.bound == Bound::sync) return "";  // no lab: the fix is keeping the check on the device
  if (r.op.find("adam") != std::string::npos || r.phase == "optimizer") return "kernels/labs/adam (one launch for every tensor)";
  if (r.op.find("batch_norm") != std::string::npos || r.op.find("sum") != std::string::npos)
    return "kernels/labs/reduce (fewer passes, a grid that fills the GPU)";
  if (r.bound == Bound::memory || r.bound == Bound::launch) return "kernels/labs/copy (bytes per request, vector loads)";
  if (r.op.find("conv") != std::string::npos || r.op.find("Convolution") != std::string::npos)
    return "kernels/labs/conv2d and kernels/labs/tensor_core_gemm";
  return "";
}

Calibration parse_calibration(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    EMBER_THROW("GPU calibration ", where, ": not valid JSON (", e.what(), ")");
  }
  EMBER_CHECK(j.is_object(), "GPU calibration ", where, ": expected a JSON object");
  Calibration c;
  try {
    c.source = j.value("source", where);
    c.launch_us = j.value("launch_us", c.launch_us);
    c.graph_launch_us = j.value("graph_launch_us", c.graph_launch_us);
    c.sync_us = j.value("sync_us", c.sync_us);
    c.alloc_us = j.value("alloc_us", c.alloc_us);
    c.default_e_mem = j.value("default_e_mem", c.default_e_mem);
    c.default_e_flop = j.value("default_e_flop", c.default_e_flop);
    if (j.contains("e_mem")) c.e_mem = j["e_mem"].get<std::map<std::string, double>>();
    if (j.contains("e_flop")) c.e_flop = j["e_flop"].get<std::map<std::string, double>>();
    if (j.contains("shapes"))
      for (const auto& [shape, v] : j["shapes"].items()) {
        c.shape_e_flop[shape] = v.at("e_flop").get<double>();
        if (v.contains("us")) c.measured_us[shape] = v["us"].get<double>();
      }
  } catch (const json::exception& e) {
    EMBER_THROW("GPU calibration ", where, ": ", e.what());
  }
  auto check_e = [&](const char* what, double e) {
    EMBER_CHECK(e > 0 && e <= 1, "GPU calibration ", where, ": ", what, " = ", e, " is not an efficiency in (0, 1]");
  };
  check_e("default_e_mem", c.default_e_mem);
  check_e("default_e_flop", c.default_e_flop);
  for (const auto& m : {c.e_mem, c.e_flop, c.shape_e_flop})
    for (const auto& [k, e] : m) check_e(k.c_str(), e);
  EMBER_CHECK(c.launch_us >= 0 && c.graph_launch_us >= 0 && c.sync_us >= 0 && c.alloc_us >= 0, "GPU calibration ",
              where, ": negative time");
  return c;
}

}  // namespace

const GpuSpec& gpu_spec(const std::string& name) {
  for (const GpuSpec& g : gpus())
    if (g.name == name) return g;
  std::string known;
  for (const GpuSpec& g : gpus()) known += (known.empty() ? "" : ", ") + g.name;
  EMBER_THROW("unknown GPU '", name, "' (the step model knows: ", known, ")");
}

std::vector<std::string> known_gpus() {
  std::vector<std::string> out;
  for (const GpuSpec& g : gpus()) out.push_back(g.name);
  return out;
}

Calibration default_calibration() { return parse_calibration(detail::kGpuCalibrationJson, "calibration/gpu.json"); }

Calibration read_calibration(const std::string& path) {
  std::ifstream in(path);
  EMBER_CHECK(in, "cannot read the GPU calibration file ", path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_calibration(text.str(), path);
}

const char* bound_name(Bound b) {
  switch (b) {
    case Bound::memory: return "memory";
    case Bound::compute: return "compute";
    case Bound::launch: return "launch";
    case Bound::sync: return "sync";
    case Bound::copy: return "copy";
  }
  return "?";
}

StepPrediction predict_step(const std::vector<cuda::LedgerEntry>& ledger, const GpuSpec& gpu, const Calibration& cal,
                            bool graphs) {
  StepPrediction p;
  p.gpu = gpu.name;
  p.graphs = graphs;
  std::map<std::pair<std::string, std::string>, OpRow> rows;
  std::map<std::pair<std::string, std::string>, std::map<Bound, double>> row_bounds;
  double measured_us = 0;
  bool all_measured = !ledger.empty();
  for (const cuda::LedgerEntry& e : ledger) {
    PredictedEntry pe;
    const double bytes = e.cost.read + e.cost.written;
    const double launch = graphs ? cal.graph_launch_us : cal.launch_us;
    switch (e.kind) {
      case cuda::CallKind::host_sync:
        pe.us = graphs ? 0 : cal.sync_us;
        pe.bound = Bound::sync;
        break;
      case cuda::CallKind::alloc:
        pe.us = cal.alloc_us;
        pe.bound = Bound::sync;
        break;
      default: {
        if (is_host_copy(e)) {
          pe.floor_us = bytes / (gpu.pcie_gbs * 1e3);
          pe.us = pe.floor_us + launch;
          pe.bound = Bound::copy;
          ++p.launches;  // a copy occupies the stream like a kernel
          break;
        }
        const double e_mem = lookup(cal.e_mem, e.family, cal.default_e_mem);
        double e_flop = lookup(cal.e_flop, e.family, cal.default_e_flop);
        if (!e.shape.empty()) {
          auto it = cal.shape_e_flop.find(e.shape);
          if (it != cal.shape_e_flop.end()) e_flop = it->second;
          else pe.uncalibrated = true;
        }
        const double peak = peak_tflops(gpu, e.cost.math) * 1e6;  // flops per µs
        const double t_mem = bytes / (gpu.hbm_gbs * 1e3), t_flop = e.cost.flops / peak;
        pe.mem_us = t_mem;
        pe.flop_us = t_flop;
        pe.floor_us = std::max(t_mem, t_flop);
        const double t_mem_e = t_mem / e_mem, t_flop_e = t_flop / e_flop;
        pe.us = std::max(t_mem_e, t_flop_e) + launch;
        pe.bound = launch > std::max(t_mem_e, t_flop_e) ? Bound::launch
                   : t_flop_e > t_mem_e                 ? Bound::compute
                                                        : Bound::memory;
        ++p.launches;
      }
    }
    if (e.kind == cuda::CallKind::host_sync) ++p.host_syncs;
    if (e.kind == cuda::CallKind::alloc) ++p.allocations;
    if (!is_host_copy(e)) p.bytes += bytes;
    p.flops += e.cost.flops;
    p.predicted_ms += pe.us * 1e-3;
    p.floor_ms += pe.floor_us * 1e-3;
    if (pe.uncalibrated) p.uncalibrated_ms += pe.us * 1e-3;
    if (e.measured_us >= 0) measured_us += e.measured_us;
    else if (e.kind != cuda::CallKind::host_sync && e.kind != cuda::CallKind::alloc) all_measured = false;

    const auto key = std::make_pair(e.op, std::string(profiler::phase_name(e.phase)));
    OpRow& r = rows[key];
    r.op = e.op;
    r.phase = key.second;
    if (e.kind == cuda::CallKind::host_sync) ++r.host_syncs;
    else if (e.kind != cuda::CallKind::alloc) ++r.launches;
    if (!is_host_copy(e)) r.bytes += bytes;
    r.flops += e.cost.flops;
    r.predicted_us += pe.us;
    r.floor_us += pe.floor_us;
    if (e.measured_us >= 0) {
      r.measured_us += e.measured_us;
      r.measured = true;
    }
    r.uncalibrated = r.uncalibrated || pe.uncalibrated;
    row_bounds[key][pe.bound] += pe.us;
    p.entries.push_back(pe);
  }
  if (all_measured) p.measured_ms = measured_us * 1e-3;
  for (auto& [key, r] : rows) {
    const auto& b = row_bounds[key];
    r.bound = std::max_element(b.begin(), b.end(), [](auto& x, auto& y) { return x.second < y.second; })->first;
    p.ops.push_back(r);
  }
  std::sort(p.ops.begin(), p.ops.end(), [](const OpRow& a, const OpRow& b) { return a.predicted_us > b.predicted_us; });
  for (size_t i = 0; i < p.ops.size() && i < 5; ++i) p.ops[i].lab = lab_for(p.ops[i]);

  // Findings: what the ledger shows that a reader should fix first.
  for (size_t i = 0; i < ledger.size(); ++i)
    if (ledger[i].kind == cuda::CallKind::host_sync && !graphs)
      p.findings.push_back("host sync in the step: " + ledger[i].note + " (op " + ledger[i].op + ", " +
                           profiler::phase_name(ledger[i].phase) + "): the host waits for the GPU and the GPU then " +
                           "idles until the next launch arrives");
  std::map<std::string, int64_t> per_kernel_optimizer;
  for (const cuda::LedgerEntry& e : ledger)
    if (e.phase == profiler::Phase::optimizer && e.kind == cuda::CallKind::kernel) ++per_kernel_optimizer[e.kernel];
  for (const auto& [kernel, n] : per_kernel_optimizer)
    if (n >= 16)
      p.findings.push_back(std::to_string(n) + " launches of " + kernel +
                           " in the optimizer: one per parameter tensor (a multi-tensor launch would do them at once)");
  // A launch that moves many bytes on fewer blocks than the GPU has SMs leaves most of its memory
  // bandwidth idle (the full `sum` of the H200 run: one block, 2.4 GB/s).
  for (const cuda::LedgerEntry& e : ledger) {
    const double blocks = double(e.grid[0]) * e.grid[1] * e.grid[2];
    if (e.kind == cuda::CallKind::kernel && blocks < gpu.sms && e.cost.read + e.cost.written > 16e6) {
      char line[256];
      std::snprintf(line, sizeof line, "%s (op %s) moves %.0f MB on %.0f blocks, fewer than the GPU's %d SMs",
                    e.kernel.c_str(), e.op.c_str(), (e.cost.read + e.cost.written) * 1e-6, blocks, gpu.sms);
      p.findings.push_back(line);
    }
  }
  if (p.allocations > 0)
    p.findings.push_back(std::to_string(p.allocations) + " cudaMalloc calls in the step (the caching allocator was not warm)");
  return p;
}

Scaling predict_scaling(const StepPrediction& step, const std::vector<cuda::LedgerEntry>& ledger, const GpuSpec& gpu,
                        double gradient_bytes, int world, double bucket_mb) {
  Scaling s;
  s.world = world;
  s.link = world <= 8 ? "nvlink" : "network";
  s.step_ms = step.predicted_ms;
  if (world <= 1 || gradient_bytes <= 0) return s;
  // Backward's span on the predicted timeline.
  double t = 0, bwd_begin = -1, bwd_end = -1;
  for (size_t i = 0; i < ledger.size(); ++i) {
    if (ledger[i].phase == profiler::Phase::backward) {
      if (bwd_begin < 0) bwd_begin = t;
      bwd_end = t + step.entries[i].us;
    }
    t += step.entries[i].us;
  }
  if (bwd_begin < 0) bwd_begin = bwd_end = t;
  const double link_gbs = world <= 8 ? gpu.nvlink_gbs : gpu.network_gbs;
  const double bucket = bucket_mb * 1e6;
  const int buckets = std::max(1, static_cast<int>(std::ceil(gradient_bytes / bucket)));
  double done = bwd_begin;  // when the previous all-reduce finished
  double total = 0;
  for (int b = 0; b < buckets; ++b) {
    const double bytes = std::min(bucket, gradient_bytes - b * bucket);
    const double ready = bwd_begin + (bwd_end - bwd_begin) * (static_cast<double>(b + 1) / buckets);
    const double us = 2.0 * (world - 1) / world * bytes / (link_gbs * 1e3);
    total += us;
    done = std::max(done, ready) + us;
  }
  s.allreduce_ms = total * 1e-3;
  s.exposed_ms = std::max(0.0, done - bwd_end) * 1e-3;
  s.step_ms = step.predicted_ms + s.exposed_ms;
  s.efficiency = step.predicted_ms / s.step_ms;
  return s;
}

std::string explain_table(const StepPrediction& p, const std::vector<Scaling>& scaling, int rows) {
  std::string out;
  char line[512];
  const GpuSpec& g = gpu_spec(p.gpu);
  std::snprintf(line, sizeof line, "one training step on %s%s: predicted %.2f ms (roofline floor %.2f ms)%s\n",
                g.description.c_str(), p.graphs ? " under a CUDA graph" : "", p.predicted_ms, p.floor_ms,
                p.measured_ms >= 0 ? "" : ", predicted only");
  out += line;
  if (p.measured_ms >= 0) {
    std::snprintf(line, sizeof line, "measured on this GPU: %.2f ms (sum of the launches' event times)\n", p.measured_ms);
    out += line;
  }
  std::snprintf(line, sizeof line,
                "%lld launches, %lld host syncs, %.2f GB memory-bound traffic, %.3f TFLOP; %.2f ms of the prediction "
                "is uncalibrated convolution/GEMM shapes\n\n",
                static_cast<long long>(p.launches), static_cast<long long>(p.host_syncs), p.bytes * 1e-9,
                p.flops * 1e-12, p.uncalibrated_ms);
  out += line;
  std::snprintf(line, sizeof line, "%-28s %-9s %8s %10s %10s %7s %-8s %10s %6s%s\n", "op", "phase", "launches", "GB",
                "GFLOP", "FLOP/B", "bound", "pred. us", "%", p.measured_ms >= 0 ? "   meas. us" : "");
  out += line;
  int shown = 0;
  for (const OpRow& r : p.ops) {
    if (rows >= 0 && shown++ >= rows) break;
    const double intensity = r.bytes > 0 ? r.flops / r.bytes : 0;
    std::snprintf(line, sizeof line, "%-28.28s %-9s %8lld %10.3f %10.2f %7.1f %-8s %10.1f %6.1f", r.op.c_str(),
                  r.phase.c_str(), static_cast<long long>(r.launches + r.host_syncs), r.bytes * 1e-9, r.flops * 1e-9,
                  intensity, bound_name(r.bound), r.predicted_us, 100 * r.predicted_us / (p.predicted_ms * 1e3));
    out += line;
    if (p.measured_ms >= 0) {
      std::snprintf(line, sizeof line, " %10.1f", r.measured_us);
      out += line;
    }
    if (r.uncalibrated) out += "  (uncalibrated)";
    out += "\n";
    if (!r.lab.empty()) out += "    fix: " + r.lab + "\n";
  }
  if (!p.findings.empty()) {
    out += "\nfindings:\n";
    for (const std::string& f : p.findings) out += "  - " + f + "\n";
  }
  if (!scaling.empty()) {
    out += "\ndata-parallel (ring all-reduce, 25 MB buckets, gradients ready evenly through backward):\n";
    for (const Scaling& s : scaling) {
      std::snprintf(line, sizeof line, "  %3d GPUs over %-7s: all-reduce %.2f ms, %.2f ms not hidden by backward, step %.2f ms, "
                    "scaling efficiency %.0f%%\n", s.world, s.link.c_str(), s.allreduce_ms, s.exposed_ms, s.step_ms,
                    100 * s.efficiency);
      out += line;
    }
  }
  return out;
}

std::string explain_json(const StepPrediction& p, const std::vector<Scaling>& scaling,
                         const std::vector<cuda::LedgerEntry>& ledger) {
  json j;
  j["gpu"] = p.gpu;
  j["cuda_graphs"] = p.graphs;
  j["launches"] = p.launches;
  j["host_syncs"] = p.host_syncs;
  j["allocations"] = p.allocations;
  j["bytes"] = p.bytes;
  j["flops"] = p.flops;
  j["predicted_ms"] = p.predicted_ms;
  j["floor_ms"] = p.floor_ms;
  j["uncalibrated_ms"] = p.uncalibrated_ms;
  j["measured_ms"] = p.measured_ms >= 0 ? json(p.measured_ms) : json(nullptr);
  j["ops"] = json::array();
  for (const OpRow& r : p.ops)
    j["ops"].push_back({{"op", r.op}, {"phase", r.phase}, {"launches", r.launches}, {"host_syncs", r.host_syncs},
                        {"bytes", r.bytes}, {"flops", r.flops}, {"bound", bound_name(r.bound)},
                        {"predicted_us", r.predicted_us}, {"floor_us", r.floor_us},
                        {"measured_us", r.measured ? json(r.measured_us) : json(nullptr)},
                        {"uncalibrated", r.uncalibrated}, {"lab", r.lab}});
  j["findings"] = p.findings;
  // Every entry, for the calibration fit (bench/cuda/fit_calibration.py) and for reading.
  j["entries"] = json::array();
  for (size_t i = 0; i < p.entries.size() && i < ledger.size(); ++i) {
    const cuda::LedgerEntry& e = ledger[i];
    const PredictedEntry& pe = p.entries[i];
    j["entries"].push_back({{"kind", cuda::call_kind_name(e.kind)}, {"op", e.op},
                            {"phase", profiler::phase_name(e.phase)}, {"kernel", e.kernel}, {"family", e.family},
                            {"shape", e.shape}, {"math", cuda::math_name(e.cost.math)},
                            {"grid", {e.grid[0], e.grid[1], e.grid[2]}}, {"block", {e.block[0], e.block[1], e.block[2]}},
                            {"read", e.cost.read}, {"written", e.cost.written}, {"flops", e.cost.flops},
                            {"mem_us", pe.mem_us}, {"flop_us", pe.flop_us}, {"predicted_us", pe.us},
                            {"measured_us", e.measured_us >= 0 ? json(e.measured_us) : json(nullptr)},
                            {"skipped", e.skipped}, {"stub_answer", e.stub_answer}, {"note", e.note}});
  }
  j["scaling"] = json::array();
  for (const Scaling& s : scaling)
    j["scaling"].push_back({{"world", s.world}, {"link", s.link}, {"allreduce_ms", s.allreduce_ms},
                            {"exposed_ms", s.exposed_ms}, {"step_ms", s.step_ms}, {"efficiency", s.efficiency}});
  return j.dump(1);
}

}  // namespace ember::train
