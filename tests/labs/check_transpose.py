#!/usr/bin/env python3
"""The transpose lab on the emulator (ctest labs:transpose): every version correct, the exercise
caught, and the counters equal to the paper values.

  check_transpose.py LAB_DIR     (LAB_DIR: the build's labs/ folder)

Paper values, 96 x 160 floats, 32x32 tiles (15 blocks, 480 warp-rows):
  naive: reads 4 sectors per request, column writes 32
  tile: 480 shared stores by rows (1 wavefront each) + 480 loads by columns (32 each)
  padded tile: 960 requests, 960 wavefronts; one barrier per block
  exercise: no barrier; the 992 off-diagonal words of each of the 15 tiles race
"""
import re
import sys

from labcheck import expect, finish, run, source_line, table


def main():
    t = run(sys.argv[1], "transpose")
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
    # Thread (x, y) writes tile[y][x] and thread (y, x) reads it with no barrier between: every
    # written word but the diagonal's races (Note [Shared-memory races]), and the diagnostic names
    # the store and the load.
    expect("transpose exercise: shared-memory races (1024 - 32 words per tile)", t[9]["shared_races"], 15 * 992)
    store = source_line("transpose", "tile[threadIdx.y][threadIdx.x] = in", after="transpose_exercise")
    load = source_line("transpose", "= tile[threadIdx.x][threadIdx.y]", after="transpose_exercise")
    out = table(sys.argv[1], "transpose", "--version", "9")
    expect("transpose exercise diagnostic names the store and the load",
           bool(re.search(rf"races; the first: .*transpose\.cu:{store}\b.*transpose\.cu:{load}\b", out)), True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
