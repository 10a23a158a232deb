#!/usr/bin/env python3
"""Every launch site declares a cost (Note [Launch ledger] in core/cuda/ledger.h).

    check_sites.py ROOT

EMBER_LAUNCH and EMBER_LAUNCH_FLAT take the cost as an argument, so a launch without one does not
compile; this check lists every site in kernels/cuda and fails on a cost that declares nothing
(`Cost{}`), and on any cuBLAS, cuDNN or NCCL call that does work without going through the
ledger (cuda::recorded_call, or record_collective in parallel/nccl_communicator.cpp). Prints the
sites per file.
"""
import re
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
LAUNCH = re.compile(r"\bEMBER_LAUNCH(_FLAT)?\(")
# Library calls that run work on the device (descriptor and handle calls do not). cudnnFind* runs
# inside rank() in kernels/cuda/cudnn.cu, which records the Find as one call.
WORK = re.compile(r"\b(cublas(?:Gemm\w*|[SD]gemm\w*)|cudnn(?:Convolution\w+|AddTensor|Pooling\w+|Activation\w+)|"
                  r"nccl(?:AllReduce|Broadcast|AllGather|ReduceScatter|Reduce|Send|Recv))\s*\(")


def args_of(text, start):
    """The top-level arguments of the call whose '(' is at text[start - 1]."""
    depth, args, cur, i = 0, [], "", start
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                args.append(cur.strip())
                return args
            depth -= 1
        if c == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    return args


def code_lines(text):
    """The text with // comments blanked (positions kept)."""
    return re.sub(r"//[^\n]*", lambda m: " " * len(m.group(0)), text)


problems, total = [], 0
for path in sorted((root / "kernels/cuda").glob("*.cu*")):
    text = code_lines(path.read_text())
    sites = 0
    for m in LAUNCH.finditer(text):
        if text.rfind("#define", 0, m.start()) > text.rfind("\n", 0, m.start()):
            continue
        args = args_of(text, m.end())
        cost = args[4 if m.group(1) else 5] if len(args) > (4 if m.group(1) else 5) else ""
        sites += 1
        line = text.count("\n", 0, m.start()) + 1
        if re.fullmatch(r"(::)?(ember::)?cuda::Cost\{\}", cost.replace(" ", "")) or not cost:
            problems.append(f"{path.relative_to(root)}:{line}: a launch that declares no cost ({cost or 'none'})")
    for m in WORK.finditer(text):
        before = text[max(0, m.start() - 600):m.start()]
        if "recorded_call" not in before:
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{path.relative_to(root)}:{line}: {m.group(1)} is not recorded (cuda::recorded_call)")
    if sites:
        print(f"{path.relative_to(root)}: {sites} launch sites")
    total += sites
nccl = code_lines((root / "parallel/nccl_communicator.cpp").read_text())
for m in WORK.finditer(nccl):
    before = nccl[max(0, m.start() - 400):m.start()]
    if "record_collective" not in before:
        line = nccl.count("\n", 0, m.start()) + 1
        problems.append(f"parallel/nccl_communicator.cpp:{line}: {m.group(1)} is not recorded (record_collective)")
print(f"{total} launch sites in kernels/cuda")
if total == 0:
    problems.append("no launch sites found: the check is reading the wrong place")
for p in problems:
    print("FAIL: " + p)
sys.exit(1 if problems else 0)
