#!/usr/bin/env bash
# CPU mixed precision side by side: the `cnn` recipe (Adam lr 1e-3, batch 64, no augmentation,
# STEPS steps) in float32 and with bf16 autocast, in ember (`--amp bf16` on its measured paths;
# with EMBER_CPU_AMX=off, without AMX tiles — what a CPU without AMX runs; with EMBER_CPU_BF16=off,
# on the f32 fallback) and in PyTorch 2.x (scripts/python-env.sh; torch.autocast('cpu',
# dtype=torch.bfloat16)). One run of each per round, ROUNDS rounds, so a shared machine's noise
# hits every configuration alike. The kernels' measured choices (Note [Kernels chosen by
# measurement]) go to a fresh file that a short warm-up run of each ember configuration fills
# first, so every timed run takes the same choices. Prints one JSON line per run, then one
# summary line per configuration: the median training images/s and its ratio to ember float32.
#   bench/compare_amp_cpu.sh build/bin/ember            (ROUNDS=3 STEPS=300 THREADS=2)
# Without the Python environment (scripts/python-env.sh --check fails) the PyTorch runs are left out.
set -euo pipefail
ember="${1:-build/bin/ember}"
rounds="${ROUNDS:-3}"
steps="${STEPS:-300}"
threads="${THREADS:-2}"
here=$(cd "$(dirname "$0")" && pwd)
python=$("$here/../scripts/python-env.sh" --check || true)
out=$(mktemp)
m=$(mktemp)
choices=$(mktemp)
rm -f "$choices"  # ember creates it
export EMBER_KERNEL_CHOICES="$choices"
trap 'rm -f "$out" "$m" "$choices"' EXIT

ember_train() {  # amp, EMBER_CPU_BF16 value, EMBER_CPU_AMX value, steps
  EMBER_CPU_BF16="$2" EMBER_CPU_AMX="$3" "$ember" train --model cnn --optimizer adam --lr 1e-3 --batch-size 64 \
    --no-augment --max-steps "$4" --eval-limit 1000 --threads "$threads" --amp "$1" --quiet --metrics "$m"
}

ember_run() {  # name, amp, EMBER_CPU_BF16 value, EMBER_CPU_AMX value
  ember_train "$2" "$3" "$4" "$steps"
  python3 - "$m" "$1" "$threads" <<'PY' | tee -a "$out"
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") == "summary":
        print(json.dumps({"config": sys.argv[2], "threads": int(sys.argv[3]), "images_per_sec": e["images_per_sec"],
                          "test_acc": e["test_acc"]}))
PY
}

torch_run() {  # name, amp
  [ -n "$python" ] || return 0
  "$python" "$here/pytorch_cnn.py" --threads "$threads" --amp "$2" --max-steps "$steps" |
    python3 -c "import json,sys; e=json.loads(sys.stdin.readline()); print(json.dumps({'config': '$1',
'threads': e['threads'], 'images_per_sec': e['images_per_sec'], 'test_acc': e['test_acc'], 'torch': e['torch']}))" |
    tee -a "$out"
}

# Warm-up: each configuration's shapes measured once (the last partial batch's and the
# evaluation's too), before any timed run.
for config in "off||" "bf16||" "bf16||off" "bf16|off|"; do
  IFS='|' read -r amp bf16 amx <<<"$config"
  ember_train "$amp" "$bf16" "$amx" 20 >/dev/null
done
for ((r = 0; r < rounds; ++r)); do
  ember_run ember_f32 off "" ""
  ember_run ember_bf16 bf16 "" ""
  ember_run ember_bf16_no_amx bf16 "" off
  ember_run ember_bf16_fallback bf16 off ""
  torch_run pytorch_f32 off
  torch_run pytorch_bf16 bf16
done
info=$("$ember" info --json)
python3 - "$out" "$info" "$steps" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
info = json.loads(sys.argv[2])
base = statistics.median(r["images_per_sec"] for r in rows if r["config"] == "ember_f32")
for name in dict.fromkeys(r["config"] for r in rows):
    rs = [r for r in rows if r["config"] == name]
    ips = statistics.median(r["images_per_sec"] for r in rs)
    s = {"compare": "cnn_amp_cpu", "config": name, "threads": rs[0]["threads"], "steps": int(sys.argv[3]),
         "runs": len(rs), "images_per_sec": round(ips, 1), "min": round(min(r["images_per_sec"] for r in rs), 1),
         "max": round(max(r["images_per_sec"] for r in rs), 1), "vs_ember_f32": round(ips / base, 2),
         "cpu": info["cpu"]["model"], "bf16_gemm": info["gemm"]["bf16"]}
    if "torch" in rs[0]:
        s["torch"] = rs[0]["torch"]
    print(json.dumps(s))
PY
