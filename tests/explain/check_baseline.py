#!/usr/bin/env python3
"""The CI gate on a training step's GPU work (docs/cuda.md, "The baseline gate").

    check_baseline.py EMBER BASELINE.json              check every workload
    check_baseline.py EMBER BASELINE.json --update "why"   rewrite the counts that moved, with the reason

For each workload of the baseline file, runs `EMBER explain ARGS --json` (record-only on the
emulator: a few seconds even at full size) and compares the step's launches, host syncs,
memory-bound bytes and FLOPs with the committed counts. A step that launches more, moves more
bytes (either by more than 2%), syncs with the host more often, or does other FLOPs (by more than
2%) fails the gate: a change that costs GPU time must say so by updating the file in the same
commit, with its reason. A step that got cheaper passes and says by how much, so the baseline can
be lowered.
"""
import json
import subprocess
import sys
import time

TOLERANCE = 0.02


def explain(ember, args):
    t0 = time.monotonic()
    out = subprocess.run([ember, "explain", *args, "--json"], capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if out.returncode != 0:
        sys.exit(f"FAIL: ember explain {' '.join(args)} exited {out.returncode}:\n{out.stderr}")
    step = json.loads(out.stdout)
    for key in ("launches", "host_syncs", "bytes", "flops", "predicted_ms", "floor_ms", "ops"):
        if key not in step:
            sys.exit(f"FAIL: ember explain {' '.join(args)} --json has no '{key}'")
    return step, seconds


def main():
    ember, path = sys.argv[1], sys.argv[2]
    update = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--update" else None
    with open(path) as f:
        baseline = json.load(f)
    failures = []
    for name, w in baseline["workloads"].items():
        step, seconds = explain(ember, w["args"])
        print(f"{name}: {step['launches']} launches, {step['host_syncs']} host syncs, {step['bytes'] / 1e9:.3f} GB, "
              f"{step['flops'] / 1e12:.4f} TFLOP, predicted {step['predicted_ms']:.2f} ms on {step['gpu']} "
              f"(floor {step['floor_ms']:.2f} ms); ledger in {seconds:.1f} s")
        if update:
            # A workload whose counts the change moved takes its reason; the others keep theirs.
            if any(w.get(key) != step[key] for key in ("launches", "host_syncs", "bytes", "flops")):
                for key in ("launches", "host_syncs", "bytes", "flops"):
                    w[key] = step[key]
                w["reason"] = update
            continue
        for key, strict in (("launches", False), ("bytes", False), ("host_syncs", True), ("flops", False)):
            was, now = w[key], step[key]
            if key == "flops":
                if abs(now - was) > TOLERANCE * max(was, 1):
                    failures.append(f"{name}: flops {now:.4g} differ from the baseline's {was:.4g} by more than 2%")
                continue
            limit = was if strict else was * (1 + TOLERANCE)
            if now > limit:
                failures.append(f"{name}: {key} rose from {was:.6g} to {now:.6g} (+{100 * (now - was) / max(was, 1):.1f}%)")
            elif now < was * (1 - TOLERANCE):
                print(f"  {key} fell from {was:.6g} to {now:.6g}: lower the baseline ({path}) with the reason")
    if update:
        with open(path, "w") as f:
            json.dump(baseline, f, indent=2)
            f.write("\n")
        print(f"updated {path}")
        return
    if failures:
        print("FAIL: the step's GPU work rose above the committed baseline (update " + path +
              " in the same commit, with the reason, if the rise is meant):")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print("OK: every workload within its baseline")


if __name__ == "__main__":
    main()
