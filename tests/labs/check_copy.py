#!/usr/bin/env python3
"""The copy lab on the emulator (ctest labs:copy): every version correct, the exercise caught with
its line named, and the counters equal to the paper values.

  check_copy.py LAB_DIR     (LAB_DIR: the build's labs/ folder)

Paper values, n = 65539 floats: 2048 full warps + one warp of 3 lanes.
  one float per lane, consecutive: 4 sectors per full request, 1 for the 3-lane one
  lanes 128 bytes apart (v2): 32 sectors per full request
  float4 (v4): 16384 float4 = 512 requests of 16 sectors, and the 3-float tail in 1
"""
import re
import sys

from labcheck import expect, finish, run, source_line, table


def main():
    lab_dir = sys.argv[1]
    copy = run(lab_dir, "copy")
    for v in (1, 2, 3, 4, 5):
        expect(f"copy v{v} correct", copy[v]["ok"], True)
        expect(f"copy v{v} counted memory", copy[v]["memory_counted"], True)
    expect("copy v1 load requests", copy[1]["global_load_requests"], 2049)
    expect("copy v1 load sectors (4 per coalesced request)", copy[1]["global_load_sectors"], 2048 * 4 + 1)
    expect("copy v1 store sectors", copy[1]["global_store_sectors"], 2048 * 4 + 1)
    expect("copy v2 load sectors (32 per request, lanes 128 B apart)", copy[2]["global_load_sectors"], 2048 * 32 + 1)
    expect("copy v3 load sectors (grid-stride: same as v1)", copy[3]["global_load_sectors"], 2048 * 4 + 1)
    expect("copy v4 load requests (float4)", copy[4]["global_load_requests"], 512 + 1)
    expect("copy v4 load sectors (16 per float4 request)", copy[4]["global_load_sectors"], 512 * 16 + 1)
    expect("copy v5 load sectors (__ldg float4)", copy[5]["global_load_sectors"], 512 * 16 + 1)
    for v in copy:
        expect(f"copy v{v} has no barriers or warp ops", (copy[v]["barriers"], copy[v]["warp_ops"]), (0, 0))
    expect("copy exercise caught", copy[9]["ok"], False)
    expect("copy exercise: out-of-bounds accesses (thread n loads and stores)", copy[9]["out_of_bounds"], 2)
    # The diagnostic names the line of the bug.
    bug_line = source_line("copy", "if (i <= n)")
    out = table(lab_dir, "copy", "--version", "9")
    expect("copy exercise diagnostic names copy.cu and the line", bool(re.search(rf"copy\.cu:{bug_line}\b", out)), True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
