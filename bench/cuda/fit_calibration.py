#!/usr/bin/env python3
"""Fits the step model's efficiencies from timed ledgers (Note [Predicting a step from its
ledger] in train/gpu_model.h).

    fit_calibration.py OUT.json GPU_NAME EXPLAIN.json...

Each EXPLAIN.json is the output of `ember explain ... --json` on a real GPU, whose entries carry
`measured_us` (two CUDA events around each launch). For every entry:
  - memory-bound (mem_us >= flop_us): e_mem = mem_us / measured_us, pooled per family;
  - a convolution or GEMM with a shape: e_flop = flop_us / measured_us for that shape (the
    median over its repeats) and pooled into its family (cudnn, cublas).
Medians are written, each efficiency capped at 1, with the source (GPU, date, files) and the
per-shape measured time, in the format of calibration/gpu.json (whose launch, sync and
allocation costs and defaults, read from the current directory, carry over). Entries without a measured time
(the emulator's record-only ledgers) are skipped; with none measured at all the script says so
and writes nothing, exit status 1.
"""
import datetime
import json
import statistics
import sys


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    out, gpu, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    e_mem, e_flop, shapes, shape_us = {}, {}, {}, {}
    measured = 0
    for path in files:
        with open(path) as f:
            step = json.load(f)
        for e in step.get("entries", []):
            t = e.get("measured_us")
            if t is None or t <= 0 or e["kind"] in ("host_sync", "alloc"):
                continue
            measured += 1
            if e["flop_us"] > e["mem_us"] and e["shape"]:
                shapes.setdefault(e["shape"], []).append(e["flop_us"] / t)
                shape_us.setdefault(e["shape"], []).append(t)
                e_flop.setdefault(e["family"], []).append(e["flop_us"] / t)
            elif e["mem_us"] > 0:
                e_mem.setdefault(e["family"], []).append(e["mem_us"] / t)
    if measured == 0:
        print("fit_calibration: no entry has a measured time (record-only ledgers?): nothing fitted")
        sys.exit(1)
    med = lambda v: round(min(1.0, statistics.median(v)), 4)
    # The launch, sync and allocation costs and the defaults carry over from the committed file.
    try:
        with open("calibration/gpu.json") as f:
            base = json.load(f)
    except OSError:
        base = {}
    cal = {k: base[k] for k in ("launch_us", "graph_launch_us", "sync_us", "alloc_us", "default_e_mem",
                                "default_e_flop") if k in base}
    cal |= {
        "source": f"fitted by bench/cuda/fit_calibration.py on {gpu}, {datetime.date.today().isoformat()}, from "
                  f"{measured} timed launches in {', '.join(p.split('/')[-1] for p in files)}",
        "gpu": gpu,
        "e_mem": {k: med(v) for k, v in sorted(e_mem.items())},
        "e_flop": {k: med(v) for k, v in sorted(e_flop.items())},
        "shapes": {k: {"e_flop": med(v), "us": round(statistics.median(shape_us[k]), 2)} for k, v in sorted(shapes.items())},
    }
    with open(out, "w") as f:
        json.dump(cal, f, indent=2)
        f.write("\n")
    print(f"fit_calibration: {measured} launches, {len(cal['e_mem'])} memory families, {len(cal['shapes'])} shapes -> {out}")


if __name__ == "__main__":
    main()
