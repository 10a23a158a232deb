#!/usr/bin/env bash
# `mpirun -np 2 ember train --channels-last` trains, bit for bit, the weights of the same
# two-process run in NCHW: DDP's buckets carry the channels-last gradients in logical order and
# write the averages back through their strides (Note [A leaf's gradient] in core/autograd.cpp),
# and on the CPU the layers' channels-last results are NCHW's. A ResNet (batch norms with fused
# ReLUs, residual adds, a downsampling shortcut), 3 steps.
#   mpi_train_channels_last.sh MPIEXEC EMBER WORKDIR TENSORS_EQUAL
set -euo pipefail
mpiexec="$1" ember="$2" work="$3" equal="$4"
rm -rf "$work"
mkdir -p "$work"
for format in nchw channels_last; do
  flag=()
  [ "$format" = channels_last ] && flag=(--channels-last)
  "$mpiexec" -np 2 "$ember" train --model resnet_small --epochs 1 --max-steps 3 --batch-size 8 --eval-limit 16 \
    --quiet --save-weights "$work/$format.safetensors" --metrics "$work/$format.jsonl" "${flag[@]}"
done
grep -q '"channels_last":true' "$work/channels_last.jsonl" || {
  echo "FAIL: the channels-last run did not record --channels-last"
  exit 1
}
python3 "$equal" "$work/nchw.safetensors" "$work/channels_last.safetensors" || {
  echo "FAIL: mpirun -np 2 ember train --channels-last trained different weights than NCHW"
  exit 1
}
echo "PASS: two processes, channels-last: the NCHW run's weights bit for bit"
