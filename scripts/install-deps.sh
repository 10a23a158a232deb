#!/usr/bin/env bash
# Installs the Debian packages ember needs, only those that are missing. Idempotent: a second run
# installs nothing. Needs root (or sudo) for apt-get.
#
#   scripts/install-deps.sh          what building ember and running `ember train` need (README
#                                    command 1): compiler, CMake, the C/C++ libraries, the default
#                                    dataset. No Python package.
#   scripts/install-deps.sh --test   also what the test suite and the side-by-side benchmarks need
#                                    (README command 2): Catch2, Debian's torchvision and PIL, and
#                                    Python's safetensors, numpy, onnx and onnxruntime for the
#                                    cross-check tests
#   scripts/install-deps.sh --fuzz   also clang, for the optional libFuzzer target (EMBER_FUZZ=ON)
set -euo pipefail

fuzz=0
test=0
for arg in "$@"; do
  case "$arg" in
    --fuzz) fuzz=1 ;;
    --test) test=1 ;;
    *) echo "install-deps: unknown option '$arg' (known: --test, --fuzz)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake         # compiler and build system
  ccache                        # keeps compiled objects between builds and clones (CMake uses it when found)
  libopenblas-dev               # CPU GEMM (cblas_sgemm / cblas_dgemm)
  zlib1g-dev                    # gzipped dataset files
  nlohmann-json3-dev            # safetensors headers, training-state files, metrics
  libcli11-dev                  # the ember command line
  dataset-fashion-mnist         # the default dataset of `ember train`
  libstb-dev                    # stb_image: PNG/BMP/PPM/PGM/TGA/GIF decoding (header-only)
  libturbojpeg0-dev             # JPEG decoding (TurboJPEG API)
  libwebp-dev                   # WebP decoding
  libtiff-dev                   # TIFF decoding
  pkg-config                    # how CMake finds TurboJPEG and libwebp
  libopenmpi-dev openmpi-bin    # MPI communicator and mpirun (parallel/, `mpirun -np 2 ember train`)
  libboost-context-dev          # fibers for the SIMT emulator (one per emulated CUDA thread)
  # `ember export` (ONNX): protobuf and ONNX's schema and checker (C++ libraries, ~20 MB, no
  # Python). Optional for the build: without them `ember export` says it has no ONNX support.
  libprotobuf-dev libonnx-dev
)
if [ "$test" -eq 1 ]; then
  packages+=(
    catch2                      # test framework (v2, header-only)
    # torchvision 0.14 (with PyTorch) for Debian's /usr/bin/python3: the ctest
    # data:torchvision_imagefolder (ImageFolder order cross-check), data:torchvision_augment (the
    # augmentation ops at fixed parameters) and the side-by-side loader
    # benchmark (bench/torchvision_loader.py); the build itself does not use it.
    python3-torchvision
    python3-pil                 # bench/make_jpeg_tree.py, fuzz/make_seed_corpus.py, cli:report_browser
    # headless browser for the ctest cli:report_browser: renders report.html, screenshots it
    chromium
  )
fi
if [ "$fuzz" -eq 1 ]; then
  packages+=(clang libomp-dev)  # libFuzzer + ASan/UBSan runtime for fuzz/fuzz_decode; clang's OpenMP
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: every Debian package is installed"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages for the cross-checks, after the Debian ones: Debian's PyTorch 1.13 is built
# against NumPy 1.x, so "numpy<2" keeps Debian's python3-numpy instead of installing NumPy 2
# over it; onnx is pinned to 1.17 because later releases pull in ml_dtypes 0.7, which fails with
# NumPy 1.x. safetensors (with numpy):
# io:python_safetensors and cli:finetune; onnx and onnxruntime: cli:onnx_export.
python_packages=(safetensors "numpy<2" onnx==1.17.0 onnxruntime==1.32.0)
# Into every interpreter the tests use: the first python3 on PATH (CMake's EMBER_PYTHON3) and
# Debian's /usr/bin/python3, where Debian's torchvision lives (EMBER_SYSTEM_PYTHON3).
if [ "$test" -eq 1 ]; then
  interpreters=()
  for py in "$(command -v python3 || true)" /usr/bin/python3; do
    [ -x "$py" ] || continue
    real=$(readlink -f "$("$py" -c 'import sys; print(sys.executable)' 2>/dev/null || echo "$py")")
    case " ${interpreters[*]} " in *" $real "*) continue ;; esac
    interpreters+=("$real")
  done
  for py in "${interpreters[@]}"; do
    "$py" -c "import safetensors, numpy, onnx, onnxruntime" 2>/dev/null && continue
    echo "install-deps: pip install ${python_packages[*]} for $py"
    # Debian's own python3 is "externally managed" and refuses plain pip installs; these packages
    # do not conflict with anything Debian ships, so allow it there.
    "$py" -m pip install --quiet --disable-pip-version-check "${python_packages[@]}" 2>/dev/null ||
      "$py" -m pip install --quiet --disable-pip-version-check --break-system-packages "${python_packages[@]}" ||
      echo "install-deps: pip install failed for $py; ctests io:python_safetensors, cli:finetune and cli:onnx_export will fail"
  done
fi
