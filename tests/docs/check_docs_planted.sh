#!/usr/bin/env bash
# scripts/check-docs.sh must fail, naming the place, on each kind of defect it exists to catch.
# A copy of the repository (its tracked and untracked-not-ignored files) passes; then one defect
# at a time is planted in a fresh copy — a Note referenced but never defined, a Note defined twice,
# a dead path in docs/, a dead path in a comment, a dead Markdown link, a stale plan; and for the
# layering (scripts/check_layering.py) a kernel that includes a Tensor header, optim/ including
# parallel/, an include of apps/, a file over the file budget, a function over the function
# budget — and the script must exit 1 with the expected message.
#   tests/docs/check_docs_planted.sh SOURCE_DIR
set -u
src=$(cd "${1:?usage: check_docs_planted.sh SOURCE_DIR}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ember-check-docs.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

fresh_copy() {  # -> $work/tree, a copy of the repository without .git
  rm -rf "$work/tree" && mkdir -p "$work/tree"
  if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$src" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - 2>/dev/null) |
      tar -xf - -C "$work/tree"
  else
    (cd "$src" && tar --exclude='./build*' --exclude='./.git' -cf - .) | tar -xf - -C "$work/tree"
  fi
}

cases=0
expect() {  # expect NAME STATUS PATTERN: run the checker on the copy
  local name=$1 status=$2 pattern=$3 out rc
  cases=$((cases + 1))
  out=$("$src/scripts/check-docs.sh" "$work/tree" 2>&1); rc=$?
  if [ "$rc" -ne "$status" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $name: exit $rc (want $status), output lacks /$pattern/:"
    sed 's/^/    /' <<<"$out" | tail -n 8
    failures=$((failures + 1))
  else
    echo "ok: $name"
  fi
}

fresh_copy
expect "the repository as it is" 0 "no problems"

fresh_copy
echo "// The tape is explained in Note [Planted missing note]." >>"$work/tree/core/autograd.cpp"
expect "missing Note" 1 "^core/autograd.cpp:[0-9]+: Note \[Planted missing note\] is referenced but never defined"

fresh_copy
printf '\n// Note [Caching allocator]\n// A second definition.\n' >>"$work/tree/core/allocator.h"
expect "Note defined twice" 1 "Note \[Caching allocator\] is defined 2 times"

fresh_copy
echo "The planted kernel lives in kernels/cpu/planted_missing.cpp." >>"$work/tree/docs/architecture.md"
expect "dead path in docs" 1 "^docs/architecture.md:[0-9]+: 'kernels/cpu/planted_missing.cpp' names no file"

fresh_copy
echo "// See layers/planted_gone.h for the contract." >>"$work/tree/layers/reduce.cpp"
expect "dead path in a comment" 1 "^layers/reduce.cpp:[0-9]+: 'layers/planted_gone.h' names no file"

fresh_copy
echo "// The engine is in planted_engine.cpp." >>"$work/tree/core/autograd.h"
expect "dead bare file name in a comment" 1 "^core/autograd.h:[0-9]+: 'planted_engine.cpp' is no file"

fresh_copy
echo "See [the guide](planted-guide.md)." >>"$work/tree/docs/training.md"
expect "dead Markdown link" 1 "^docs/training.md:[0-9]+: link target 'planted-guide.md' does not exist"

fresh_copy
echo "// Half precision arrives in a later issue." >>"$work/tree/kernels/elementwise.h"
expect "stale phrase (later issue)" 1 "^kernels/elementwise.h:[0-9]+: stale plan 'a later issue'"

fresh_copy
echo "Pooling runs on the CPU until the cuDNN backend lands." >>"$work/tree/docs/cuda.md"
expect "stale phrase (until ... lands)" 1 "^docs/cuda.md:[0-9]+: stale plan 'until the cuDNN backend lands'"

fresh_copy
echo "# The loader will implement prefetching." >>"$work/tree/scripts/install-deps.sh"
expect "stale phrase (will implement)" 1 "^scripts/install-deps.sh:[0-9]+: stale plan 'will implement'"

fresh_copy
echo '#include "../../core/tensor.h"' >>"$work/tree/kernels/cpu/softmax.cpp"
expect "layering: a kernel includes a Tensor header" 1 \
  "^kernels/cpu/softmax.cpp:[0-9]+: includes core/tensor.h \(a Tensor header\), which \`kernels/cpu/\*\*\` may not"

fresh_copy
echo '#include "../parallel/communicator.h"' >>"$work/tree/optim/sgd.cpp"
expect "layering: optim/ includes parallel/" 1 "^optim/sgd.cpp:[0-9]+: includes parallel/communicator.h, which"

fresh_copy
echo '#include "../apps/ember/info_command.h"' >>"$work/tree/train/report.cpp"
expect "layering: something includes apps/" 1 "^train/report.cpp:[0-9]+: includes apps/ember/info_command.h, which"

fresh_copy
{ echo "void planted_long_function() {"; for i in $(seq 1 130); do echo "  (void)$i;"; done; echo "}"; } >>"$work/tree/io/fault.cpp"
expect "function budget" 1 "^io/fault.cpp:[0-9]+: planted_long_function is 132 lines, over the function budget of 120"

fresh_copy
for i in $(seq 1 820); do echo "// planted line $i"; done >>"$work/tree/layers/init.cpp"
expect "file budget" 1 "^layers/init.cpp:1: [0-9]+ lines, over the file budget of 800"

echo "$((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
