#!/usr/bin/env bash
# Side by side on the CPU: one ResNet-18 training step (224 x 224, batch 8, SGD with momentum),
# ember (bench_resnet_step) against current PyTorch 2.x from PyPI (bench/torch_resnet_step.py, in
# the environment of scripts/python-env.sh), float32 and bf16 autocast, 1 and 2 threads, ROUNDS
# rounds with the two sides interleaved. Prints every JSON line, then per configuration both
# sides' median step time over the rounds and ember's speed-up, with the CPU. Run on an idle machine.
# ember's measured kernel choices (Note [Kernels chosen by measurement]) go to a fresh file: the
# first round's warm-up step measures each shape, every later step takes the same choices. Both
# sides also print the calling thread's CPU time per step ("cpu_s"; the summary's ember_cpu_speedup):
# on one thread, on a machine shared with other work, it leaves out what the scheduler gave to others.
#   bench/compare_resnet_cpu.sh build/bench/bench_resnet_step        (ROUNDS=3 BATCH=8)
set -euo pipefail
bench="${1:-build/bench/bench_resnet_step}"
here=$(cd "$(dirname "$0")" && pwd)
python=$("$here/../scripts/python-env.sh")
out=$(mktemp)
choices=$(mktemp)
rm -f "$choices"  # ember creates it
export EMBER_KERNEL_CHOICES="$choices"
trap 'rm -f "$out" "$choices"' EXIT
for round in $(seq "${ROUNDS:-3}"); do
  for threads in 1 2; do
    "$bench" --batch "${BATCH:-8}" --threads "$threads" | tee -a "$out"
    "$python" "$here/torch_resnet_step.py" --batch "${BATCH:-8}" --threads "$threads" | tee -a "$out"
  done
done
"$python" - "$out" <<'PY'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by, cpu_by = collections.defaultdict(list), collections.defaultdict(list)
cpu = next((r["cpu"] for r in rows if "cpu" in r), "?")
for r in rows:
    by[(r["threads"], r["amp"], r["side"])].append(r["step_s"])
    cpu_by[(r["threads"], r["amp"], r["side"])].append(r["cpu_s"])
for (threads, amp) in sorted({(t, a) for t, a, _ in by}):
    e, p = statistics.median(by[(threads, amp, "ember")]), statistics.median(by[(threads, amp, "pytorch")])
    ec, pc = statistics.median(cpu_by[(threads, amp, "ember")]), statistics.median(cpu_by[(threads, amp, "pytorch")])
    print(json.dumps({"summary": "resnet18_step", "threads": threads, "amp": amp, "ember_s": e, "pytorch_s": p,
                      "ember_speedup": round(p / e, 2), "ember_cpu_s": ec, "pytorch_cpu_s": pc,
                      "ember_cpu_speedup": round(pc / ec, 2), "cpu": cpu}))
PY
