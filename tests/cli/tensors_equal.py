#!/usr/bin/env python3
"""tensors_equal.py A B: exit 0 when two safetensors files hold the same tensors bit for bit (names,
dtypes, shapes, bytes; the metadata, which names the run, may differ), else print the first
difference and exit 1. Standard library only."""
import json, struct, sys


def tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
if a.keys() != b.keys():
    sys.exit(f"different tensor names: {sorted(a.keys() ^ b.keys())}")
for k in sorted(a):
    if a[k] != b[k]:
        sys.exit(f"tensor {k} differs")
