#!/usr/bin/env bash
# `ember train --device cuda --cuda-graphs` gives the same weights, bit for bit, as the same run
# without graphs (Note [Training with CUDA graphs] in train/graph_step.h): with Adam, SGD, the data
# on the device, --amp bf16, --amp fp16 with steps skipped for overflows inside the replays, and
# --clip-grad-norm. A 256-image IDX dataset at batch 24 makes epochs of 10 full batches and a
# partial one, so 25 steps cover the eager warm-up, the capture, replays, the eager partial batch,
# evaluation between epochs and replays after it. Also: the loss and accuracy the metrics report
# for replayed steps equal the eager run's (and fp16's loss scale), the saved optimizer state
# (moments, step counts) and loss scaler are the eager run's, and the flag is refused where it
# cannot work. On the emulator each run takes a few seconds.
set -euo pipefail
ember="$1"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 "$here/make_data.py" idx data >/dev/null

run() {  # run NAME [FLAGS...]   (LOUD=1 run ...: with the progress output)
  local name="$1" quiet=--quiet
  shift
  [ -z "${LOUD:-}" ] || quiet=
  "$ember" train --device cuda --data data --model cnn --batch-size 24 --max-steps 25 --eval-limit 32 \
    --scheduler cosine --save-weights "$name.safetensors" --metrics "$name.jsonl" $quiet "$@"
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
# float16 with loss scaling: the scaler doubles S after every 2 clean steps (a testing hook), so S
# overflows again and again and the replays skip steps on the device. The checkpoints hold the
# optimizer's moments and step counts and the scaler's state: the same as the eager run's.
EMBER_FAULT=amp-growth-interval:2 run fp16-eager --amp fp16 --save fp16-eager
EMBER_FAULT=amp-growth-interval:2 LOUD=1 run fp16-graphs --amp fp16 --save fp16-graphs --cuda-graphs \
  2>fp16-progress.txt >/dev/null
grep -q "step 2 captured as a CUDA graph" fp16-progress.txt || {
  echo "FAIL: --amp fp16 --cuda-graphs did not capture:"
  cat fp16-progress.txt
  exit 1
}
python3 "$here/tensors_equal.py" fp16-eager.safetensors fp16-graphs.safetensors || {
  echo "FAIL: --cuda-graphs --amp fp16 trained different weights"
  exit 1
}
# Gradient clipping (norm and coefficient on the device), and both with SGD's momentum.
run clip-eager --clip-grad-norm 1 --save clip-eager
run clip-graphs --clip-grad-norm 1 --save clip-graphs --cuda-graphs
EMBER_FAULT=amp-growth-interval:2 run fp16-clip-eager --amp fp16 --clip-grad-norm 0.5 --optimizer sgd --lr 0.05
EMBER_FAULT=amp-growth-interval:2 run fp16-clip-graphs --amp fp16 --clip-grad-norm 0.5 --optimizer sgd --lr 0.05 \
  --cuda-graphs
for name in clip fp16-clip; do
  python3 "$here/tensors_equal.py" $name-eager.safetensors $name-graphs.safetensors || {
    echo "FAIL: --cuda-graphs ($name) trained different weights"
    exit 1
  }
done
python3 - <<'PY'
import json, struct
def state(run):
    manifest = json.load(open(f"{run}/checkpoint.json"))
    with open(f"{run}/{manifest['state']['path']}", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        meta = json.loads(f.read(n))["__metadata__"]
    return json.loads(meta["ember.state"])
for name in ("fp16", "clip"):
    e, g = state(f"{name}-eager"), state(f"{name}-graphs")
    for key in ("step", "epoch", "optimizer", "scheduler", "loader"):
        assert e[key] == g[key], f"{name}: the saved {key} differs: {e[key]} (eager) != {g[key]} (--cuda-graphs)"
    scaler = {k: v for k, v in e["extra"].items() if k.startswith("grad_scaler.")}
    assert scaler == {k: v for k, v in g["extra"].items() if k.startswith("grad_scaler.")}, f"{name}: loss scaler differs"
    assert (len(scaler) > 0) == (name == "fp16"), scaler
    steps = {k: v for k, v in e["optimizer"]["scalars"].items() if k.endswith(".step")}
    if name == "fp16":  # skipped steps were not counted: fewer Adam steps than the run's 25
        assert steps and all(v == next(iter(steps.values())) < 25 for v in steps.values()), steps
PY
# The moments (exp_avg, exp_avg_sq) bit for bit.
state_file() {  # state_file DIR: the training-state file of DIR's checkpoint
  python3 -c 'import json, sys; print(sys.argv[1] + "/" + json.load(open(sys.argv[1] + "/checkpoint.json"))["state"]["path"])' "$1"
}
for name in fp16 clip; do
  python3 "$here/tensors_equal.py" "$(state_file $name-eager)" "$(state_file $name-graphs)" || {
    echo "FAIL: --cuda-graphs ($name) saved a different optimizer state"
    exit 1
  }
done
python3 - eager.jsonl graphs.jsonl fp16-eager.jsonl fp16-graphs.jsonl fp16-clip-eager.jsonl fp16-clip-graphs.jsonl \
  clip-eager.jsonl clip-graphs.jsonl <<'PY'
import json, sys
def steps(path):
    events = [json.loads(l) for l in open(path)]
    return events[0], [e for e in events if e.get("event") == "step"], [e for e in events if e.get("event") == "epoch"]
for eager, graphs in zip(sys.argv[1::2], sys.argv[2::2]):
    (ce, se, ee), (cg, sg, eg) = steps(eager), steps(graphs)
    assert ce["cuda_graphs"] is False and cg["cuda_graphs"] is True, (ce["cuda_graphs"], cg["cuda_graphs"])
    assert len(se) == len(sg) == 25, (len(se), len(sg))
    for a, b in zip(se, sg):
        for k in ("loss", "acc", "lr", "loss_scale"):
            assert a.get(k) == b.get(k), f"{graphs} step {a['step']}: {k} {a.get(k)} (eager) != {b.get(k)} (--cuda-graphs)"
    assert [e["train_acc"] for e in ee] == [e["train_acc"] for e in eg], f"{graphs}: epoch train accuracy differs"
    assert [e["test_acc"] for e in ee] == [e["test_acc"] for e in eg], f"{graphs}: test accuracy differs"
    if "fp16" in eager:
        # S fell (a skipped step) in steps that were replayed: after the warm-up and the capture.
        scales = [e["loss_scale"] for e in se]
        falls = [i + 1 for i in range(1, len(scales)) if scales[i] < scales[i - 1]]
        assert len([s for s in falls if s > 3]) >= 3, f"{eager}: too few skipped steps to test ({scales})"
        print(f"{eager}: S fell after steps {falls}")
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
refused "--profile" --device cuda --profile
echo "PASS: --cuda-graphs trains the same weights as eager steps"
