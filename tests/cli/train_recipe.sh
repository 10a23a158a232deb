#!/usr/bin/env bash
# `ember train --accum-steps`, the epoch schedules and the plateau / early-stopping watchers as a
# user runs them, on 256 MNIST-style images (8 batches of 32 per epoch):
# * --accum-steps 2 (and 3) with --batch-size 32 trains as --batch-size 64 (and 96) does: the same
#   step count, step losses and final weights within 1e-6 absolute (simple_cnn has no batch norm; the
#   gradients' float32 sums run in another order); a run stopped by --max-steps and resumed ends
#   with the uninterrupted run's weights bit for bit; with --amp fp16 the loss scaler moves once per
#   step, as with the large batch; --accum-steps 0 / -2, --cuda-graphs with it
#   and a resume with another K are clear errors;
# * --scheduler multistep:1 / exponential:0.5 (with and without --warmup-epochs) give the lrs of
#   PyTorch's schedulers stepped per epoch, read from the step events, and resume exactly;
#   malformed values are errors;
# * --scheduler plateau and --early-stop-patience against a reference computed here from the
#   run's own evaluations (PyTorch's ReduceLROnPlateau rule, Lightning's early stopping); the stop
#   reason in the printed summary, the metrics and the report; a resume across an evaluation ends
#   with the same weights, lrs and decisions; a metric the run does not produce is an error
#   before anything is written.
set -euo pipefail
ember="$1"
here="$(cd "$(dirname "$0")" && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$here/make_data.py" idx "$work/idx" >/dev/null
base=(train --data "$work/idx" --model simple_cnn --optimizer sgd --momentum 0.9 --no-augment --threads 2 --quiet)
common=("${base[@]}" --lr 0.05 --epochs 2)

# The error of a command that must fail: exit 1 and a message holding $1.
fails_with() {
  local want="$1"; shift
  local out rc=0
  out=$("$ember" "$@" 2>&1) || rc=$?
  [ "$rc" = 1 ] || { echo "expected exit 1, got $rc from: $*"; echo "$out"; exit 1; }
  grep -qF -- "$want" <<<"$out" || { echo "expected '$want' from: $*"; echo "$out"; exit 1; }
}

# ---- gradient accumulation ----
"$ember" "${common[@]}" --batch-size 64 --metrics "$work/b64.jsonl" --save-weights "$work/b64.safetensors"
"$ember" "${common[@]}" --batch-size 32 --accum-steps 2 --metrics "$work/a2.jsonl" --save "$work/a2"
"$ember" "${common[@]}" --batch-size 96 --metrics "$work/b96.jsonl" --save-weights "$work/b96.safetensors"
"$ember" "${common[@]}" --batch-size 32 --accum-steps 3 --metrics "$work/a3.jsonl" --save-weights "$work/a3.safetensors"
# Stopped after 3 steps (inside epoch 1), then resumed.
"$ember" "${common[@]}" --batch-size 32 --accum-steps 2 --max-steps 3 --save "$work/a2r"
"$ember" train --resume "$work/a2r" --threads 2 --quiet
python3 "$here/tensors_equal.py" "$work/a2/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["weights"]["path"])' "$work/a2/checkpoint.json")" \
  "$work/a2r/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["weights"]["path"])' "$work/a2r/checkpoint.json")"
python3 - "$work" <<'PY'
import json, struct, sys
work = sys.argv[1]
def events(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
def floats(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n]); header.pop("__metadata__", None)
    out = {}
    for k, v in header.items():
        if v["dtype"] == "F32":
            b = data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
            out[k] = struct.unpack(f"<{len(b) // 4}f", b)
    return out
def last_weights(d):
    return f"{work}/{d}/" + json.load(open(f"{work}/{d}/checkpoint.json"))["weights"]["path"]
for big, acc, k, spe, wa, wb in [("b64", "a2", 2, 4, f"{work}/b64.safetensors", last_weights("a2")),
                                 ("b96", "a3", 3, 3, f"{work}/b96.safetensors", f"{work}/a3.safetensors")]:
    eb, ea = events(big), events(acc)
    assert ea[0]["accum_steps"] == k and ea[0]["steps_per_epoch"] == spe, ea[0]
    assert eb[0]["steps_per_epoch"] == spe, eb[0]
    lb = [e["loss"] for e in eb if e["event"] == "step"]
    la = [e["loss"] for e in ea if e["event"] == "step"]
    assert len(la) == len(lb) == 2 * spe, (len(la), len(lb))
    # Absolute: a loss near 0 (-log p, p near 1) has only absolute float32 precision.
    worst = max(abs(x - y) for x, y in zip(la, lb))
    assert worst <= 1e-6, f"{acc}: step losses differ by {worst:.2e}: {la} vs {lb}"
    fa, fb = floats(wa), floats(wb)
    assert fa.keys() == fb.keys() and fa
    diff = max(abs(x - y) for name in fa for x, y in zip(fa[name], fb[name]))
    assert diff <= 1e-6, f"{acc}: weights differ by {diff:.2e}"
    assert lb[-1] < lb[0], f"the loss did not go down: {lb}"
    print(f"--accum-steps {k} x 32 = --batch-size {32 * k}: {len(la)} step losses within {worst:.1e}, "
          f"weights within {diff:.1e}")
