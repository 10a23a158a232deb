#!/usr/bin/env bash
# One prepared check for a machine with an NVIDIA GPU (through the device tool), in at most 9
# minutes, build included:
#   1. unpack ember's Debian dependencies from .deps/debs (scripts/fetch-gpu-deps.sh, run on the
#      development machine) into .deps/prefix with dpkg -x — never into /;
#   2. find cuDNN and NCCL in PyTorch's Python packages (nvidia-cudnn-cu13, nvidia-nccl-cu13) and
#      give them the include/ and lib/ layout (with unversioned .so links) CMake looks for, in
#      .deps/gpu (the packages themselves are left as they are);
#   3. build the real CUDA flavour (nvcc, sm_90, ninja): the CUDA tests, bench_cuda and ember;
#   4. run every test in tests/cuda (the parity tests CI runs on the SIMT emulator), then the CLI
#      as a user would: `ember info` and `ember train --device cuda --amp fp16 --max-steps 300`;
#   5. run bench_cuda (ember) and bench/cuda/torch_gpu.py (PyTorch eager on the same GPU): the same
#      measurements on both sides, one JSON line each;
#   5a. the launch ledger: `ember explain --json` for the five workloads of the CI gate
#      (tests/explain/baseline.json), every launch timed with CUDA events (predicted beside
#      measured), and bench/cuda/fit_calibration.py fits the step model's efficiencies from them
#      (explain-*.json, gpu-calibration.json: copy it over calibration/gpu.json back here);
#   5b. with GPU_CHECK_CPU=1: the machine's CPU, pinned to 2 cores (a 2-vCPU machine's share):
#      `ember info`, bench_gemm and bench_train against torch.mm and PyTorch's cnn training, and a
#      short `ember train --device cpu` run of the default recipe (cpu*.jsonl, cpu.txt);
#   6. run every version of every kernel lab (kernels/labs), timed with CUDA events; then, where
#      compute-sanitizer is installed, its memory checker over tests/cuda (at most 90 s); then,
#      where Nsight Compute is installed, its counters for the labs' kernels at the emulator's
#      sizes; all in the time the plan leaves (the budgets are worst cases);
#   7. write the side-by-side table and the labs' table (summary.md, summary.json) and print them.
# Every step has a time budget (the plan below, printed first); the budgets add up to at most 540 s
# and each step is killed at its budget, so the run always ends with a table.
#
#   scripts/gpu-check.sh                     on the GPU machine (OUT: where results go;
#                                            GPU_CHECK_SECONDS=N ends it after N <= 540 s)
#   scripts/gpu-check.sh --dry-run [--build-dir DIR]
#       here, without a GPU: the same steps on the SIMT emulator with tiny sizes and PyTorch on the
#       CPU, using an existing build of the default flavour (CPU + SIMT; default DIR: build). CI
#       runs it (ctest gpu-check:dry-run), so a typo cannot waste the GPU's minutes. It fails when
#       a measurement is missing on either side or the plan exceeds 540 s.
# Results: $OUT/gpu-check/ (OUT defaults to /tmp): gpu.txt, build.txt, ptxas.txt, cuda_tests.txt,
# sanitizer.txt, ember.jsonl, torch.jsonl, labs.jsonl (and labs/<lab>.err, labs/<lab>.ncu.csv),
# summary.md, summary.json, log.txt (everything printed). On a GPU under the device tool (which
# brings back at most 8 files) they are written to /tmp/gpu-check instead and packed, after every
# step, into $OUT/gpu-check.tar.gz, with summary.md beside it.
# Back here, scripts/labs_gpu_report.py puts the labs' measurements into their READMEs.
# docs/gpu-validation.md says how to read them.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

dry_run=0
build_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift ;;
    *) echo "gpu-check: unknown option '$1' (known: --dry-run, --build-dir DIR)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$build_dir" ] || build_dir=$([ $dry_run -eq 1 ] && echo build || echo build-gpu)
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac

start=$SECONDS
out="${OUT:-/tmp}/gpu-check"
pack=""
# On a GPU with the device tool's OUT, the results are kept outside it and packed into one file
# there after every step: the tool brings back 8 files at most, and a command stopped at its
# limit still returns what OUT holds.
if [ $dry_run -eq 0 ] && [ -n "${OUT:-}" ]; then
  out=/tmp/gpu-check
  pack="$OUT/gpu-check.tar.gz"
