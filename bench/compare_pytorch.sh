#!/usr/bin/env bash
# Side-by-side: ember vs PyTorch (Debian's python3-torch) on the same recipe — the `cnn` model,
# Adam lr 1e-3, batch 64, no augmentation — for seeds 1..3, 2 epochs each, on 1 and 2 threads.
# Prints JSON lines; run on an otherwise idle machine.
#   bench/compare_pytorch.sh build/bin/ember
set -euo pipefail
ember="${1:-build/bin/ember}"
epochs="${EPOCHS:-2}"
for threads in 2 1; do
  for seed in 1 2 3; do
    m="$(mktemp)"
    "$ember" train --model cnn --optimizer adam --lr 1e-3 --batch-size 64 --epochs "$epochs" --no-augment \
      --seed "$seed" --threads "$threads" --quiet --metrics "$m"
    python3 - "$m" "$seed" "$threads" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "epoch":
        print(json.dumps({"bench": "ember_cnn", "seed": int(sys.argv[2]), "epoch": e["epoch"], "threads": int(sys.argv[3]),
                          "test_acc": e["test_acc"], "images_per_sec": e["images_per_sec"]}))
PY
    rm -f "$m"
    /usr/bin/python3 "$(dirname "$0")/pytorch_cnn.py" --seed "$seed" --epochs "$epochs" --threads "$threads"
  done
done