PY
# --amp fp16: the loss scaler steps and updates once per optimizer step. With S doubling after
# every clean step (EMBER_FAULT=amp-growth-interval:1) the scaled gradients overflow now and then;
# S after each step (the metrics' loss_scale), a backoff included, is the large batch's.
fp16=("${common[@]}" --amp fp16 --clip-grad-norm 1)
EMBER_FAULT=amp-growth-interval:1 "$ember" "${fp16[@]}" --batch-size 64 --metrics "$work/f64.jsonl"
EMBER_FAULT=amp-growth-interval:1 "$ember" "${fp16[@]}" --batch-size 32 --accum-steps 2 --metrics "$work/fa2.jsonl"
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def steps(name):
    return [e for e in map(json.loads, open(f"{work}/{name}.jsonl")) if e["event"] == "step"]
a, b = steps("f64"), steps("fa2")
sa, sb = [e["loss_scale"] for e in a], [e["loss_scale"] for e in b]
assert sa == sb and len(sa) == 8, (sa, sb)
assert any(y < x for x, y in zip(sa, sa[1:])), f"no overflow, no backoff: the check checks less than it says: {sa}"
worst = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
assert worst <= 1e-3, f"fp16 step losses differ by {worst}"  # float16 products: ~1e-5 seen
print(f"--amp fp16 --accum-steps 2: the loss scale of every step equals the large batch's ({sa}); losses within {worst:.1e}")
PY
fails_with "--accum-steps must be at least 1" "${common[@]}" --accum-steps 0
fails_with "--accum-steps must be at least 1" "${common[@]}" --accum-steps -2
fails_with "--cuda-graphs cannot be combined with --accum-steps 2" "${common[@]}" --accum-steps 2 --cuda-graphs
fails_with "--resume: --accum-steps 4 conflicts with the saved run's 2" train --resume "$work/a2r" --accum-steps 4

# ---- epoch schedules ----
"$ember" "${base[@]}" --batch-size 32 --lr 0.1 --scheduler multistep:1 --epochs 2 --metrics "$work/ms.jsonl"
"$ember" "${base[@]}" --batch-size 32 --lr 0.1 --scheduler exponential:0.5 --epochs 3 --metrics "$work/exp.jsonl"
"$ember" "${base[@]}" --batch-size 32 --lr 0.1 --scheduler multistep:1 --warmup-epochs 1 --epochs 3 \
  --metrics "$work/wms.jsonl"
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def lrs(name):
    return [e["lr"] for e in map(json.loads, open(f"{work}/{name}.jsonl")) if e["event"] == "step"]
# lr of each step (8 steps per epoch), as PyTorch computes it: MultiStepLR/ExponentialLR stepped
# per epoch multiply the current lr by gamma; the warmup is LinearLR(0.01, 8 steps) then the
# schedule restarted at its epoch 0 (SequentialLR).
want_ms = [0.1] * 8 + [0.1 * 0.1] * 8
want_exp = [0.1] * 8 + [0.1 * 0.5] * 8 + [0.1 * 0.5 * 0.5] * 8
warm = [0.1 * (0.01 + (1 - 0.01) * i / 8) for i in range(8)]
want_wms = warm + [0.1] * 8 + [0.1 * 0.1] * 8
for name, want in [("ms", want_ms), ("exp", want_exp), ("wms", want_wms)]:
    got = lrs(name)
    assert len(got) == len(want) and all(abs(g - w) <= 1e-12 * w for g, w in zip(got, want)), (name, got, want)
    print(f"--scheduler {name}: the {len(got)} step lrs of PyTorch's schedule")
PY
# A warmup-then-exponential run stopped inside epoch 2 and resumed: the same lrs and weights.
sched=("${base[@]}" --batch-size 32 --lr 0.1 --scheduler exponential:0.5 --warmup-epochs 1 --epochs 3)
"$ember" "${sched[@]}" --save "$work/e1" --metrics "$work/e1.jsonl"
"$ember" "${sched[@]}" --save "$work/e2" --max-steps 11
"$ember" train --resume "$work/e2" --threads 2 --quiet --metrics "$work/e2.jsonl"
python3 "$here/tensors_equal.py" "$work/e1/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["weights"]["path"])' "$work/e1/checkpoint.json")" \
  "$work/e2/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["weights"]["path"])' "$work/e2/checkpoint.json")"
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def lrs(name):
    return [e["lr"] for e in map(json.loads, open(f"{work}/{name}.jsonl")) if e["event"] == "step"]
assert lrs("e2") == lrs("e1")[11:], (lrs("e2"), lrs("e1"))
print("--scheduler exponential:0.5 --warmup-epochs 1 resumed at step 11: the same lrs and weights")
PY
for bad in multistep multistep: multistep:x multistep:2,1 multistep:0 multistep:1, exponential:0 exponential:2 \
           exponential:abc plateau:3 cosine:1 warmup; do
  fails_with "--scheduler" "${common[@]}" --scheduler "$bad"
