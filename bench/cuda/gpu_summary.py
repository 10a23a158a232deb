#!/usr/bin/env python3
"""The side-by-side table of scripts/gpu-check.sh: reads OUT/ember.jsonl (bench_cuda) and
OUT/torch.jsonl (torch_gpu.py), writes OUT/summary.md and OUT/summary.json, prints the table.
Fails (exit 1) when a measurement either side must print is missing or malformed.

  python3 bench/cuda/gpu_summary.py OUT CUDA_TESTS_RC SECONDS
Speed-up is ember's speed over PyTorch's (> 1: ember is faster): a ratio of rates (GB/s, GFLOP/s,
images/s) or the inverse ratio of times (ms, seconds).
"""
import json
import sys

# (key, what it is, ember's field, "rate" / "time" / "value", unit[, PyTorch's field when it differs]);
# key = bench[/precision][/mode][/channels_last], or "EMBER_KEY>TORCH_KEY" when the two sides' lines differ (ember's
# CUDA graphs and host loader against PyTorch eager with the data on the device).
ROWS = [
    ("bandwidth", "device-to-device copy", "d2d_copy_gbs", "rate", "GB/s"),
    ("bandwidth", "ReLU (read + write)", "relu_gbs", "rate", "GB/s"),
    ("bandwidth", "ReLU, ember's hand-written kernel vs torch.relu", "relu_kernel_gbs", "rate", "GB/s", "relu_gbs"),
    ("bandwidth", "sum (read)", "sum_gbs", "rate", "GB/s"),
    ("sgemm", "SGEMM, library (cuBLAS) vs torch.mm", "library_gflops", "rate", "GFLOP/s"),
    ("sgemm", "SGEMM, ember's tiled kernel vs torch.mm", "tiled_gflops", "rate", "GFLOP/s", "library_gflops"),
    ("gemm_bf16", "bf16 GEMM 8192^3, library (cuBLAS) vs torch.mm", "library_tflops", "rate", "TFLOP/s"),
    ("gemm_bf16", "bf16 GEMM, ember's tiled kernel vs torch.mm", "tiled_tflops", "rate", "TFLOP/s", "library_tflops"),
    ("conv3x3_fwd_bwd", "conv 3x3 forward + backward (given dy)", "ms", "time", "ms"),
    ("conv3x3_fwd_bwd", "conv 3x3 forward", "fwd_ms", "time", "ms"),
    ("conv3x3_fwd_bwd", "conv 3x3 forward + backward, ember in cuDNN benchmark mode vs PyTorch's default",
     "ms_benchmark_mode", "time", "ms", "ms"),
    ("stem_batchnorm/bf16", "ResNet-18 stem batch norm, bf16, forward + backward, NCHW", "ms", "time", "ms"),
    ("stem_batchnorm/bf16/channels_last", "the same, channels-last", "ms", "time", "ms"),
    ("stem_maxpool/bf16/cudnn>stem_maxpool/bf16",
     "ResNet-18 max pool 3x3/2, bf16, fwd + bwd, NCHW, ember via cuDNN (EMBER_CUDNN_MAX_POOL=1)", "ms", "time", "ms"),
    ("stem_maxpool/bf16/hand_written>stem_maxpool/bf16",
     "the same, ember's hand-written kernels (int32 indices; max_pool2d's default)", "ms", "time", "ms"),
    ("stem_maxpool/bf16/cudnn/channels_last>stem_maxpool/bf16/channels_last",
     "the same, channels-last, ember via cuDNN", "ms", "time", "ms"),
    ("stem_maxpool/bf16/hand_written/channels_last>stem_maxpool/bf16/channels_last",
     "the same, channels-last, ember's hand-written kernels", "ms", "time", "ms"),
    ("train_cnn/f32/host_loader>train_cnn/f32/data_on_device",
     "cnn training, batch 64, Adam, f32 (ember: host loader)", "images_per_sec", "rate", "images/s"),
    ("train_cnn/f32/data_on_device", "cnn training, f32, data on the device", "images_per_sec", "rate", "images/s"),
    ("train_cnn/f32/data_on_device+cuda_graphs>train_cnn/f32/data_on_device",
     "cnn training, f32, data on the device, ember with CUDA graphs", "images_per_sec", "rate", "images/s"),
    ("train_cnn/amp_bf16/data_on_device", "cnn training, AMP bf16, data on the device", "images_per_sec", "rate",
     "images/s"),
    ("train_cnn/amp_bf16/data_on_device+cuda_graphs>train_cnn/amp_bf16/data_on_device",
     "cnn training, AMP bf16, data on the device, ember with CUDA graphs", "images_per_sec", "rate", "images/s"),
    ("resnet18_step/f32", "ResNet-18 step, f32", "ms", "time", "ms"),
    ("resnet18_step/amp_bf16>resnet18_step/amp_bf16/channels_last",
     "ResNet-18 step, AMP bf16 (ember NCHW, PyTorch channels-last)", "ms", "time", "ms"),
    ("resnet18_step/amp_bf16/channels_last", "ResNet-18 step, AMP bf16, channels-last", "ms", "time", "ms"),
    ("resnet18_step/amp_bf16/cudnn_benchmark/channels_last",
     "the same, both in cuDNN benchmark mode", "ms", "time", "ms"),
    ("resnet18_step/amp_bf16/cuda_graphs/channels_last>resnet18_step/amp_bf16/channels_last",
     "the same, ember's step captured as a CUDA graph vs PyTorch eager", "ms", "time", "ms"),
    ("resnet18_step/amp_bf16/cuda_graphs/channels_last>resnet18_step/amp_bf16/torch_compile/channels_last",
     "the same, ember's CUDA graph vs PyTorch under torch.compile (max-autotune; GPU_CHECK_COMPILE=1)", "ms", "time",
     "ms"),
    ("recipe_to_93", "default recipe: training seconds to 93%", "seconds_to_93", "time", "s"),
    ("recipe_to_93", "default recipe: final test accuracy", "final_test_acc", "value", ""),
]
# What each side must print.
REQUIRED = {
    "ember": {"bandwidth", "sgemm", "gemm_bf16", "conv3x3_fwd_bwd", "stem_batchnorm/bf16",
              "stem_batchnorm/bf16/channels_last", "stem_maxpool/bf16/cudnn", "stem_maxpool/bf16/hand_written",
              "stem_maxpool/bf16/cudnn/channels_last", "stem_maxpool/bf16/hand_written/channels_last",
              "train_cnn/f32/host_loader", "train_cnn/f32/data_on_device",
              "train_cnn/f32/data_on_device+cuda_graphs", "train_cnn/amp_bf16/data_on_device",
              "train_cnn/amp_bf16/data_on_device+cuda_graphs", "resnet18_step/f32",
              "resnet18_step/amp_bf16", "resnet18_step/amp_bf16/channels_last",
              "resnet18_step/amp_bf16/cudnn_benchmark/channels_last",
              "resnet18_step/amp_bf16/cuda_graphs/channels_last", "recipe_to_93"},
    "torch": {"bandwidth", "sgemm", "gemm_bf16", "conv3x3_fwd_bwd", "stem_batchnorm/bf16",
              "stem_batchnorm/bf16/channels_last", "stem_maxpool/bf16", "stem_maxpool/bf16/channels_last",
              "train_cnn/f32/data_on_device",
              "train_cnn/amp_bf16/data_on_device", "resnet18_step/f32", "resnet18_step/amp_bf16/channels_last",
              "resnet18_step/amp_bf16/cudnn_benchmark/channels_last", "recipe_to_93"},
}


