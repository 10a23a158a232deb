#!/usr/bin/env bash
# Side by side: ember's sgemm (bench_gemm) against torch.mm of current PyTorch 2.x from PyPI (MKL),
# interleaved round by round so both see the same machine state; prints every JSON line, then a
# summary line per (n, threads) with both medians over the rounds and the ratio.
#   bench/compare_gemm.sh build/bench/bench_gemm [ROUNDS]
set -euo pipefail
bench_gemm=${1:?usage: compare_gemm.sh path/to/bench_gemm [rounds]}
rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
python=$("$here/../scripts/python-env.sh")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 1; r <= rounds; ++r)); do
  "$bench_gemm" | tee -a "$out"
  "$python" "$here/torch_mm.py" | tee -a "$out"
done
"$python" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
cpu = next((r.get("cpu") for r in rows if r["bench"] == "sgemm"), "?")
kernels = next((r.get("gemm_kernels") for r in rows if r["bench"] == "sgemm"), "?")
for n in sorted({r["n"] for r in rows}):
    for t in sorted({r["threads"] for r in rows}):
        e = [r["gflops"] for r in rows if r["bench"] == "sgemm" and r["n"] == n and r["threads"] == t]
        p = [r["gflops"] for r in rows if r["bench"] == "torch_mm" and r["n"] == n and r["threads"] == t]
        if e and p:
            print(json.dumps({"compare": "sgemm_vs_torch_mm", "n": n, "threads": t, "ember_gflops": statistics.median(e),
                              "torch_gflops": statistics.median(p), "ratio": round(statistics.median(e) / statistics.median(p), 3),
                              "cpu": cpu, "ember_kernels": kernels}))
PY
