#!/usr/bin/env bash
# Side by side: ember vs current PyTorch 2.x from PyPI (scripts/python-env.sh; MKL + oneDNN on the
# CPU) on the same recipe — the `cnn` model, Adam lr 1e-3, batch 64, no augmentation — for each
# seed and thread count, EPOCHS epochs each, the two sides interleaved run by run. Prints every
# JSON line, then one summary line per thread count: both sides' median training images/s, the
# ratio, mean test accuracy per epoch, the CPU and ember's GEMM kernels. Run on an idle machine.
#   bench/compare_pytorch.sh build/bin/ember            (SEEDS="1 2 3" EPOCHS=2 THREADS="2 1")
# DEBIAN_TORCH=1 adds Debian's python3-torch (1.13) as a third column where it is installed.
set -euo pipefail
ember="${1:-build/bin/ember}"
epochs="${EPOCHS:-2}"
here=$(cd "$(dirname "$0")" && pwd)
python=$("$here/../scripts/python-env.sh")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for threads in ${THREADS:-2 1}; do
  for seed in ${SEEDS:-1 2 3}; do
    m="$(mktemp)"
    "$ember" train --model cnn --optimizer adam --lr 1e-3 --batch-size 64 --epochs "$epochs" --no-augment \
      --seed "$seed" --threads "$threads" --quiet --metrics "$m"
    "$python" - "$m" "$seed" "$threads" <<'PY' | tee -a "$out"
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "epoch":
        print(json.dumps({"bench": "ember_cnn", "seed": int(sys.argv[2]), "epoch": e["epoch"], "threads": int(sys.argv[3]),
                          "test_acc": e["test_acc"], "images_per_sec": e["images_per_sec"]}))
PY
    rm -f "$m"
    "$python" "$here/pytorch_cnn.py" --seed "$seed" --epochs "$epochs" --threads "$threads" | tee -a "$out"
    if [ -n "${DEBIAN_TORCH:-}" ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
      /usr/bin/python3 "$here/pytorch_cnn.py" --seed "$seed" --epochs "$epochs" --threads "$threads" |
        sed 's/"bench": "pytorch_cnn"/"bench": "pytorch_cnn_debian"/' | tee -a "$out"
    fi
  done
done
info=$("$ember" info --json)
"$python" - "$out" "$info" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
info = json.loads(sys.argv[2])
for t in sorted({r["threads"] for r in rows}, reverse=True):
    summary = {"compare": "cnn_training", "threads": t}
    for side in ("ember_cnn", "pytorch_cnn", "pytorch_cnn_debian"):
        rs = [r for r in rows if r["bench"] == side and r["threads"] == t]
        if not rs:
            continue
        summary[side + "_images_per_sec"] = round(statistics.median(r["images_per_sec"] for r in rs), 1)
        summary[side + "_test_acc"] = [round(statistics.mean(r["test_acc"] for r in rs if r["epoch"] == e), 4)
                                       for e in sorted({r["epoch"] for r in rs})]
        if "torch" in rs[0]:
            summary[side + "_version"] = rs[0]["torch"]
    if "pytorch_cnn_images_per_sec" in summary:
        summary["ratio"] = round(summary["ember_cnn_images_per_sec"] / summary["pytorch_cnn_images_per_sec"], 3)
    summary["cpu"] = info["cpu"]["model"]
    summary["ember_gemm_kernels"] = info["gemm"]["kernels"]
    print(json.dumps(summary))
PY