def key(d):
    return "/".join([d["bench"]] + [d[f] for f in ("precision", "mode") if f in d] +
                    (["channels_last"] if d.get("channels_last") else []))


def read(path, side, problems):
    lines = {}
    try:
        text = open(path).read()
    except OSError:
        problems.append(f"{side}: {path} is missing")
        return lines
    for n, l in enumerate(text.splitlines(), 1):
        if not l.strip():
            continue
        try:
            d = json.loads(l)
            lines[key(d)] = d
        except (ValueError, KeyError) as e:
            problems.append(f"{side}: line {n} of {path} is not a measurement: {e}")
    for k in sorted(REQUIRED[side] - lines.keys()):
        problems.append(f"{side}: no '{k}' measurement")
    return lines


def fmt(v, unit):
    if v is None:
        return "not reached"
    if not isinstance(v, (int, float)):
        return str(v)
    return f"{v:.4f}" if unit == "" else f"{v:,.1f}"


def lab_rows(path, problems):
    """The labs' JSON lines (step 6 of gpu-check.sh) as table rows; a wrong version (not an
    exercise), a lab that failed or one that did not run is a problem."""
    rows = []
    try:
        lines = [json.loads(l) for l in open(path) if l.startswith("{")]
    except OSError:
        return rows
    for d in lines:
        if "not_run" in d or "exit_status" in d:
            problems.append(f"lab {d['lab']}: " + (d.get("not_run") or f"exit status {d['exit_status']}"))
            continue
        # An exercise plants either a wrong result (caught by the CPU reference) or a slowdown with
        # a right result (the sgemm lab's bank conflicts: its counters show it, tests/labs checks them).
        if d["broken"]:
            ok = "exercise: wrong result, caught" if not d["ok"] else "exercise: right result, slower"
        else:
            ok = "yes" if d["ok"] else "NO"
        if not d["broken"] and not d["ok"]:
            problems.append(f"lab {d['lab']} v{d['version']} ({d['name']}) is wrong: max error {d['max_error']}")
        rows.append({"lab": d["lab"], "version": d["version"], "name": d["name"], "ok": ok,
                     "gpu_us": d.get("gpu_us"), "est_h200_us": d.get("est_h200_us")})
    return rows