fi
rm -rf "$out"
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
log() { echo "[gpu-check $((SECONDS - start))s] $*"; }
bundle() {
  [ -n "$pack" ] || return 0
  tar -czf "$pack.part" -C "$out" . 2>/dev/null && mv "$pack.part" "$pack"
}

# ---- the plan: seconds per step (each step is killed at its budget) ---------------------------
# The build estimate: CI's nvcc build of the same targets takes about 9 minutes on 2 cores
# (.ci/run step 3 prints it); nvcc and g++ scale almost linearly with cores, so 16 cores need
# about 70 s if no single file is a long pole; the budget leaves nearly three times that.
declare -A budget=([deps]=20 [build]=180 [cuda_tests]=80 [cli]=25 [bench_ember]=110 [bench_torch]=95 [explain]=20 [cpu]=0 [summary]=10)
plan_order=(deps build cuda_tests cli bench_ember bench_torch explain cpu summary)
plan_total=0
for s in "${plan_order[@]}"; do plan_total=$((plan_total + budget[$s])); done
{
  echo "plan (seconds; each step is stopped at its budget):"
  for s in "${plan_order[@]}"; do printf "  %-12s %4d\n" "$s" "${budget[$s]}"; done
  printf "  %-12s %4d (limit 540)\n" total "$plan_total"
  printf "  %-12s what the steps leave of 540 s (kernel labs, memory checker, counters)\n" labs
} | tee "$out/plan.txt"
# GPU_CHECK_SECONDS (at most 540) ends the run sooner, when less device time is left: the labs,
# the memory checker and the counters get less, the steps above keep their budgets.
total_seconds=${GPU_CHECK_SECONDS:-540}
if ! [[ "$total_seconds" =~ ^[0-9]+$ ]] || [ "$total_seconds" -gt 540 ]; then
  echo "gpu-check: GPU_CHECK_SECONDS must be a number of seconds up to 540 (got '$total_seconds')" >&2
  exit 2
fi
if [ "$plan_total" -gt 540 ]; then
  echo "gpu-check: the plan takes $plan_total s, more than the 540 s a GPU run may use" >&2
  exit 1
fi
# In a dry run the emulator is slow and shares 2 cores: the budgets are stretched, the plan is not.
stretch=$([ $dry_run -eq 1 ] && echo 4 || echo 1)
within() {  # within STEP COMMAND...: the command, stopped at the step's budget
  local s=$1; shift
  timeout $((budget[$s] * stretch)) "$@"
}

