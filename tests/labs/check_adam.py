#!/usr/bin/env python3
"""The adam lab on the emulator (ctest labs:adam): every version correct, the exercise caught with
the line of its first out-of-bounds access named, and the counters equal to the paper values.

  check_adam.py LAB_DIR     (LAB_DIR: the build's labs/ folder)

Paper values, for the emulator's default size (chunks of 1024 floats, a CNN of width 16 and depth
3): T = 14 tensors of n = 2352, 16, 16, then 3 x (2304, 16, 16), then 160, 10 floats, each its own
allocation (256-byte aligned), 256 threads per block.
  One float per lane over an array of n floats: a warp covers 32 consecutive floats (128 bytes,
  4 sectors), so ceil(n / 32) requests and ceil(n / 8) sectors per array (the last warp's lanes
  fill whole sectors but the last).
  One float4 per lane: n4 = n // 4 float4s in ceil(n4 / 32) requests of up to 16 sectors,
  ceil(n4 / 2) sectors, plus one request of one sector for the n % 4 tail when there is one
  (at most 12 bytes starting 16-byte aligned: one sector).
  The multi-tensor versions cut tensors at multiples of 1024 floats, which are multiples of 32
  floats and of 32 float4s: the same requests and sectors as one launch per tensor.
  Arrays read and written per element:
    v1 three kernels: m reads g, m; v reads g, v; p reads m, v, p: 7 loads, 3 stores, 3T launches
    v2..v5 fused:     g, m, v, p once: 4 loads, 3 stores (m, v, p); T launches (v2, v3), 1 (v4, v5)
  Exercise (`i <= end`): every chunk's loop runs one element too far; in a tensor's last chunk that
  element is n, one past the allocation: 4 loads and 3 stores, 7T out-of-bounds accesses.
"""
import re
import sys

from labcheck import expect, finish, run, source_line, table


def cnn_tensor_sizes(w, depth):
    s = [w * 3 * 7 * 7, w, w]
    for _ in range(depth):
        s += [w * w * 3 * 3, w, w]
    return s + [10 * w, 10]


def ceil_div(a, b):
    return -(-a // b)


def main():
    lab_dir = sys.argv[1]
    sizes = cnn_tensor_sizes(16, 3)
    T = len(sizes)
    scalar_req = sum(ceil_div(n, 32) for n in sizes)
    scalar_sect = sum(ceil_div(n, 8) for n in sizes)
    vec_req = sum(ceil_div(n // 4, 32) + (n % 4 > 0) for n in sizes)
    vec_sect = sum(ceil_div(n // 4, 2) + (n % 4 > 0) for n in sizes)

    a = run(lab_dir, "adam")
    for v in (1, 2, 3, 4, 5):
        expect(f"adam v{v} correct", a[v]["ok"], True)
        expect(f"adam v{v} counted memory", a[v]["memory_counted"], True)
        expect(f"adam v{v} no barriers or warp ops", (a[v]["barriers"], a[v]["warp_ops"]), (0, 0))
    expect("adam launches (3T, T, T, 1, 1)", [a[v]["launches"] for v in (1, 2, 3, 4, 5)], [3 * T, T, T, 1, 1])
    def traffic(v):
        return (a[v]["global_load_requests"], a[v]["global_load_sectors"],
                a[v]["global_store_requests"], a[v]["global_store_sectors"])
    expect("adam v1 traffic: 7 arrays read, 3 written",
           traffic(1), (7 * scalar_req, 7 * scalar_sect, 3 * scalar_req, 3 * scalar_sect))
    for v in (2, 4):
        expect(f"adam v{v} traffic: 4 arrays read, 3 written",
               traffic(v), (4 * scalar_req, 4 * scalar_sect, 3 * scalar_req, 3 * scalar_sect))
    for v in (3, 5):
        expect(f"adam v{v} traffic: float4 requests and the tails",
               traffic(v), (4 * vec_req, 4 * vec_sect, 3 * vec_req, 3 * vec_sect))
    expect("adam v2 moves 7/10 of v1's bytes",
           10 * (a[2]["global_load_sectors"] + a[2]["global_store_sectors"]),
           7 * (a[1]["global_load_sectors"] + a[1]["global_store_sectors"]))

    expect("adam exercise caught", a[9]["ok"], False)
    expect("adam exercise: out-of-bounds accesses (4 loads + 3 stores per tensor)", a[9]["out_of_bounds"], 7 * T)
    bug_line = source_line("adam", "// exercise: the emulator names this line")
    out = table(lab_dir, "adam", "--version", "9")
    expect("adam exercise diagnostic names adam.cu and the line",
           bool(re.search(rf"adam\.cu:{bug_line}\b", out)), True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
