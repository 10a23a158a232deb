#!/usr/bin/env bash
# Downloads (does not install) the Debian packages ember builds against into .deps/debs/, for a
# GPU machine that has nvcc, CMake, ninja and PyTorch (with cuDNN and NCCL in its Python
# packages) but no package registry. scripts/gpu-check.sh unpacks them there with `dpkg -x` into
# .deps/prefix (never into /). .deps/ is git-ignored; pass it to the device tool as a carried path.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/debs
cd .deps/debs
packages=(
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5 libquadmath0
  catch2 zlib1g-dev zlib1g nlohmann-json3-dev libcli11-dev libstb-dev libstb0
  libturbojpeg0-dev libturbojpeg0 libjpeg62-turbo
  libwebp-dev libwebp7 libwebpdemux2 libwebpmux3
  libtiff-dev libtiff6 libtiffxx6 libjbig0 libjbig-dev libdeflate0 libdeflate-dev liblerc4 liblerc-dev
  libzstd1 libzstd-dev liblzma5 liblzma-dev libjpeg62-turbo-dev libjpeg-dev
  pkgconf pkgconf-bin libpkgconf3
  dataset-fashion-mnist
)
[ -n "$(ls ./*.deb 2>/dev/null)" ] || apt-get update -qq
apt-get download "${packages[@]}" 2>&1 | grep -v "^Get:" || true
echo "fetch-gpu-deps: $(ls ./*.deb | wc -l) packages in .deps/debs ($(du -sh . | cut -f1))"