python=python3
# PyTorch's side and the helpers in Python run with the machine's own libraries, not the
# Debian ones unpacked below for ember.
orig_ld_path="${LD_LIBRARY_PATH:-}"
py() { LD_LIBRARY_PATH="$orig_ld_path" "$python" "$@"; }
if [ $dry_run -eq 1 ]; then
  echo "dry run: SIMT emulator in $build_dir, tiny sizes, PyTorch on the CPU" | tee "$out/gpu.txt"
  # Debian's torch lives in /usr/bin/python3, which a venv on PATH would hide.
  [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import torch" 2>/dev/null && python=/usr/bin/python3
else
  nvidia-smi -L || { echo "gpu-check: no NVIDIA GPU visible (use --dry-run without one)" >&2; exit 1; }
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
  { nvcc --version | tail -1; c++ --version | head -1; cmake --version | head -1; python3 --version
    grep -m1 "model name" /proc/cpuinfo; nproc; } > "$out/tools.txt" 2>&1
  cat "$out/tools.txt"

  # ---- 1. dependencies into a private prefix -------------------------------------------------
  log "deps"
  prefix="$root/.deps/prefix"
  if [ ! -d "$prefix/usr" ]; then
    ls .deps/debs/*.deb >/dev/null 2>&1 || { echo "gpu-check: .deps/debs is empty (run scripts/fetch-gpu-deps.sh here first and carry .deps)" >&2; exit 1; }
    for d in .deps/debs/*.deb; do dpkg -x "$d" "$prefix"; done
  fi
  arch_lib="$prefix/usr/lib/x86_64-linux-gnu"
  # Debian's libopenblas-dev exposes libopenblas through update-alternatives, which dpkg -x skips.
  openblas_lib=$(ls "$arch_lib"/openblas-pthread/libopenblas*.so* 2>/dev/null | head -1)
  export PATH="$prefix/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$arch_lib:$arch_lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_PATH="$arch_lib/pkgconfig:$prefix/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$prefix"
  export EMBER_FASHION_MNIST_DIR="$prefix/usr/share/datasets/fashion-mnist"

  # ---- 2. cuDNN and NCCL from the Python packages --------------------------------------------
  # The wheels' layout differs between CUDA versions (nvidia/cudnn/, nvidia/cu13/...), so look
  # for the header and the library under every site-packages folder python3 has, then give each a
  # folder of its own in .deps/gpu with include/ and lib/ (the library's unversioned link, which
  # the wheels do not ship, included).
  sites=$(py -c "import site, sys; print(' '.join(p for p in site.getsitepackages() + sys.path if p.endswith('-packages')))" 2>/dev/null)
  find_in_sites() { for s in $sites; do find "$s/nvidia" -name "$1" 2>/dev/null; done | head -1; }
  gpu_root() {  # gpu_root NAME HEADER LIB: prints the folder made for it, or nothing
    local h l d="$root/.deps/gpu/$1"
    h=$(find_in_sites "$2"); l=$(find_in_sites "$3")
    [ -n "$h" ] && [ -n "$l" ] || return 0
    rm -rf "$d" && mkdir -p "$d/lib"
    ln -s "$(dirname "$h")" "$d/include"
    for so in "$(dirname "$l")"/lib*.so*; do ln -sf "$so" "$d/lib/"; done
    ln -sf "$l" "$d/lib/lib$1.so"
    echo "$d"
  }
  cudnn_dir=$(gpu_root cudnn cudnn.h 'libcudnn.so.[0-9]*')
  nccl_dir=$(gpu_root nccl nccl.h 'libnccl.so.[0-9]*')
  log "cuDNN: ${cudnn_dir:-not found} ($(readlink -f "$cudnn_dir/lib/libcudnn.so" 2>/dev/null)); NCCL: ${nccl_dir:-not found}"
  [ -n "$cudnn_dir" ] && export CUDNN_ROOT="$cudnn_dir" && export LD_LIBRARY_PATH="$cudnn_dir/lib:$LD_LIBRARY_PATH"
  [ -n "$nccl_dir" ] && export NCCL_ROOT="$nccl_dir" && export LD_LIBRARY_PATH="$nccl_dir/lib:$LD_LIBRARY_PATH"

  # ---- 3. build --------------------------------------------------------------------------------
  generator=(); keep_going=(-k); command -v ninja >/dev/null && generator=(-G Ninja) && keep_going=(-k 0)
  log "configure + build (ember_cuda_tests, bench_cuda, ember_cli, labs)"
  # <cstdint> is pre-included: a newer libstdc++ than Debian 12's (g++ 12) no longer pulls it in
  # through other headers, and the machine's compiler may be newer.
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON -DEMBER_SIMT=OFF \
    -DCMAKE_PREFIX_PATH="$prefix/usr" -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_CUDA_PTXAS_VERBOSE=ON \
    -DCMAKE_CXX_FLAGS="-include cstdint" -DCMAKE_CUDA_FLAGS="--pre-include=cstdint" \
    ${openblas_lib:+-DBLAS_LIBRARIES="$openblas_lib"} > "$out/configure.txt" 2>&1
  configure_rc=$?
  log "configured (rc $configure_rc); building"
  bundle
  if [ $configure_rc -ne 0 ] || ! within build cmake --build "$build_dir" -j"$(nproc)" --target ember_cuda_tests bench_cuda ember_cli labs bench_gemm bench_train -- "${keep_going[@]}" > "$out/build.txt" 2>&1; then
    tail -40 "$out/configure.txt"; grep -B2 -A12 -m8 -E "error|Error" "$out/build.txt" | head -150
    echo "gpu-check: BUILD FAILED (or over its budget)" >&2; bundle; exit 1
  fi
  grep -E "ptxas info *: Used|spill" "$out/build.txt" > "$out/ptxas.txt" || true
  log "built; $(grep -c 'bytes spill' "$out/ptxas.txt" 2>/dev/null || echo 0) ptxas lines mention spills (see ptxas.txt)"
fi

for bin in tests/ember_cuda_tests bench/bench_cuda bin/ember; do
  [ -x "$build_dir/$bin" ] || { echo "gpu-check: $build_dir/$bin is missing (build the default flavour first)" >&2; exit 1; }
done
ls "$build_dir"/labs/lab_* >/dev/null 2>&1 || { echo "gpu-check: no kernel labs in $build_dir/labs (cmake --build $build_dir --target labs)" >&2; exit 1; }

# ---- 4. tests/cuda ------------------------------------------------------------------------------
# Cases tagged [multi-gpu] (two NCCL/DDP ranks on cuda:0 and cuda:1) need a second GPU. The dry run
# runs one tag (the whole suite runs in CI's ctest already): it checks the command, not the kernels.
filter=()
if [ $dry_run -eq 1 ]; then
  filter=("[gemm]")
elif [ "$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")" -lt 2 ]; then
  filter=("~[multi-gpu]")
  log "one GPU: leaving out $("$build_dir"/tests/ember_cuda_tests "[multi-gpu]" --list-test-names-only | grep -c .) [multi-gpu] cases"
fi
log "tests/cuda ${filter[*]}"
within cuda_tests "$build_dir"/tests/ember_cuda_tests "${filter[@]}" --durations yes > "$out/cuda_tests.txt" 2>&1
cuda_rc=$?
tail -3 "$out/cuda_tests.txt"
[ $cuda_rc -eq 0 ] || grep -B3 -A25 -E "FAILED|failed with|due to unexpected" "$out/cuda_tests.txt" | head -120
bundle

# The CLI as a user runs it: what `ember info` says of this machine, and a short mixed-precision
# run on the device (the loss must fall; cli.txt holds its output).
cli_rc=0
if [ $dry_run -eq 0 ]; then
  log "ember info; ember train --device cuda --amp fp16 --max-steps 300"
  { "$build_dir"/bin/ember info && within cli "$build_dir"/bin/ember train --device cuda --amp fp16 --max-steps 300 \
      --epochs 1 --metrics "$out/cli_metrics.jsonl"; } > "$out/cli.txt" 2>&1
  cli_rc=$?
  tail -4 "$out/cli.txt"
  bundle
fi

# ---- 5. the measurements, ember then PyTorch ----------------------------------------------------
tiny=(); [ $dry_run -eq 1 ] && tiny=(--tiny)
log "bench_cuda ${tiny[*]}"
within bench_ember "$build_dir"/bench/bench_cuda "${tiny[@]}" > "$out/ember.jsonl" 2> "$out/ember.err"
ember_rc=$?
log "torch_gpu.py ${tiny[*]} ($python)"
# GPU_CHECK_COMPILE=1: PyTorch's ResNet-18 step under torch.compile(max-autotune) too (minutes of
# autotuning: give the run the time, GPU_CHECK_SECONDS, before asking). The dry run always
# rehearses it (Debian's PyTorch 1.13 answers that it has no torch.compile).
compile_flag=(); { [ "${GPU_CHECK_COMPILE:-0}" = 1 ] || [ $dry_run -eq 1 ]; } && compile_flag=(--compile)
within bench_torch env LD_LIBRARY_PATH="$orig_ld_path" "$python" bench/cuda/torch_gpu.py "${tiny[@]}" "${compile_flag[@]}" > "$out/torch.jsonl" 2> "$out/torch.err"
torch_rc=$?
bundle
[ $ember_rc -eq 0 ] || { echo "gpu-check: bench_cuda failed (rc $ember_rc):"; tail -5 "$out/ember.err"; }
[ $torch_rc -eq 0 ] || { echo "gpu-check: torch_gpu.py failed (rc $torch_rc):"; tail -5 "$out/torch.err"; }

# ---- 5a. the launch ledger, timed, and the calibration fitted from it ---------------------------
# The dry run records tiny sizes on the emulator (predicted only: the fit then has nothing to do).
explain_gpu=h200
[ $dry_run -eq 0 ] && ! grep -qi "h200" "$out/gpu.txt" && explain_gpu=h100
if [ $dry_run -eq 1 ]; then
  explain_workloads=("cnn_f32:--model cnn --batch-size 8 --image-size 28 --channels 1 --classes 10"
                     "resnet18_amp_bf16_channels_last:--model resnet18 --batch-size 2 --image-size 32 --amp bf16 --channels-last")
else
  explain_workloads=("cnn_f32:--model cnn --batch-size 64 --image-size 28 --channels 1 --classes 10"
                     "cnn_amp_bf16:--model cnn --batch-size 64 --image-size 28 --channels 1 --classes 10 --amp bf16"
                     "resnet18_amp_bf16_channels_last:--model resnet18 --batch-size 256 --image-size 224 --amp bf16 --channels-last"
                     "resnet18_f32_nchw:--model resnet18 --batch-size 256 --image-size 224"
                     "resnet50_amp_bf16_channels_last:--model resnet50 --batch-size 128 --image-size 224 --amp bf16 --channels-last")
fi
log "ember explain --gpu $explain_gpu (${#explain_workloads[@]} workloads)"
explain_rc=0
explain_files=()
for w in "${explain_workloads[@]}"; do
  name=${w%%:*}
  # shellcheck disable=SC2086
  within explain "$build_dir"/bin/ember explain ${w#*:} --gpu "$explain_gpu" --json > "$out/explain-$name.json" 2>> "$out/explain.err" || explain_rc=1
  explain_files+=("$out/explain-$name.json")
done
py bench/cuda/fit_calibration.py "$out/gpu-calibration.json" "$explain_gpu" "${explain_files[@]}" | tee -a "$out/explain.err"
bundle
[ $explain_rc -eq 0 ] || { echo "gpu-check: ember explain failed:"; tail -5 "$out/explain.err"; }

# ---- 5b. the CPU, with GPU_CHECK_CPU=1 -----------------------------------------------------------
# The GPU machines have carried CPUs that the development machines were not lent (an Intel Xeon
# of family 6 model 207, newer than Debian's OpenBLAS): ember's CPU paths measured there side by
# side with the machine's PyTorch, on 2 pinned cores. Not part of the plan's total: the caller
# sets GPU_CHECK_SECONDS to leave it time. In a dry run: one tiny pass of the same commands.
cpu_rc=0
if [ "${GPU_CHECK_CPU:-0}" = 1 ] || [ $dry_run -eq 1 ]; then
  log "CPU on 2 pinned cores: ember info, sgemm, cnn training, ember train --device cpu"
  budget[cpu]=100
  data_dir="${EMBER_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
  steps=$([ $dry_run -eq 1 ] && echo 5 || echo 300)
  sizes=$([ $dry_run -eq 1 ] && echo 256 || echo 1024,2048)
  export GC_BUILD="$build_dir" GC_OUT="$out" GC_PY="$python" GC_PYLD="$orig_ld_path" GC_DATA="$data_dir" \
    GC_STEPS="$steps" GC_SIZES="$sizes" GC_DRY=$dry_run
  within cpu bash -c '
    set -e
    pin() { taskset -c 0,1 env OMP_NUM_THREADS=2 "$@"; }
    pypin() { pin env LD_LIBRARY_PATH="$GC_PYLD" "$GC_PY" "$@"; }
    pin "$GC_BUILD/bin/ember" info | head -12
    pin "$GC_BUILD/bench/bench_gemm" > "$GC_OUT/cpu_gemm.jsonl"
    pypin bench/torch_mm.py --sizes "$GC_SIZES" > "$GC_OUT/cpu_gemm_torch.jsonl"
    [ "$GC_DRY" = 1 ] || pin "$GC_BUILD/bench/bench_train" > "$GC_OUT/cpu_train.jsonl"
    for t in 1 2; do
      pypin bench/pytorch_cnn.py --threads $t --max-steps "$GC_STEPS" --data-dir "$GC_DATA" >> "$GC_OUT/cpu_train_torch.jsonl"
    done
    pin "$GC_BUILD/bin/ember" train --device cpu --max-steps "$GC_STEPS" --epochs 1
  ' > "$out/cpu.txt" 2>&1
  cpu_rc=$?
  [ $cpu_rc -eq 0 ] || { echo "gpu-check: the CPU step failed (rc $cpu_rc):"; tail -5 "$out/cpu.txt"; }
  bundle
fi

# ---- 6. the kernel labs ---------------------------------------------------------------------------
# Every version of every lab (exercises included) at the lab's GPU size, timed with CUDA events; in
# a dry run, at the emulator's sizes with its counters. They get what the steps above left of the
# 540 s (less the summary's budget); a lab that does not fit is recorded as not run.
labs_deadline=$((start + (total_seconds - budget[summary]) * stretch))
: > "$out/labs.jsonl"
mkdir -p "$out/labs"
for prog in "$build_dir"/labs/lab_*; do
  [ -x "$prog" ] || continue
  lab=${prog##*/lab_}
  left=$((labs_deadline - SECONDS))
  if [ "$left" -le 5 ]; then
    log "labs: no time left for $lab"
    echo "{\"lab\":\"$lab\",\"not_run\":\"no time left\"}" >> "$out/labs.jsonl"
    continue
  fi
  log "lab $lab (at most ${left}s)"
  timeout "$left" "$prog" --json --broken > "$out/labs/$lab.jsonl" 2> "$out/labs/$lab.err"
  rc=$?
  cat "$out/labs/$lab.jsonl" >> "$out/labs.jsonl"
  [ $rc -eq 0 ] || echo "{\"lab\":\"$lab\",\"exit_status\":$rc}" >> "$out/labs.jsonl"