done
fails_with "--warmup-epochs cannot be combined with --scheduler plateau" "${common[@]}" --scheduler plateau --warmup-epochs 1
fails_with "--plateau-patience applies to --scheduler plateau only" "${common[@]}" --plateau-patience 2
fails_with "--plateau-factor must be in (0, 1)" "${common[@]}" --scheduler plateau --plateau-factor 1
fails_with "--early-stop-patience must be at least 1" "${common[@]}" --early-stop-patience 0

# ---- plateau and early stopping ----
# A metric the run does not produce: IDX data is evaluated on its test set. Nothing is written.
fails_with "--plateau-metric val_loss: this run does not produce it" "${common[@]}" --scheduler plateau \
  --plateau-metric val_loss --save "$work/none"
fails_with "--early-stop-metric val_acc: this run does not produce it" "${common[@]}" --early-stop-patience 2 \
  --early-stop-metric val_acc --save "$work/none"
fails_with "--early-stop-metric must be test_acc, test_loss, val_acc or val_loss" "${common[@]}" \
  --early-stop-patience 2 --early-stop-metric accuracy
[ ! -e "$work/none" ] || { echo "a refused run wrote $work/none"; exit 1; }
watch=(train --data "$work/idx" --model simple_cnn --optimizer sgd --momentum 0.9 --lr 0.05 --no-augment --threads 2
       --batch-size 32 --scheduler plateau --plateau-patience 0 --plateau-factor 0.5 --plateau-metric test_acc
       --early-stop-patience 2 --early-stop-metric test_loss --epochs 8)
"$ember" "${watch[@]}" --save "$work/p" --metrics "$work/p.jsonl" >"$work/p.out" 2>"$work/p.err"
# The same run stopped after its second epoch's evaluation, then resumed.
"$ember" "${watch[@]}" --quiet --save "$work/pr" --max-steps 16
"$ember" train --resume "$work/pr" --threads 2 --quiet --max-steps 1000 --metrics "$work/pr.jsonl" >"$work/pr.out"
python3 "$here/tensors_equal.py" "$work/p/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["weights"]["path"])' "$work/p/checkpoint.json")" \
  "$work/pr/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["weights"]["path"])' "$work/pr/checkpoint.json")"
python3 - "$work" <<'PY'
import json, math, sys
work = sys.argv[1]
ev = [json.loads(l) for l in open(f"{work}/p.jsonl")]
epochs = [e for e in ev if e["event"] == "epoch"]
steps = [e for e in ev if e["event"] == "step"]
# The reference: ReduceLROnPlateau(mode max, factor 0.5, patience 0, threshold 1e-4 rel) on
# test_acc, and early stopping (mode min, patience 2) on test_loss, over the run's evaluations.
lr, best, bad = 0.05, -math.inf, 0
es_best, es_bad, stop_at = math.inf, 0, None
want_lrs = []
for e in epochs:
    want_lrs += [lr] * 8
    acc, loss = e["test_acc"], e["test_loss"]
    if acc > best * (1 + 1e-4):
        best, bad = acc, 0
    else:
        bad += 1
    if bad > 0:
        lr, bad = max(lr * 0.5, 0.0), 0
    if loss < es_best:
        es_best, es_bad = loss, 0
    else:
        es_bad += 1
    if es_bad >= 2:
        stop_at = e["epoch"]
        break
got = [e["lr"] for e in steps]
assert got == want_lrs, (got, want_lrs)
assert stop_at is not None and stop_at == epochs[-1]["epoch"] and stop_at < 8, (stop_at, len(epochs))
assert any(l < 0.05 for l in got), "the plateau never lowered the lr: the test checks nothing"
summary = ev[-1]
assert summary["event"] == "summary" and summary["stop_reason"] == "early_stop", summary
assert "test_loss did not improve for 2 evaluation(s)" in summary["stop_detail"], summary
out = open(f"{work}/p.out").read()
assert f"stopped early after epoch {stop_at} of 8" in out and "test_loss did not improve" in out, out
assert "did not improve" in open(f"{work}/p.err").read()
report = open(f"{work}/p/report.html").read()
assert "stopped early at step" in report and "test_loss did not improve" in report
resumed = [json.loads(l) for l in open(f"{work}/pr.jsonl")]
assert [e["lr"] for e in resumed if e["event"] == "step"] == got[16:], "the resumed run's lrs differ"
assert resumed[-1]["stop_reason"] == "early_stop" and resumed[-1]["stop_detail"] == summary["stop_detail"]
print(f"plateau + early stopping: lrs {sorted(set(got), reverse=True)}, stopped after epoch {stop_at}; "
      "the resumed run took the same decisions")
PY
# A run that stopped early trains no further when resumed.
out=$("$ember" train --resume "$work/p" --threads 2 2>&1)
grep -qF "stopped early" <<<"$out" || { echo "a resumed early-stopped run: $out"; exit 1; }
echo "train_recipe: OK"
