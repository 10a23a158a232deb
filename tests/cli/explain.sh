#!/usr/bin/env bash
# `ember explain` and `ember train --explain` on the emulator (record-only: Note [Explaining a
# step] in train/explain.cpp): the JSON has the step's totals and per-op rows, the step has no host
# sync (ember train checks its labels on the host: cross_entropy reads nothing back), ResNet-18's Adam step is one multi-tensor launch, the table names its
# GPU and says it predicts only, the train flag explains the first batch of a real dataset, and bad values
# are refused by name.
set -euo pipefail
ember="$1"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

"$ember" explain --model cnn --batch-size 64 --image-size 28 --channels 1 --classes 10 --gpu h200 --json > cnn.json
python3 - cnn.json <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for k in ("launches", "host_syncs", "bytes", "flops", "predicted_ms", "floor_ms", "ops", "findings"):
    assert k in s, f"no {k}"
assert s["gpu"] == "h200" and s["measured_ms"] is None, s
assert s["launches"] > 20 and s["host_syncs"] == 0, s
assert 0 < s["floor_ms"] < s["predicted_ms"], s
phases = {o["phase"] for o in s["ops"]}
assert {"forward", "backward", "optimizer"} <= phases, phases
assert sum(o["launches"] for o in s["ops"]) == s["launches"], "row launches do not add up to the step's"
assert sum(o["host_syncs"] for o in s["ops"]) == s["host_syncs"], "row host syncs do not add up to the step's"
assert len(s["entries"]) == s["launches"] + s["host_syncs"] + s["allocations"], "entries are not the step's"
# Record-only on the emulator: device work skipped, copies and memsets run, the host's read answered unrun.
for e in s["entries"]:
    assert e["skipped"] == (e["kind"] in ("kernel", "cublas", "cudnn", "nccl")), e
    assert e["stub_answer"] == (e["kind"] == "host_sync"), e
assert abs(sum(o["bytes"] for o in s["ops"]) - s["bytes"]) < 1, "row bytes do not add up"
assert not any("host sync" in f for f in s["findings"]), s["findings"]
assert not any("find_invalid_target" in e["kernel"] for e in s["entries"]), "cross_entropy checked its targets again"
# cnn's convolutions: 2 * N * K * OH * OW * C * 3 * 3 per conv, three passes each (forward, data, weight)
print("cnn:", s["launches"], "launches,", s["host_syncs"], "host syncs,", round(s["predicted_ms"], 3), "ms predicted")
PY

# ResNet-18 at full size, channels-last AMP bf16, 8-GPU scaling
start=$(date +%s)
"$ember" explain --model resnet18 --batch-size 256 --image-size 224 --amp bf16 --channels-last --gpu h100 \
  --world-size 8 --world-size 64 > resnet.txt
echo "resnet18 full-size ledger: $(( $(date +%s) - start )) s"
grep -q "NVIDIA H100" resnet.txt || fail "the table does not name the GPU"
grep -q "predicted only" resnet.txt || fail "the emulator's table does not say it predicts only"
# Adam is one multi-tensor launch (plus the upload of its records), not one per parameter tensor
# (Note [One launch per optimizer step] in optim/multi_tensor.h).
adam_launches=$(awk '$1 == "Adam.step" && $2 == "optimizer" {print $3}' resnet.txt)
[ -n "$adam_launches" ] && [ "$adam_launches" -le 2 ] || fail "Adam.step takes ${adam_launches:-no} launches: $(cat resnet.txt)"
! grep -q "launches of .*adam.* in the optimizer" resnet.txt || fail "per-tensor Adam launches are back: $(cat resnet.txt)"
grep -q "  8 GPUs over nvlink" resnet.txt || fail "no 8-GPU scaling row"
grep -q " 64 GPUs over network" resnet.txt || fail "no 64-GPU scaling row"
head -4 resnet.txt

# Under a CUDA graph: no host sync priced, and a smaller launch cost.
"$ember" explain --model cnn --batch-size 64 --image-size 28 --channels 1 --classes 10 --cuda-graphs --json > graphs.json
python3 - cnn.json graphs.json <<'PY'
import json, sys
eager, graph = (json.load(open(p)) for p in sys.argv[1:])
assert graph["cuda_graphs"] and graph["predicted_ms"] < eager["predicted_ms"], (graph["predicted_ms"], eager["predicted_ms"])
PY

# ember train --explain on a real (tiny) dataset: the first batch's step, no training, no files.
python3 "$here/make_data.py" idx data >/dev/null
"$ember" train --device cuda --data data --model cnn --batch-size 32 --explain h200 > train.txt
grep -q "one training step on NVIDIA H200" train.txt || fail "train --explain printed no table: $(cat train.txt)"
[ -z "$(ls -A . | grep -v -e '^data$' -e '\.txt$' -e '\.json$')" ] || fail "train --explain wrote files: $(ls)"

# Refusals, by name.
expect_error() {  # expect_error TEXT ARGS...
  local text="$1"; shift
  if "$ember" "$@" > out.txt 2>&1; then fail "ember $* succeeded"; fi
  grep -q -- "$text" out.txt || fail "ember $*: expected '$text', got: $(cat out.txt)"
}
expect_error "unknown GPU 'a100'" explain --model cnn --gpu a100
expect_error "unknown GPU 'a100'" train --device cuda --data data --explain a100
expect_error "trains nothing" train --device cuda --data data --explain h100 --save run
expect_error "--batch-size must be at least 1" explain --batch-size 0
expect_error "--world-size must be at least 1" explain --model cnn --world-size 0
printf '{"e_mem": {"elementwise": 1.5}}' > bad.json
expect_error "is not an efficiency" explain --model cnn --batch-size 8 --image-size 28 --channels 1 --classes 10 --calibration bad.json
expect_error "cannot read the GPU calibration file" explain --model cnn --calibration missing.json
echo "OK"
