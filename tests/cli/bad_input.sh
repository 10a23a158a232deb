#!/usr/bin/env bash
# The ember command on bad input: each case must exit non-zero, print exactly one line on stderr
# that starts with "ember: error:" and names the problem, and leave no file behind.
#   tests/cli/bad_input.sh path/to/ember [no-cuda|cuda]   (whether the build has a CUDA backend)
set -u
ember="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
passed=0

expect_error() {  # expect_error "what stderr must contain" args...
  local want="$1"
  shift
  local err rc
  err="$("$ember" "$@" 2>&1 >/dev/null)"
  rc=$?
  local lines
  lines="$(printf '%s\n' "$err" | grep -c .)"
  if [ "$rc" -eq 0 ] || [ "$lines" -ne 1 ] || [[ "$err" != "ember: error: "* ]] || [[ "$err" != *"$want"* ]]; then
    echo "FAIL: ember $* -> exit $rc, stderr:"
    printf '  %s\n' "$err"
    echo "  (wanted one 'ember: error:' line containing: $want)"
    failures=$((failures + 1))
  else
    passed=$((passed + 1))
  fi
}

expect_error "--batch-size must be at least 1, got 0" train --batch-size 0 --save-weights "$work/w.safetensors"
expect_error "unknown model 'nope'" train --model nope
expect_error "'/nonexistent/data' does not exist" train --data /nonexistent/data --save-weights "$work/w.safetensors"
expect_error "--epochs must be at least 1" train --epochs 0
expect_error "--optimizer must be adam, adamw or sgd" train --optimizer lbfgs
if [ "${2:-no-cuda}" = "no-cuda" ]; then
  expect_error "no CUDA backend" train --device cuda --epochs 1
else  # a CUDA backend (a GPU, or the SIMT emulator) is built: ask for a device that is not there
  expect_error "--device cuda:99: no such CUDA device" train --device cuda:99 --epochs 1
fi
expect_error "/nonexistent.safetensors" eval /nonexistent.safetensors
printf 'garbage that is not a safetensors file' > "$work/garbled.safetensors"
expect_error "$work/garbled.safetensors" eval "$work/garbled.safetensors"
expect_error "$work/garbled.safetensors" predict "$work/garbled.safetensors" "$work/images.idx:0"
expect_error "--resume: checkpoint directory" train --resume "$work/no-such-checkpoint"
expect_error "--augment must be light, trivial or randaug, got 'foo'" train --augment foo
expect_error "--mixup is the alpha of Beta(alpha, alpha) and must be a positive finite number, got -1" train --mixup -1
expect_error "--cutmix is the alpha of Beta(alpha, alpha) and must be a positive finite number, got 0" train --cutmix 0
expect_error "--random-erasing is a probability and must be in [0, 1], got 1.5" train --random-erasing 1.5
expect_error "--no-augment turns augmentation off, and --mixup asks for it" train --no-augment --mixup 0.2
expect_error "--cutmix mixes each image with another image of its batch and needs --batch-size 2 or more" \
  train --cutmix 1 --batch-size 1 --save-weights "$work/w.safetensors"

# Nothing was written by the failed runs.
if [ -e "$work/w.safetensors" ] || ls -A "$work" | grep -q '^\.'; then
  echo "FAIL: a failed run left a file behind: $(ls -A "$work")"
  failures=$((failures + 1))
else
  passed=$((passed + 1))
fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
