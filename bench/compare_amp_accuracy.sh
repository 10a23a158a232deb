#!/usr/bin/env bash
# Issue #12's accuracy goal: the default recipe (`cnn` on Fashion-MNIST; AdamW, one-cycle, light
# augmentation, label smoothing 0.1) for EPOCHS epochs, in float32, `--amp bf16` and `--amp fp16`,
# for each seed, on the CPU; JOBS runs at a time with THREADS threads each. Prints one JSON line
# per run (the final test accuracy), then per precision the mean and the min-max over the seeds and
# the mean's difference to float32's, in points.
#   bench/compare_amp_accuracy.sh build/bin/ember
#   (defaults: SEEDS="1 2 3" AMPS="off bf16 fp16" EPOCHS=2 JOBS=2 THREADS=1; EXTRA: more `ember train`
#   arguments, e.g. EXTRA="--max-steps 20 --eval-limit 500" for a quick look)
set -euo pipefail
ember="${1:-build/bin/ember}"
seeds="${SEEDS:-1 2 3}"
amps="${AMPS:-off bf16 fp16}"
epochs="${EPOCHS:-2}"
jobs="${JOBS:-2}"
threads="${THREADS:-1}"
export EXTRA="${EXTRA:-}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

for amp in $amps; do for s in $seeds; do echo "$amp $s"; done; done |
  xargs -P "$jobs" -L1 sh -c '"$0" train --device cpu --epochs "$1" --seed "$5" --amp "$4" --threads "$2" --quiet \
    --metrics "$3/m_$4_$5.jsonl" $EXTRA' "$ember" "$epochs" "$threads" "$dir" 2>/dev/null || true
python3 - "$dir" "$amps" "$seeds" <<'PY'
import json, os, statistics, sys
d, amps, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
acc = {}
for amp in amps:
    for s in seeds:
        p = os.path.join(d, f"m_{amp}_{s}.jsonl")
        ev = [json.loads(l) for l in open(p)] if os.path.exists(p) else []
        summ = [e for e in ev if e.get("event") == "summary"]
        if not summ:
            print(json.dumps({"amp": amp, "seed": int(s), "error": "no summary"}))
            continue
        acc.setdefault(amp, []).append(100 * summ[-1]["test_acc"])
        print(json.dumps({"amp": amp, "seed": int(s), "test_acc": summ[-1]["test_acc"],
                          "seconds": round(summ[-1]["seconds"], 1)}))
base = statistics.mean(acc["off"]) if "off" in acc else None
for amp, v in acc.items():
    r = {"compare": "amp_accuracy", "amp": amp, "runs": len(v), "mean": round(statistics.mean(v), 2),
         "min": round(min(v), 2), "max": round(max(v), 2)}
    if base is not None: r["vs_f32_points"] = round(statistics.mean(v) - base, 2)
    print(json.dumps(r))
PY
