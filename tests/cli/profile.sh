#!/usr/bin/env bash
# `ember train --profile --profile-trace FILE` on the CPU and, in builds with one, on the CUDA
# device (the SIMT emulator in CI): the table on stderr names the step's parts and the ops with
# their GFLOP/s, and the trace is whole JSON with the expected events.
#   tests/cli/profile.sh path/to/ember [cuda|no-cuda]
set -u
ember=${1:?usage: profile.sh path/to/ember [cuda|no-cuda]}
backend=${2:-no-cuda}
work=$(mktemp -d "${TMPDIR:-/tmp}/ember-profile.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
devices=(cpu)
[ "$backend" = cuda ] && devices+=(cuda)
for device in "${devices[@]}"; do
  trace="$work/trace-$device.json"
  if ! "$ember" train --model cnn --optimizer adam --device "$device" --max-steps 3 --batch-size 16 --eval-limit 32 \
      --quiet --profile --profile-trace "$trace" 2>"$work/err" >/dev/null; then
    fail "$device: ember train --profile exited non-zero: $(tail -3 "$work/err")"
    continue
  fi
  err=$(cat "$work/err")
  grep -q "^ember train: profile of 3 steps ($device" <<<"$err" || fail "$device: no profile heading in: $err"
  grep -qE '^op +phase +calls +total ms +self ms +% self +GFLOP/s$' <<<"$err" || fail "$device: no table header"
  for row in "conv2d +forward" "Conv2dBackward +backward" "conv2d backward +backward" "Adam.step +optimizer" \
             "next batch +data"; do
    grep -qE "^$row " <<<"$err" || fail "$device: no '$row' row in the table"
  done
  grep -qE '^conv2d +forward +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+% +[0-9.]+$' <<<"$err" ||
    fail "$device: the conv2d row has no GFLOP/s: $(grep '^conv2d ' <<<"$err")"
  python3 - "$trace" <<'PY' || fail "$device: the trace is not the expected Chrome trace"
import json, sys
doc = json.load(open(sys.argv[1]))
ev = [e for e in doc["traceEvents"] if e["ph"] == "X"]
names = {e["name"] for e in ev}
need = {"step", "forward", "backward", "optimizer", "conv2d", "Conv2dBackward", "next batch", "evaluate"}
assert need <= names, need - names
assert sum(e["name"] == "step" for e in ev) == 3
assert all(e["dur"] >= 0 and isinstance(e["ts"], (int, float)) for e in ev)
PY
done
echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
