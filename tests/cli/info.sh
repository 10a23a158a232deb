#!/usr/bin/env bash
# `ember --version` and `ember info`: the version line; the widest instruction set as the kernel
# reports it in /proc/cpuinfo (an independent reading of CPUID); GEMM kernels at that level unless
# OPENBLAS_CORETYPE says otherwise, and then a one-line warning naming both.
#   tests/cli/info.sh path/to/ember
set -u
ember=${1:?usage: info.sh path/to/ember}
failures=0
stderr_file=$(mktemp "${TMPDIR:-/tmp}/ember-info.XXXXXX")
trap 'rm -f "$stderr_file"' EXIT
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

version=$(env -u OPENBLAS_CORETYPE "$ember" --version) || fail "--version exited $?"
[[ $version =~ ^ember\ [0-9]+\.[0-9]+\.[0-9]+\ \(.+\)$ ]] || fail "--version printed '$version'"

flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { [[ $flags == *" $1 "* ]]; }
if has avx512f && has avx512dq && has avx512bw && has avx512vl; then want="AVX-512"
elif has avx2 && has fma; then want="AVX2+FMA"
elif has avx; then want="AVX"
else want="SSE2"; fi

json=$(env -u OPENBLAS_CORETYPE -u EMBER_CPU_BF16 -u EMBER_CPU_AMX "$ember" info --json 2>"$stderr_file") || fail "info --json exited $?"
read_json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)" <<<"$json"; }
[ "$(read_json "d['cpu']['widest_isa']")" = "$want" ] || fail "widest_isa $(read_json "d['cpu']['widest_isa']"), /proc/cpuinfo says $want"
[ "$(read_json "d['gemm']['kernels_isa']")" = "$want" ] || fail "GEMM kernels $(read_json "d['gemm']['kernels']") run $(read_json "d['gemm']['kernels_isa']"), not $want"
[ -z "$(read_json "d['gemm']['warning']")" ] || fail "unexpected warning: $(read_json "d['gemm']['warning']")"
[ -s "$stderr_file" ] && fail "stderr not empty: $(cat "$stderr_file")"
[ "$(read_json "d['version']")" = "$(cut -d' ' -f2 <<<"$version")" ] || fail "info and --version disagree"
[ "$(read_json "d['cpu']['model']")" = "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//;s/ *$//')" ] ||
  fail "cpu model '$(read_json "d['cpu']['model']")' is not /proc/cpuinfo's"

text=$(env -u OPENBLAS_CORETYPE "$ember" info) || fail "info exited $?"
grep -q "^GEMM / conv  .* kernels ($want), chosen by " <<<"$text" || fail "info text lacks the GEMM line: $text"

# The AMX tiles: the hardware's where the CPU has AMX (and Linux grants them), off otherwise;
# EMBER_CPU_AMX=emulate runs the emulator.
amx_line=$(env -u EMBER_CPU_AMX "$ember" info | grep '^  amx        ')
if has amx_tile && has amx_bf16; then
  [[ $amx_line == "  amx        hardware tiles (AMX-BF16; "* || $amx_line == "  amx        off: the CPU has AMX but Linux "* ]] ||
    fail "AMX line '$amx_line' on a CPU with AMX"
else
  [ "$amx_line" = "  amx        off: no AMX-TILE/AMX-BF16 on this CPU" ] || fail "AMX line '$amx_line' on a CPU without AMX"
fi
[[ $(EMBER_CPU_AMX=emulate "$ember" info | grep '^  amx        ') == "  amx        emulated tiles "* ]] ||
  fail "EMBER_CPU_AMX=emulate does not say emulated tiles"
# The bf16 GEMM path: measured per shape among the kernels this CPU runs (AMX on hardware tiles,
# AVX512_BF16, the f32 fallback), or the fallback alone; EMBER_CPU_BF16=off forces the fallback.
kernels=""
[[ $amx_line == "  amx        hardware tiles"* ]] && kernels="amx, "
[ "$want" = "AVX-512" ] && has avx512_bf16 && kernels="${kernels}avx512_bf16, "
if [ -n "$kernels" ]; then want_bf16="measured per shape among ${kernels}f32"
else want_bf16="f32 fallback (OpenBLAS sgemm)"; fi
[ "$(read_json "d['gemm']['bf16']")" = "$want_bf16" ] ||
  fail "bf16 GEMM path $(read_json "d['gemm']['bf16']"), /proc/cpuinfo says $want_bf16"
grep -q "^  bf16       $want_bf16\$" <<<"$(env -u EMBER_CPU_BF16 "$ember" info)" || fail "info text lacks the bf16 line"
off=$(EMBER_CPU_BF16=off "$ember" info --json | python3 -c "import json,sys; print(json.load(sys.stdin)['gemm']['bf16'])")
[ "$off" = "f32 fallback (OpenBLAS sgemm)" ] || fail "EMBER_CPU_BF16=off: bf16 GEMM path $off"
grep -q "^  measured   on each shape's first use, kept in " <<<"$text" || fail "info text lacks the measured line"

if [ "$want" != "SSE2" ]; then
  err=$(OPENBLAS_CORETYPE=Prescott "$ember" info 2>&1 >/dev/null)
  [ "$err" = "ember: warning: OpenBLAS runs its Prescott kernels (SSE2) on a CPU with $want (OPENBLAS_CORETYPE=Prescott): matrix products and convolutions run several times slower than they could" ] ||
    fail "OPENBLAS_CORETYPE=Prescott: stderr was '$err'"
fi
# Threads follow the affinity mask (Note [Threads from the affinity mask]): one CPU under taskset,
# however many the machine has; EMBER_NUM_THREADS still wins.
if command -v taskset >/dev/null; then
  one=$(env -u EMBER_NUM_THREADS taskset -c 0 "$ember" info | grep '^threads')
  cores=$(nproc --all)
  if [ "$cores" -gt 1 ]; then want_one="threads      1 (the 1 CPU this process may run on, of $cores)"
  else want_one="threads      1 (all cores)"; fi
  [ "$one" = "$want_one" ] || fail "under taskset -c 0: '$one', want '$want_one'"
  three=$(EMBER_NUM_THREADS=3 taskset -c 0 "$ember" info | grep '^threads')
  [ "$three" = "threads      3 (EMBER_NUM_THREADS=3)" ] || fail "EMBER_NUM_THREADS=3 under taskset: '$three'"
fi
echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