done
bundle
# compute-sanitizer's memory checker (out-of-bounds and misaligned accesses, leaks, API errors)
# over tests/cuda, at most 90 s of what is left: a case it stops in names the kernel and address.
if [ $dry_run -eq 0 ] && command -v compute-sanitizer >/dev/null; then
  left=$((labs_deadline - SECONDS - 60))
  [ "$left" -gt 90 ] && left=90
  if [ "$left" -gt 15 ]; then
    log "compute-sanitizer memcheck over tests/cuda (at most ${left}s)"
    timeout "$left" compute-sanitizer --tool memcheck --report-api-errors no --print-limit 30 --error-exitcode 86 \
      "$build_dir"/tests/ember_cuda_tests "${filter[@]}" > "$out/sanitizer.txt" 2>&1
    log "compute-sanitizer rc $? ($(grep -m1 -E "ERROR SUMMARY" "$out/sanitizer.txt" || echo "no summary: stopped at its limit"))"
    bundle
  fi
fi
# Nsight Compute's counters for the same kernels at the emulator's sizes (--small), one run per
# version (--no-timing), so that scripts/labs_gpu_report.py can set them next to the emulator's.
if [ $dry_run -eq 0 ] && command -v ncu >/dev/null; then
  metrics=l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
  metrics=$metrics,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum
  metrics=$metrics,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum
  metrics=$metrics,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
  for prog in "$build_dir"/labs/lab_*; do
    lab=${prog##*/lab_}
    left=$((labs_deadline - SECONDS))
    [ "$left" -gt 10 ] || { log "ncu: no time left for $lab"; break; }
    log "ncu $lab (at most ${left}s)"
    timeout "$left" ncu --csv --log-file "$out/labs/$lab.ncu.csv" --metrics "$metrics" "$prog" --small --no-timing \
      --broken --json > "$out/labs/$lab.small.jsonl" 2> "$out/labs/$lab.ncu.err" || log "ncu $lab failed (see labs/$lab.ncu.err)"
  done
fi

# ---- 7. the side-by-side table ------------------------------------------------------------------
log "summary"
py bench/cuda/gpu_summary.py "$out" "$cuda_rc" "$((SECONDS - start))"
summary_rc=$?
[ -z "$pack" ] || cp "$out/summary.md" "$OUT/summary.md" 2>/dev/null
bundle
# ---- the dry run's last step: the labs' README writer, which runs back here after a GPU run ----
readme_rc=0
if [ $dry_run -eq 1 ]; then
  copy="$out/readme-copy"
  mkdir -p "$copy/kernels" && cp -r kernels/labs "$copy/kernels/"
  for pass in 1 2; do  # twice: the second run replaces the section the first one wrote
    "$python" scripts/labs_gpu_report.py "$out" --labs-dir "$build_dir/labs" --readme-root "$copy" > "$out/readme.txt" 2>&1 || readme_rc=1
  done
  for readme in "$copy"/kernels/labs/*/README.md; do
    [ "$(grep -c 'gpu-measured:begin' "$readme")" -eq 1 ] || { echo "gpu-check: $readme: not one measured section"; readme_rc=1; }
  done
  log "labs_gpu_report.py on a copy of the READMEs: $([ $readme_rc -eq 0 ] && echo ok || echo FAILED)"
fi
[ $cuda_rc -eq 0 ] && [ $cli_rc -eq 0 ] && [ $cpu_rc -eq 0 ] && [ $ember_rc -eq 0 ] && [ $explain_rc -eq 0 ] && [ $torch_rc -eq 0 ] && [ $summary_rc -eq 0 ] && [ $readme_rc -eq 0 ]
