#!/usr/bin/env python3
"""The kernel labs' GPU measurements into their READMEs (docs/labs.md, docs/gpu-validation.md).

  scripts/labs_gpu_report.py RESULTS [--labs-dir build/labs] [--readme-root .] [--date YYYY-MM-DD]

RESULTS is a gpu-check output folder (scripts/gpu-check.sh: $OUT/gpu-check) holding gpu.txt,
labs.jsonl (every version at its GPU size, timed with CUDA events) and, where Nsight Compute ran,
labs/<lab>.ncu.csv (its counters at the emulator's sizes, one run per version). --labs-dir holds
this machine's emulated lab programs: their counters at the same sizes, and how many kernels each
version launches, which is how the profiler's kernels are assigned to versions.

For each lab, the section between the markers <!-- gpu-measured:begin --> and
<!-- gpu-measured:end --> of kernels/labs/<lab>/README.md (under --readme-root) is replaced, or
added at the end: the GPU, then per version the time, and with Nsight Compute the sectors per
request and shared-memory wavefronts per request, the profiler's next to the emulator's, with the
largest relative difference (the issue's goal: within 5%).
"""
import argparse
import csv
import datetime
import json
import os
import subprocess
import sys

BEGIN, END = "<!-- gpu-measured:begin -->", "<!-- gpu-measured:end -->"
# Nsight Compute metric -> the emulator's JSON field it counts.
METRICS = {
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "global_load_requests",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "global_load_sectors",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "global_store_requests",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "global_store_sectors",
    "smsp__inst_executed_op_shared_ld.sum": "shared_requests",
    "smsp__inst_executed_op_shared_st.sum": "shared_requests",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "shared_wavefronts",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": "shared_wavefronts",
}


def json_lines(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.startswith("{")]
    except OSError:
        return []


def ncu_kernels(path):
    """The profiled kernels in launch order, each {field: value} summed as the emulator counts.
    Nsight Compute's --csv prints one row per (kernel, metric): "ID", "Kernel Name", "Metric Name",
    "Metric Value" (numbers may carry thousands separators)."""
    kernels = {}
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # leaves out ncu's "==PROF==" lines
    for row in csv.DictReader(lines):
        field = METRICS.get(row.get("Metric Name", ""))
        if field is None:
            continue
        k = kernels.setdefault(int(row["ID"]), {"name": row.get("Kernel Name", "?")})
        k[field] = k.get(field, 0) + float(row["Metric Value"].replace(",", ""))
    return [kernels[i] for i in sorted(kernels)]


def ratio(a, b):
    return a / b if b else None


def fmt(v, digits=2):
    return "-" if v is None else f"{v:.{digits}f}"


def lab_section(lab, gpu, date, measured, emulated, kernels):
    lines = [BEGIN, "", f"## Measured on a GPU", "",
             f"{gpu}, {date} (scripts/gpu-check.sh; the times at the lab's GPU size, CUDA events, median of 20)."]
    cols = ["v", "version", "ok", "GPU us"]
    per_version = {}
    note = ""
    if kernels is not None and emulated:
        # The emulator says how many kernels each version launches; the profiler lists them in order.
        cols += ["ld s/req (ncu / emulator)", "st s/req (ncu / emulator)", "smem wf/req (ncu / emulator)", "largest difference"]
        i = 0
        for e in sorted(emulated.values(), key=lambda d: d["version"]):
            mine = kernels[i:i + e["launches"]]
            i += e["launches"]
            total = {f: sum(k.get(f, 0) for k in mine) for f in set(METRICS.values())}
            pairs = [(ratio(total["global_load_sectors"], total["global_load_requests"]),
                      ratio(e["global_load_sectors"], e["global_load_requests"])),
                     (ratio(total["global_store_sectors"], total["global_store_requests"]),
                      ratio(e["global_store_sectors"], e["global_store_requests"])),
                     (ratio(total["shared_wavefronts"], total["shared_requests"]),
                      ratio(e["shared_wavefronts"], e["shared_requests"]))]
            diffs = [abs(a - b) / b for a, b in pairs if a is not None and b]
            per_version[e["version"]] = [f"{fmt(a)} / {fmt(b)}" for a, b in pairs] + \
                                        [f"{100 * max(diffs):.1f}%" if diffs else "-"]
        if i != len(kernels):
            note = (f"\nThe profiler saw {len(kernels)} kernels where the emulator counts {i} launches: the "
                    "columns above may pair the wrong kernels.")
        lines[-1] += (" Nsight Compute's counters at the emulator's sizes (--small, one run per version) "
                      "next to the emulator's.")
    lines += ["", "| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for d in sorted(measured, key=lambda d: d["version"]):
        ok = ("caught" if not d["ok"] else "NOT caught") if d["broken"] else ("yes" if d["ok"] else "NO")
        row = [str(d["version"]), d["name"], ok, fmt(d.get("gpu_us"), 1)] + per_version.get(d["version"], [])
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + note + "\n\n" + END + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--labs-dir", default="build/labs")
    ap.add_argument("--readme-root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    a = ap.parse_args()

    try:
        gpu = open(os.path.join(a.results, "gpu.txt")).read().strip().splitlines()[0]
    except (OSError, IndexError):
        gpu = "unknown GPU"
    by_lab = {}
    for d in json_lines(os.path.join(a.results, "labs.jsonl")):
        if "version" in d:
            by_lab.setdefault(d["lab"], []).append(d)
    if not by_lab:
        print(f"labs_gpu_report: no lab measurements in {a.results}/labs.jsonl", file=sys.stderr)
        return 1
    for lab, measured in sorted(by_lab.items()):
        readme = os.path.join(a.readme_root, "kernels", "labs", lab, "README.md")
        if not os.path.exists(readme):
            print(f"labs_gpu_report: {readme} does not exist", file=sys.stderr)
            return 1
        kernels, emulated = None, {}
        ncu = os.path.join(a.results, "labs", f"{lab}.ncu.csv")
        if os.path.exists(ncu):
            kernels = ncu_kernels(ncu)
            prog = os.path.join(a.labs_dir, f"lab_{lab}")
            p = subprocess.run([prog, "--json", "--broken"], capture_output=True, text=True)
            emulated = {d["version"]: d for d in (json.loads(l) for l in p.stdout.splitlines() if l.startswith("{"))}
        section = lab_section(lab, gpu, a.date, measured, emulated, kernels)
        text = open(readme).read()
        if BEGIN in text and END in text:
            text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END) + 1:]
        else:
            text = text.rstrip() + "\n\n" + section
        open(readme, "w").write(text)
        print(f"labs_gpu_report: {readme}: {len(measured)} versions" + (f", {len(kernels)} profiled kernels" if kernels else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
