#!/usr/bin/env bash
# One prepared check for a machine with an NVIDIA GPU (run through the device tool, under 8 min):
#   1. unpack ember's Debian dependencies from .deps/debs (scripts/fetch-gpu-deps.sh, run on the
#      development machine) into .deps/prefix with dpkg -x — never into /;
#   2. find cuDNN and NCCL in PyTorch's Python packages (nvidia-cudnn-cu13, nvidia-nccl-cu13);
#   3. build the real CUDA flavour (nvcc, sm_90) with ninja;
#   4. run tests/cuda (the same parity tests the SIMT flavour runs in CI) and the unit tests;
#   5. run bench_cuda (bandwidth, SGEMM vs cuBLAS, cuDNN conv, cnn training steps) and bench_ddp
#      (the 1-GPU DDP step vs the plain step) and print a short table last.
# Results (stdout, and $OUT/gpu-check/ when OUT is set) go into docs/gpu-validation.md by hand.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
out="${OUT:-/tmp}/gpu-check"
mkdir -p "$out"
log() { echo "[gpu-check $((SECONDS - start))s] $*"; }

nvidia-smi -L || { echo "gpu-check: no NVIDIA GPU visible" >&2; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

# ---- 1. dependencies into a private prefix ---------------------------------------------------
prefix="$PWD/.deps/prefix"
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

# ---- 2. cuDNN and NCCL from the Python packages ----------------------------------------------
pydir() { python3 -c "import importlib, sys; m = importlib.import_module('$1'); print(list(m.__path__)[0])" 2>/dev/null; }
cudnn_dir=$(pydir nvidia.cudnn)
nccl_dir=$(pydir nvidia.nccl)
log "cuDNN: ${cudnn_dir:-not found}; NCCL: ${nccl_dir:-not found}"
[ -n "$cudnn_dir" ] && export CUDNN_ROOT="$cudnn_dir" && export LD_LIBRARY_PATH="$cudnn_dir/lib:$LD_LIBRARY_PATH"
[ -n "$nccl_dir" ] && export NCCL_ROOT="$nccl_dir" && export LD_LIBRARY_PATH="$nccl_dir/lib:$LD_LIBRARY_PATH"
# The wheels ship libcudnn.so.9 without the unversioned development link CMake looks for.
for d in "$cudnn_dir" "$nccl_dir"; do
  [ -n "$d" ] || continue
  for so in "$d"/lib/lib*.so.[0-9]*; do
    base="${so%%.so.*}.so"
    [ -e "$base" ] || ln -sf "$(basename "$so")" "$base" 2>/dev/null || true
  done
done

# ---- 3. build ---------------------------------------------------------------------------------
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
log "configure"
cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON -DEMBER_SIMT=OFF \
  -DCMAKE_PREFIX_PATH="$prefix/usr" -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_CUDA_PTXAS_VERBOSE=ON \
  ${openblas_lib:+-DBLAS_LIBRARIES="$openblas_lib"} 2>&1 | tail -5 | tee "$out/configure.txt"
log "build"
if ! cmake --build build-gpu -j"$(nproc)" > "$out/build.txt" 2>&1; then
  tail -40 "$out/build.txt"; echo "gpu-check: BUILD FAILED" >&2; exit 1
fi
grep -E "ptxas info *: Used|spill" "$out/build.txt" > "$out/ptxas.txt" || true
log "built; $(grep -c 'bytes spill' "$out/ptxas.txt" 2>/dev/null || echo 0) ptxas lines mention spills (see ptxas.txt)"

# ---- 4. tests -------------------------------------------------------------------------------
log "tests/cuda"
# Cases tagged [multi-gpu] (two NCCL/DDP ranks on cuda:0 and cuda:1) need a second GPU.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
filter=()
if [ "${gpus:-0}" -lt 2 ]; then
  filter=("~[multi-gpu]")
  log "one GPU: leaving out $(./build-gpu/tests/ember_cuda_tests "[multi-gpu]" --list-test-names-only | grep -c .) [multi-gpu] cases"
fi
timeout 240 ./build-gpu/tests/ember_cuda_tests "${filter[@]}" > "$out/cuda_tests.txt" 2>&1
cuda_rc=$?
tail -4 "$out/cuda_tests.txt"
log "unit tests (CPU)"
timeout 150 ./build-gpu/tests/ember_tests "~[slow]" > "$out/unit_tests.txt" 2>&1
unit_rc=$?
tail -2 "$out/unit_tests.txt"

# ---- 5. benchmark -----------------------------------------------------------------------------
log "bench_cuda"
timeout 150 ./build-gpu/bench/bench_cuda > "$out/bench_cuda.jsonl" 2> "$out/bench_cuda.err"
bench_rc=$?
cat "$out/bench_cuda.jsonl"
# DistributedDataParallel's overhead on one GPU: the DDP step against the plain step (not fatal).
timeout 60 ./build-gpu/bench/bench_ddp --device cuda --steps 20 >> "$out/bench_cuda.jsonl" 2> "$out/bench_ddp.err"
tail -3 "$out/bench_cuda.jsonl"

echo
echo "==== gpu-check summary ($(cat "$out/gpu.txt")), $((SECONDS - start)) s"
printf "%-28s %s\n" "tests/cuda" "$([ $cuda_rc -eq 0 ] && echo PASS || echo "FAIL (rc $cuda_rc)")"
printf "%-28s %s\n" "unit tests" "$([ $unit_rc -eq 0 ] && echo PASS || echo "FAIL (rc $unit_rc)")"
python3 - "$out/bench_cuda.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    try: d = json.loads(l)
    except Exception: continue
    b = d.pop("bench"); d.pop("device", None); d.pop("emulated", None)
    print(f"{b:28s} " + ", ".join(f"{k}={v}" for k, v in d.items()))
PY
[ $cuda_rc -eq 0 ] && [ $unit_rc -eq 0 ] && [ $bench_rc -eq 0 ]
