#!/usr/bin/env bash
# `ember train --device cuda --cuda-graphs` gives the same weights, bit for bit, as the same run
# without graphs (Note [Training with CUDA graphs] in train/graph_step.h). A 256-image IDX dataset
# at batch 24 makes epochs of 10 full batches and a partial one, so 25 steps cover the eager warm-up,
# the capture, replays, the eager partial batch, evaluation between epochs and replays after it.
# Also: the loss and accuracy the metrics report for replayed steps equal the eager run's, and the
# flag is refused where it cannot work. On the emulator each run takes a few seconds.
set -euo pipefail
ember="$1"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 "$here/make_data.py" idx data >/dev/null

run() {  # run NAME [FLAGS...]
  local name="$1"
  shift
  "$ember" train --device cuda --data data --model cnn --batch-size 24 --max-steps 25 --eval-limit 32 \
    --scheduler cosine --save-weights "$name.safetensors" --metrics "$name.jsonl" --quiet "$@"
}
start=$(date +%s.%N)
run eager
mid=$(date +%s.%N)
run graphs --cuda-graphs
end=$(date +%s.%N)
# Once more, not quiet: it says that it captured the step (and it did, on the second step).
"$ember" train --device cuda --data data --model cnn --batch-size 24 --max-steps 3 --eval-limit 32 --cuda-graphs \
  2>progress.txt >/dev/null
grep -q "step 2 captured as a CUDA graph of [0-9]* nodes" progress.txt || {
  echo "FAIL: no capture reported:"
  cat progress.txt
  exit 1
}

python3 "$here/tensors_equal.py" eager.safetensors graphs.safetensors || {
  echo "FAIL: --cuda-graphs trained different weights"
  exit 1
}
# SGD with momentum (its buffer made by the eager warm-up step, then updated by the graph).
run sgd-eager --optimizer sgd --lr 0.05
run sgd-graphs --optimizer sgd --lr 0.05 --cuda-graphs
python3 "$here/tensors_equal.py" sgd-eager.safetensors sgd-graphs.safetensors || {
  echo "FAIL: --cuda-graphs --optimizer sgd trained different weights"
  exit 1
}
# With the training set on the device (--data-on-device: batches gathered, cropped and flipped by
# kernels, then copied into the graph's static inputs), with the default augmentation.
run dod-eager --data-on-device --augment light
run dod-graphs --data-on-device --augment light --cuda-graphs
python3 "$here/tensors_equal.py" dod-eager.safetensors dod-graphs.safetensors || {
  echo "FAIL: --cuda-graphs --data-on-device trained different weights"
  exit 1
}
# Mixed precision in channels-last: the captured step runs its forward pass under the bf16
# autocast region, as the eager step does (bf16 has no loss scaler to read back).
run amp-eager --amp bf16 --channels-last
run amp-graphs --amp bf16 --channels-last --cuda-graphs
python3 "$here/tensors_equal.py" amp-eager.safetensors amp-graphs.safetensors || {
  echo "FAIL: --cuda-graphs --amp bf16 --channels-last trained different weights"
  exit 1
}
"$ember" train --device cuda --data data --model cnn --batch-size 24 --max-steps 3 --eval-limit 32 --cuda-graphs \
  --amp bf16 --channels-last 2>amp-progress.txt >/dev/null
grep -q "step 2 captured as a CUDA graph" amp-progress.txt || {
  echo "FAIL: --amp bf16 --cuda-graphs did not capture:"
  cat amp-progress.txt
  exit 1
}
python3 - eager.jsonl graphs.jsonl <<'PY'
import json, sys
def steps(path):
    events = [json.loads(l) for l in open(path)]
    return events[0], [e for e in events if e.get("event") == "step"], [e for e in events if e.get("event") == "epoch"]
(ce, se, ee), (cg, sg, eg) = steps(sys.argv[1]), steps(sys.argv[2])
assert ce["cuda_graphs"] is False and cg["cuda_graphs"] is True, (ce["cuda_graphs"], cg["cuda_graphs"])
assert len(se) == len(sg) == 25, (len(se), len(sg))
for a, b in zip(se, sg):
    for k in ("loss", "acc", "lr"):
        assert a[k] == b[k], f"step {a['step']}: {k} {a[k]} (eager) != {b[k]} (--cuda-graphs)"
assert [e["train_acc"] for e in ee] == [e["train_acc"] for e in eg], "epoch train accuracy differs"
assert [e["test_acc"] for e in ee] == [e["test_acc"] for e in eg], "test accuracy differs"
PY
python3 -c "import sys; print(f'eager {float(sys.argv[2]) - float(sys.argv[1]):.1f} s, --cuda-graphs {float(sys.argv[3]) - float(sys.argv[2]):.1f} s (25 steps each)')" "$start" "$mid" "$end"

# Refused, with a message naming what does not fit.
refused() {  # refused EXPECTED-TEXT FLAGS...
  local want="$1"
  shift
  if "$ember" train --data data --max-steps 1 --quiet --cuda-graphs "$@" >out.txt 2>&1; then
    echo "FAIL: --cuda-graphs $* was accepted"
    exit 1
  fi
  grep -q -- "$want" out.txt || {
    echo "FAIL: --cuda-graphs $*: expected '$want' in:"
    cat out.txt
    exit 1
  }
}
refused "needs a CUDA device" --device cpu
refused "--clip-grad-norm" --device cuda --clip-grad-norm 1
refused "--profile" --device cuda --profile
refused "--amp fp16" --device cuda --amp fp16
echo "PASS: --cuda-graphs trains the same weights as eager steps"
