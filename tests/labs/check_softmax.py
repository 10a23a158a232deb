#!/usr/bin/env python3
"""The softmax lab on the emulator (ctest labs:softmax): every version correct, the exercise
caught, and the counters equal to the paper values.

  check_softmax.py LAB_DIR     (LAB_DIR: the build's labs/ folder)

Paper values, 77 rows x 1000 columns, blocks of 128 threads (4 warps). A row is 4000 bytes, a
multiple of 32, so every row starts on a sector boundary.

One pass over a row, coalesced (v2-v5: 32 lanes read 32 consecutive floats): 1000 = 31 x 32 + 8
columns, so 31 requests of 4 sectors and one of 8 lanes (1 sector): 32 requests, 125 sectors.
  v2, v3 read each row 3 times (max, sum, output) and write it once:
      loads 3 x 32 x 77 = 7392 requests, 3 x 125 x 77 = 28875 sectors; stores 2464, 9625.
  v4 (online) reads it twice: loads 2 x 32 x 77 = 4928, 2 x 125 x 77 = 19250; stores as v3.
  v5 (fused cross-entropy) reads it once, and lane 0 reads the label and its logit (1 sector each)
      and writes the loss and the logsumexp: loads 32 x 77 + 2 x 77 = 2618 requests,
      125 x 77 + 2 x 77 = 9779 sectors; stores 2 x 77 = 154, one sector each.
v1 (a thread per row: one block, warps of 32, 32 and 13 rows): at each column the lanes read 32
  different rows, 4000 bytes apart: one sector per lane. 3 read passes + 1 write pass of 1000
  columns per warp: loads 3 x 1000 x 3 warps = 9000 requests, 3 x 1000 x 77 lanes = 231000
  sectors (32 per request of a full warp, 8 times v3's 4); stores 3000 requests, 77000 sectors.
Barriers: v2 two block reductions per row of 1 + 7 (log2 128 steps) + 1 (before s is reused)
  = 18 per row: 1386. v3-v5: none.
Shared memory in v2, per reduction: 4 stores (one per warp) + 8 warp-steps (strides 64: 2 warps,
  32..1: 1 warp) x 3 + 4 reads of s[0] (a broadcast: 1 wavefront) = 32; 64 per row: 4928,
  conflict-free.
Warp ops: v3 5 shuffles for the max + 5 for the sum per row = 770, all 32 lanes; v4 and v5 5
  steps of 2 shuffles (m and d) = the same 770; the warps of block 19 past row 76 make none.
Exercise (no max subtracted): a sum (5 shuffles per row: 385) and two read passes; rows with
  logits above 88.7 overflow expf: inf / inf = NaN, and the check fails; the lab names the first
  such output, in row 4 (logits 80 +- 10).
"""
import os
import re
import subprocess
import sys

from labcheck import expect, finish, run


def main():
    s = run(sys.argv[1], "softmax")
    rows, per_row = 77, (32, 125)  # one coalesced pass over a row: requests, sectors
    for v in (1, 2, 3, 4, 5):
        expect(f"softmax v{v} correct", s[v]["ok"], True)

    def traffic(v):
        d = s[v]
        return (d["global_load_requests"], d["global_load_sectors"], d["global_store_requests"], d["global_store_sectors"])

    expect("softmax v1 uncoalesced: a sector per lane (32 per full-warp request)", traffic(1),
           (3 * 1000 * 3, 3 * 1000 * rows, 1000 * 3, 1000 * rows))
    read3 = (3 * per_row[0] * rows, 3 * per_row[1] * rows, per_row[0] * rows, per_row[1] * rows)
    expect("softmax v2 coalesced, 3 passes over the input", traffic(2), read3)
    expect("softmax v3 coalesced, 3 passes over the input", traffic(3), read3)
    expect("softmax v4 online: 2 passes over the input", traffic(4),
           (2 * per_row[0] * rows, 2 * per_row[1] * rows, per_row[0] * rows, per_row[1] * rows))
    expect("softmax v4 reads 2/3 of v3's sectors", 3 * s[4]["global_load_sectors"], 2 * s[3]["global_load_sectors"])
    expect("softmax v5 fused: 1 pass, the label and its logit; writes loss and lse", traffic(5),
           (per_row[0] * rows + 2 * rows, per_row[1] * rows + 2 * rows, 2 * rows, 2 * rows))

    expect("softmax v2 barriers (18 per row)", s[2]["barriers"], 18 * rows)
    expect("softmax v2 has no shared-memory race (the barrier before s is reused)", s[2]["shared_races"], 0)
    expect("softmax v2 shared memory (requests, wavefronts)", (s[2]["shared_requests"], s[2]["shared_wavefronts"]),
           (64 * rows, 64 * rows))
    for v in (3, 4, 5):
        expect(f"softmax v{v} warp per row: no barriers, no shared memory", (s[v]["barriers"], s[v]["shared_requests"]), (0, 0))
        expect(f"softmax v{v} warp ops (10 per row, 32 lanes)", (s[v]["warp_ops"], s[v]["warp_op_lanes"]),
               (10 * rows, 10 * rows * 32))
    expect("softmax v1, v2 make no warp ops", (s[1]["warp_ops"], s[2]["warp_ops"]), (0, 0))

    expect("softmax exercise caught (NaN: max_error is reported as -1)", (s[9]["ok"], s[9]["max_error"]), (False, -1))
    expect("softmax exercise: one warp sum per row, no max", s[9]["warp_ops"], 5 * rows)
    # Rows 0-3 have logits up to 70 at most (exp(70) * 1000 fits a float); row 4 has logits up to
    # 90 and expf overflows above 88.7: the first output that is not a number is in row 4.
    err = subprocess.run([os.path.join(sys.argv[1], "lab_softmax"), "--version", "9"], capture_output=True, text=True).stderr
    bad = re.search(r"p\[(\d+)\]\[\d+\] = \S+; the row's largest logit is ([\d.]+)", err)
    expect("softmax exercise: the first NaN is named, in row 4 (largest logit above 88.7)",
           bool(bad) and (int(bad.group(1)), float(bad.group(2)) > 88.7), (4, True))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
