#!/usr/bin/env bash
# `ember train --device cuda --cuda-graphs` gives the same weights, bit for bit, as the same run
# without graphs (Note [Training with CUDA graphs] in train/graph_step.h). A 256-image IDX dataset
# at batch 24 makes epochs of 10 full batches and a partial one, so 25 steps cover the eager warm-up,
# the capture, replays, the eager partial batch, evaluation between epochs and replays after it.
# The loss and accuracy the metrics report for replayed steps equal the eager run's. Two parts, two
# ctests (each run takes a few seconds on the emulator):
#   train_cuda_graphs.sh EMBER steps   Adam, SGD, the data on the device, --amp bf16 with
#                                      channels-last; the capture is reported; the flag is refused
#                                      where it cannot work
#   train_cuda_graphs.sh EMBER amp     --amp fp16 with steps skipped for overflows inside the
#                                      replays, --clip-grad-norm 1, and both with SGD; the saved
#                                      optimizer state (moments, step counts) and loss scaler are
#                                      the eager run's too, and so is every step's loss scale
set -euo pipefail
ember="$1"
part="${2:-steps}"
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
same_weights() {  # same_weights NAME WHAT: NAME-eager and NAME-graphs saved the same weights
  python3 "$here/tensors_equal.py" "$1-eager.safetensors" "$1-graphs.safetensors" || {
    echo "FAIL: --cuda-graphs $2 trained different weights"
    exit 1
  }
}
captured() {  # captured FILE WHAT: the progress output in FILE says the second step was captured
  grep -q "step 2 captured as a CUDA graph of [0-9]* nodes" "$1" || {
    echo "FAIL: $2: no capture reported:"
    cat "$1"
    exit 1
  }
}
# Every step event of each NAME-graphs run equals NAME-eager's (loss, accuracy, lr, loss scale),
# and so do the epochs' accuracies; with fp16, steps were skipped among the replayed ones.
same_metrics() {  # same_metrics NAME...
  python3 - "$@" <<'PY'
import json, sys
def steps(path):
    events = [json.loads(l) for l in open(path)]
    return events[0], [e for e in events if e.get("event") == "step"], [e for e in events if e.get("event") == "epoch"]
for name in sys.argv[1:]:
    (ce, se, ee), (cg, sg, eg) = steps(f"{name}-eager.jsonl"), steps(f"{name}-graphs.jsonl")
    assert ce["cuda_graphs"] is False and cg["cuda_graphs"] is True, (ce["cuda_graphs"], cg["cuda_graphs"])
    assert len(se) == len(sg) == 25, (len(se), len(sg))
    for a, b in zip(se, sg):
        for k in ("loss", "acc", "lr", "loss_scale"):
            assert a.get(k) == b.get(k), f"{name} step {a['step']}: {k} {a.get(k)} (eager) != {b.get(k)} (--cuda-graphs)"
    assert [e["train_acc"] for e in ee] == [e["train_acc"] for e in eg], f"{name}: epoch train accuracy differs"
    assert [e["test_acc"] for e in ee] == [e["test_acc"] for e in eg], f"{name}: test accuracy differs"
    if "fp16" in name:
        # S fell (the next step skipped) after steps that were replayed: after the warm-up and capture.
        scales = [e["loss_scale"] for e in se]
        falls = [i + 1 for i in range(1, len(scales)) if scales[i] < scales[i - 1]]
        assert len([s for s in falls if s > 3]) >= 3, f"{name}: too few skipped steps to test ({scales})"
        print(f"{name}: S fell after steps {falls}")
PY
}

