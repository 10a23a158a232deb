#!/usr/bin/env python3
"""The kernel labs on the emulator (ctest labs:*): every version of every lab is correct, each
exercise is caught, and the emulator's counters equal what a CUDA programmer derives on paper.

  check_labs.py LAB_DIR     (LAB_DIR: the build's labs/ folder with lab_copy, lab_transpose)

Paper values, for the sizes the labs run here:
  copy, n = 65539 floats: 2048 full warps + one warp of 3 lanes.
    one float per lane, consecutive: 4 sectors per full request, 1 for the 3-lane one
    lanes 128 bytes apart (v2): 32 sectors per full request
    float4 (v4): 16384 float4 = 512 requests of 16 sectors, and the 3-float tail in 1
  transpose, 96 x 160 floats, 32x32 tiles (15 blocks, 480 warp-rows):
    naive: reads 4 sectors per request, column writes 32
    tile: 480 shared stores by rows (1 wavefront each) + 480 loads by columns (32 each)
    padded tile: 960 requests, 960 wavefronts; one barrier per block
"""
import json
import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
labs_src = os.path.join(here, "..", "..", "kernels", "labs")
failures = []


def run(lab_dir, lab):
    p = subprocess.run([os.path.join(lab_dir, f"lab_{lab}"), "--json", "--broken"], capture_output=True, text=True)
    if p.returncode != 0:
        failures.append(f"lab_{lab} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return {d["version"]: d for d in (json.loads(l) for l in p.stdout.splitlines() if l.startswith("{"))}


def expect(what, got, want):
    status = "ok" if got == want else "FAIL"
    print(f"{status:4} {what}: {got} (expected {want})")
    if got != want:
        failures.append(f"{what}: {got}, expected {want}")


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
    src = open(os.path.join(labs_src, "copy", "copy.cu")).read().splitlines()
    bug_line = next(i + 1 for i, l in enumerate(src) if "if (i <= n)" in l)
    out = subprocess.run([os.path.join(lab_dir, "lab_copy"), "--version", "9"], capture_output=True, text=True).stdout
    expect("copy exercise diagnostic names copy.cu and the line", bool(re.search(rf"copy\.cu:{bug_line}\b", out)), True)

    t = run(lab_dir, "transpose")
    for v in (1, 2, 3, 4):
        expect(f"transpose v{v} correct", t[v]["ok"], True)
    expect("transpose v1 load sectors (rows: 4 per request)", (t[1]["global_load_requests"], t[1]["global_load_sectors"]), (480, 480 * 4))
    expect("transpose v1 store sectors (columns: 32 per request)", (t[1]["global_store_requests"], t[1]["global_store_sectors"]), (480, 480 * 32))
    for v in (2, 3, 4):
        expect(f"transpose v{v} stores coalesced", t[v]["global_store_sectors"], 480 * 4)
        expect(f"transpose v{v} one barrier per block", t[v]["barriers"], 15)
        expect(f"transpose v{v} shared requests", t[v]["shared_requests"], 960)
    expect("transpose v2 wavefronts (column reads of an unpadded tile: 32-way)", t[2]["shared_wavefronts"], 480 * 1 + 480 * 32)
    expect("transpose v3 wavefronts (padded: conflict-free)", t[3]["shared_wavefronts"], 960)
    expect("transpose v4 wavefronts (padded: conflict-free)", t[4]["shared_wavefronts"], 960)
    expect("transpose exercise caught (wrong output)", t[9]["ok"], False)
    expect("transpose exercise has no barrier", t[9]["barriers"], 0)

    print(f"{'FAILED' if failures else 'PASSED'}: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