def main():
    out, cuda_rc, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    problems = []
    ember = read(f"{out}/ember.jsonl", "ember", problems)
    torch = read(f"{out}/torch.jsonl", "torch", problems)
    try:
        gpu = open(f"{out}/gpu.txt").read().strip()
    except OSError:
        gpu = "?"
    rows = []
    for k, what, field, kind, unit, *torch_field in ROWS:
        ek, tk = k.split(">") if ">" in k else (k, k)
        e = ember.get(ek, {}).get(field, "—")
        t = torch.get(tk, {}).get(torch_field[0] if torch_field else field, "—")
        ratio = None
        if isinstance(e, (int, float)) and isinstance(t, (int, float)) and e > 0 and t > 0:
            ratio = e / t if kind == "rate" else (t / e if kind == "time" else None)
        rows.append({"measurement": what, "unit": unit, "ember": e, "torch": t, "speedup": ratio})
    tiny = any(d.get("tiny") for d in list(ember.values()) + list(torch.values()))
    torch_version = next((d.get("torch") for d in torch.values()), "?")
    md = [f"GPU: {gpu}", f"PyTorch {torch_version}; tests/cuda: {'PASS' if cuda_rc == 0 else f'FAIL (rc {cuda_rc})'};"
          f" {seconds} s{'; TINY SIZES (dry run): the numbers mean nothing' if tiny else ''}", "",
          "| measurement | unit | ember | PyTorch | ember speed-up |", "| --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        s = f"{r['speedup']:.2f}x" if r["speedup"] is not None else "—"
        md.append(f"| {r['measurement']} | {r['unit']} | {fmt(r['ember'], r['unit'])} | {fmt(r['torch'], r['unit'])} | {s} |")
    copy = ember.get("bandwidth", {}).get("d2d_copy_gbs")
    if copy:
        relu, total = ember["bandwidth"].get("relu_gbs", 0), ember["bandwidth"].get("sum_gbs", 0)
        md += ["", f"ember's ReLU runs at {100 * relu / copy:.0f}% and its sum at {100 * total / copy:.0f}% of its own "
                   "device-to-device copy bandwidth."]
    labs = lab_rows(f"{out}/labs.jsonl", problems)
    if labs:
        md += ["", "Kernel labs (kernels/labs; every version checked against its CPU reference):", "",
               "| lab | v | version | correct | GPU us | est H200 us (emulator's counters) |", "| --- | ---: | --- | --- | ---: | ---: |"]
        def us(v):
            return "—" if v is None else f"{v:,.1f}"
        md += [f"| {r['lab']} | {r['version']} | {r['name']} | {r['ok']} | {us(r['gpu_us'])} | {us(r['est_h200_us'])} |"
               for r in labs]
    if problems:
        md += ["", "Problems:"] + [f"- {p}" for p in problems]
    text = "\n".join(md) + "\n"
    open(f"{out}/summary.md", "w").write(text)
    json.dump({"gpu": gpu, "torch": torch_version, "tiny": tiny, "cuda_tests_rc": cuda_rc, "seconds": seconds,
               "rows": rows, "labs": labs, "problems": problems}, open(f"{out}/summary.json", "w"), indent=1)
    print(text, end="")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
