#!/usr/bin/env bash
# `ember train --channels-last` (Note [Memory formats] in core/memory_format.h): resnet_small on
# 256 MNIST-style images trains the same as without the flag. On the CPU the layers compute in NCHW
# and the copies move values exactly, so the step losses and the final weights are bit for bit
# those of the NCHW run (asserted with float equality), with --amp bf16 too. On the CUDA device (the
# emulator in CI) batch norm computes channels-last natively, its float32 sums in another order
# than the NCHW kernels' (Note [Channels-last batch norm] in kernels/cuda/batchnorm.cu), so there the
# step losses are compared within 1e-5 relative per step: a few steps of rounding differences in
# the last bits of float32 sums stay orders of magnitude below that, a wrong result does not. The
# config event and the checkpoint record the flag; --resume keeps it and continues bit-exactly;
# resuming an NCHW run with --channels-last is one clear error.
set -euo pipefail
ember="$1"
backend=${2:-no-cuda}
here="$(cd "$(dirname "$0")" && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$here/make_data.py" idx "$work/idx" >/dev/null
common=(train --data "$work/idx" --model resnet_small --batch-size 32 --optimizer adam --lr 2e-3
        --no-augment --threads 2 --quiet)
"$ember" "${common[@]}" --epochs 2 --save "$work/nchw" --metrics "$work/nchw.jsonl"
"$ember" "${common[@]}" --epochs 2 --save "$work/cl" --metrics "$work/cl.jsonl" --channels-last
"$ember" "${common[@]}" --max-steps 6 --amp bf16 --metrics "$work/bf16.jsonl"
"$ember" "${common[@]}" --max-steps 6 --amp bf16 --metrics "$work/cl-bf16.jsonl" --channels-last
pairs="nchw:cl bf16:cl-bf16"
if [ "$backend" = cuda ]; then
  "$ember" "${common[@]}" --device cuda --max-steps 4 --metrics "$work/cuda.jsonl"
  "$ember" "${common[@]}" --device cuda --max-steps 4 --metrics "$work/cl-cuda.jsonl" --channels-last
  pairs="$pairs cuda:cl-cuda"
fi
# Half the run, then --resume without the flag: the saved configuration brings it back.
"$ember" "${common[@]}" --epochs 1 --save "$work/half" --channels-last
"$ember" train --resume "$work/half" --epochs 2 --threads 2 --quiet --metrics "$work/resumed.jsonl"
python3 - "$work" $pairs <<'PY'
import json, sys
work, pairs = sys.argv[1], sys.argv[2:]
def events(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
for pair in pairs:
    a, b = pair.split(":")
    ea, eb = events(a), events(b)
    assert ea[0]["channels_last"] is False and eb[0]["channels_last"] is True, (ea[0], eb[0])
    la = [e["loss"] for e in ea if e.get("event") == "step"]
    lb = [e["loss"] for e in eb if e.get("event") == "step"]
    assert len(la) == len(lb) > 0, (len(la), len(lb))
    if a == "cuda":  # native channels-last batch norm: sums in another order (see the top)
        worst = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
        assert worst <= 1e-5, f"{pair}: step losses differ by {worst:.2e} relative: {la} vs {lb}"
        print(f"--channels-last {b}: {len(lb)} step losses within {worst:.1e} relative of the NCHW run's")
        continue
    assert la == lb, f"{pair}: step losses differ: {la} vs {lb}"
    print(f"--channels-last {b}: {len(lb)} step losses equal to the NCHW run's ({la[0]:.4f} -> {la[-1]:.4f})")
losses = [e["loss"] for e in events("nchw") if e.get("event") == "step"]
assert sum(losses[-4:]) < 0.9 * sum(losses[:4]), f"the loss did not go down: {losses}"
resumed = events("resumed")
assert resumed[0]["channels_last"] is True, "the resumed run lost --channels-last"
PY
# The checkpoint's training state (a safetensors file whose metadata holds the state as JSON).
python3 - "$work/cl" <<'PY'
import json, struct, sys
d = sys.argv[1]
path = d + "/" + json.load(open(d + "/checkpoint.json"))["state"]["path"]
with open(path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    meta = json.loads(f.read(n))["__metadata__"]
config = json.loads(meta["ember.state"])["model_config"]
assert config["channels_last"] == "1", config
PY
last_weights() { python3 -c "import json,sys; print(sys.argv[1] + '/' + json.load(open(sys.argv[1] + '/checkpoint.json'))['weights']['path'])" "$1"; }
python3 "$here/tensors_equal.py" "$(last_weights "$work/nchw")" "$(last_weights "$work/cl")"
python3 "$here/tensors_equal.py" "$(last_weights "$work/cl")" "$(last_weights "$work/half")"
echo "--channels-last: final weights equal to the NCHW run's; --resume kept the flag and matched bit for bit"
if "$ember" train --resume "$work/nchw" --epochs 3 --channels-last --threads 2 --quiet 2>"$work/err"; then
  echo "--channels-last on an NCHW run's --resume was accepted" >&2
  exit 1
fi
grep -q "^ember: error: --resume: --channels-last conflicts with the saved run, which ran with --channels-last off" \
  "$work/err" || { cat "$work/err" >&2; exit 1; }
echo "--resume of an NCHW run with --channels-last: refused with one clear error"
