#!/usr/bin/env python3
"""Cross-checks ember's safetensors files against the reference implementation (the `safetensors`
package, whose Rust core safetensors.torch uses as well).

    check_safetensors.py <ember_tests binary> <work dir>

1. ember writes ember.safetensors (hidden Catch test "io interop: ember writes ...");
2. the reference reader validates it (safetensors.deserialize: every dtype, BF16 as raw bytes)
   and safe_open(framework="numpy") reads the values, which must be exactly the expected ones;
3. safetensors.numpy.save_file writes python.safetensors (dtype-sorted data layout, its own
   header order);
4. ember reads it back and checks the values (hidden Catch test "io interop: ember reads ...").

Exit status: 0 pass, 1 fail, 77 when numpy or safetensors is not installed (ctest SKIP_RETURN_CODE;
scripts/install-deps.sh installs them).
"""

import json
import os
import shutil
import struct
import subprocess
import sys

SKIP = 77

try:
    import numpy as np
    import safetensors
    import safetensors.numpy
except ImportError as e:  # not an error: the check needs optional Python packages
    print(f"SKIP: {e} (pip install safetensors numpy)")
    sys.exit(SKIP)

# Kept in sync with the hidden [io_python] test cases in tests/test_io.cpp.
F32 = np.array([-1.0, -0.5, 0.0, 0.5, 1.0, 1.5], dtype=np.float32).reshape(2, 3)
EXPECTED = {
    "f32": F32,
    "f64": np.array([1.0 / 3.0, -2.5, 1e300], dtype=np.float64),
    "f16": np.array([0.5, -1.5, 65504.0, 2.0**-24], dtype=np.float16).reshape(2, 2),
    "i32": np.array([-(2**31), -1, 0, 2**31 - 1], dtype=np.int32).reshape(2, 2),
    "i64": np.array([-(2**63), 2**63 - 1], dtype=np.int64),
    "u8": np.array([0, 1, 128, 255], dtype=np.uint8),
    "bool": np.array([True, False, True]),
    "scalar": np.array(42.0, dtype=np.float32),
    "empty": np.zeros((0, 3), dtype=np.float32),
    "transposed": np.ascontiguousarray(F32.T),
}
# numpy has no bfloat16: ember's BF16 tensor is checked as raw little-endian bits.
BF16_BITS = [0x3F80, 0xC000, 0x4049]  # 1.0, -2.0, 3.140625
DTYPES = {"f32": "F32", "f64": "F64", "f16": "F16", "i32": "I32", "i64": "I64", "u8": "U8",
          "bool": "BOOL", "scalar": "F32", "empty": "F32", "transposed": "F32"}


def run_ember(binary, test_name, work):
    env = dict(os.environ, EMBER_IO_INTEROP_DIR=work)
    r = subprocess.run([binary, test_name], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        raise SystemExit(f"FAIL: ember_tests '{test_name}' exited {r.returncode}")


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")


def check_ember_file(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    check((8 + n) % 8 == 0, f"data section not 8-byte aligned (header length {n})")
    header = json.loads(raw[8:8 + n])
    check(list(header)[0] == "__metadata__", "__metadata__ is not the first header key")
    check(list(header)[1:] == list(EXPECTED)[:3] + ["bf16"] + list(EXPECTED)[3:],
          f"header order {list(header)[1:]} is not the order ember was given")

    itemsize = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "U8": 1, "BOOL": 1}
    for name, info in header.items():
        if name != "__metadata__":
            begin = info["data_offsets"][0]
            check(begin % itemsize[info["dtype"]] == 0, f"{name}: data offset {begin} is not aligned")

    # The reference deserializer runs every validation of the format (offsets, sizes, coverage).
    tensors = dict(safetensors.deserialize(raw))
    check(set(tensors) == set(EXPECTED) | {"bf16"}, f"names {sorted(tensors)}")
    for name, want in EXPECTED.items():
        info = tensors[name]
        check(info["dtype"] == DTYPES[name], f"{name}: dtype {info['dtype']}")
        check(list(info["shape"]) == list(want.shape), f"{name}: shape {info['shape']} != {want.shape}")
    bf16 = tensors["bf16"]
    check(bf16["dtype"] == "BF16" and list(bf16["shape"]) == [3], f"bf16: {bf16['dtype']} {bf16['shape']}")
    check(list(struct.unpack("<3H", bytes(bf16["data"]))) == BF16_BITS, "bf16: wrong bits")

    with safetensors.safe_open(path, framework="numpy") as f:
        check(f.metadata() == {"format": "pt", "writer": "ember"}, f"metadata {f.metadata()}")
        for name, want in EXPECTED.items():
            got = f.get_tensor(name)
            check(got.dtype == want.dtype, f"{name}: numpy dtype {got.dtype} != {want.dtype}")
            check(got.shape == want.shape, f"{name}: numpy shape {got.shape} != {want.shape}")
            check(np.array_equal(got, want), f"{name}: values {got} != {want}")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    binary, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    run_ember(binary, "io interop: ember writes the file Python checks", work)
    check_ember_file(os.path.join(work, "ember.safetensors"))

    safetensors.numpy.save_file(EXPECTED, os.path.join(work, "python.safetensors"),
                                metadata={"format": "np", "writer": "python"})
    run_ember(binary, "io interop: ember reads the file Python wrote", work)
    print(f"io:python_safetensors: PASS (safetensors {safetensors.__version__}, numpy {np.__version__})")


if __name__ == "__main__":
    main()