if [ "$part" = steps ]; then
  start=$(date +%s.%N)
  run plain-eager
  mid=$(date +%s.%N)
  run plain-graphs --cuda-graphs
  end=$(date +%s.%N)
  same_weights plain ""
  # Once more, not quiet: it says that it captured the step (and it did, on the second step).
  "$ember" train --device cuda --data data --model cnn --batch-size 24 --max-steps 3 --eval-limit 32 --cuda-graphs \
    2>progress.txt >/dev/null
  captured progress.txt "--cuda-graphs"
  # SGD with momentum (its buffer made by the eager warm-up step, then updated by the graph).
  run sgd-eager --optimizer sgd --lr 0.05
  run sgd-graphs --optimizer sgd --lr 0.05 --cuda-graphs
  same_weights sgd "--optimizer sgd"
  # With the training set on the device (--data-on-device: batches gathered, cropped and flipped by
  # kernels, then copied into the graph's static inputs), with the default augmentation.
  run dod-eager --data-on-device --augment light
  run dod-graphs --data-on-device --augment light --cuda-graphs
  same_weights dod "--data-on-device"
  # Mixed precision in channels-last: the captured step runs its forward pass under the bf16
  # autocast region, as the eager step does.
  run bf16-eager --amp bf16 --channels-last
  LOUD=1 run bf16-graphs --amp bf16 --channels-last --cuda-graphs 2>bf16-progress.txt >/dev/null
  same_weights bf16 "--amp bf16 --channels-last"
  captured bf16-progress.txt "--amp bf16 --cuda-graphs"
  same_metrics plain sgd bf16
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
elif [ "$part" = amp ]; then
  # float16 with loss scaling: the scaler doubles S after every 2 clean steps (a testing hook), so
  # S overflows again and again and the replays skip steps on the device.
  EMBER_FAULT=amp-growth-interval:2 run fp16-eager --amp fp16 --save fp16-eager
  EMBER_FAULT=amp-growth-interval:2 LOUD=1 run fp16-graphs --amp fp16 --save fp16-graphs --cuda-graphs \
    2>fp16-progress.txt >/dev/null
  same_weights fp16 "--amp fp16"
  captured fp16-progress.txt "--amp fp16 --cuda-graphs"
  # Gradient clipping (norm and coefficient on the device), and both with SGD's momentum.
  run clip-eager --clip-grad-norm 1 --save clip-eager
  run clip-graphs --clip-grad-norm 1 --save clip-graphs --cuda-graphs
  same_weights clip "--clip-grad-norm 1"
  EMBER_FAULT=amp-growth-interval:2 run fp16-sgd-eager --amp fp16 --clip-grad-norm 0.5 --optimizer sgd --lr 0.05
  EMBER_FAULT=amp-growth-interval:2 run fp16-sgd-graphs --amp fp16 --clip-grad-norm 0.5 --optimizer sgd --lr 0.05 \
    --cuda-graphs
  same_weights fp16-sgd "--amp fp16 --clip-grad-norm 0.5 --optimizer sgd"
  same_metrics fp16 clip fp16-sgd
  # The checkpoints: the optimizer's moments bit for bit, its step counts (skipped steps not
  # counted), the schedule, the loader's position and the loss scaler, as the eager run's.
  state_file() {  # state_file DIR: the training-state file of DIR's checkpoint
    python3 -c 'import json, sys; print(sys.argv[1] + "/" + json.load(open(sys.argv[1] + "/checkpoint.json"))["state"]["path"])' "$1"
  }
  for name in fp16 clip; do
    python3 "$here/tensors_equal.py" "$(state_file $name-eager)" "$(state_file $name-graphs)" || {
      echo "FAIL: --cuda-graphs ($name) saved a different optimizer state"
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
    counts = {v for k, v in e["optimizer"]["scalars"].items() if k.endswith(".step")}
    if name == "fp16":  # the skipped steps were not counted: fewer Adam steps than the run's 25
        assert len(counts) == 1 and counts.pop() < 25, counts
    else:
        assert counts == {25}, counts
PY
  echo "PASS: --cuda-graphs with --amp fp16 and --clip-grad-norm trains the same weights and state as eager steps"
else
  echo "train_cuda_graphs.sh: unknown part '$part' (steps or amp)" >&2
  exit 2
fi
