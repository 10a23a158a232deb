#!/usr/bin/env python3
"""The reduce lab on the emulator (ctest labs:reduce): every version correct, the exercise caught,
and the counters equal to the paper values.

  check_reduce.py LAB_DIR     (LAB_DIR: the build's labs/ folder)

Paper values, n = 200003 floats, blocks of 256 threads (8 warps); v6's grid is 2 x 132 SMs = 264.

Passes. v1-v3 reduce 256 elements per block: 200003 -> 782 -> 4 -> 1 (3 launches, 787 blocks).
v4, v5 and the exercise reduce 512: 200003 -> 391 -> 1 (2 launches, 392 blocks). v6: 1 launch.

Global loads. A pass over m floats reads them once, lane i of a warp the i-th float of an aligned
run of 32: ceil(m/32) requests of 4 sectors, the last one ceil((m mod 32)/8). Every version reads
the same way (v4 in runs of 256 a block apart, v6 in grid-stride rounds of 264*256 = 67584: both
multiples of 32), so a pass costs ceil(m/32) requests and ceil(m/8) sectors:
  200003: 6251 requests, 25001 sectors;  782: 25, 98;  391: 13, 49;  4: 1, 1.
Global stores: one lane per block writes its sum: one request, one sector per block; v6 makes one
atomicAdd per block instead (an atomic is one store request).

Shared memory per block (a `s[t] += s[t + k]` step is 3 requests: two loads and a store):
  v1 interleaved: thread t works in step `stride` when t % (2 stride) == 0. For stride 1..16 that
     is some lanes of all 8 warps; stride 32: warps 0,2,4,6; 64: warps 0,4; 128: warp 0. 47 warp-
     steps x 3 + 8 stores of the load + 1 read of s[0] = 150 requests. Lanes 2 stride words apart
     with at most 16 lanes: conflict-free, 150 wavefronts.
  v2 strided index: k = 2 stride t < 256: warps 0-3, 0-1, then warp 0 six times: 12 warp-steps,
     45 requests. Lanes 2 stride words apart: stride 1: 2-way, 2: 4-way, 4: 8-way; stride 8 (16
     lanes on banks 0 and 16): 8-way; 16 (8 lanes, bank 0): 8; 32: 4; 64: 2; 128: 1. Wavefronts
     3 (4*2 + 2*4 + 8 + 8 + 8 + 4 + 2 + 1) + 9 = 150: the same shared-memory time as v1.
     Active lanes: the 256 lanes of the load's store, 3 per addition (255 of them) and the read of
     s[0]: 1022 lane-accesses per block, in v1 as in v2 and v3 — 6.8 per request in v1, 22.7 in
     v2 and v3: v1's warps issue shared-memory instructions for few lanes (divergence).
  v3 sequential (and v4, and v5's tree): t < stride: the same 12 warp-steps, consecutive words:
     45 requests, 45 wavefronts, conflict-free.
  v5: the tree stops at 64 sums (strides 128, 64: 6 warp-steps) and warp 0 reads s[t], s[t+32]:
     8 + 18 + 2 = 28 requests.
  v6: 8 warp sums written by lane 0 of each warp + 1 read by warp 0 (8 lanes) = 9.
Barriers per block: v1-v4 one after the load + one per step (8) = 9; v5 1 + 2 = 3; v6 1.
Warp operations: v5 five shuffles per block (offsets 16..1), all 32 lanes, and no barrier among
them; v6 five per warp (8 warps) + five in warp 0 = 45 per block. v1-v4: none.

The exercise's missing synchronization is also reported as shared-memory races, with the lines.

These counts also test the emulator's access hooks (Note [Seeing every load and store]): the
store of each `s[t] += s[t + k]`, the constant-index read of s[0] and the atomicAdd are in them.

Every element is 0 or 1 and n < 2^24: every partial sum is an exact integer in float (Note [An
exact sum] in reduce.cu), so every version must equal the reference exactly.
"""
import re
import sys

from labcheck import expect, finish, run, source_line, table


def loads(*counts):
    """(requests, sectors) of reading counts[i] consecutive floats in each pass."""
    return sum((m + 31) // 32 for m in counts), sum((m + 7) // 8 for m in counts)


def main():
    r = run(sys.argv[1], "reduce")
    for v in (1, 2, 3, 4, 5, 6):
        expect(f"reduce v{v} correct (exact sum)", (r[v]["ok"], r[v]["max_error"]), (True, 0))
    tree = {v: (787, (200003, 782, 4)) for v in (1, 2, 3)}
    tree.update({v: (392, (200003, 391)) for v in (4, 5, 9)})
    for v, (blocks, passes) in tree.items():
        expect(f"reduce v{v} launches", r[v]["launches"], len(passes))
        expect(f"reduce v{v} loads coalesced (requests, sectors)",
               (r[v]["global_load_requests"], r[v]["global_load_sectors"]), loads(*passes))
        expect(f"reduce v{v} one store per block", (r[v]["global_store_requests"], r[v]["global_store_sectors"]), (blocks, blocks))
    expect("reduce v1 loads: 4 sectors per full request", loads(200003, 782, 4), (6251 + 25 + 1, 25001 + 98 + 1))
    expect("reduce v6 one launch, one pass over the input", (r[6]["launches"], r[6]["global_load_requests"], r[6]["global_load_sectors"]),
           (1, 6251, 25001))
    expect("reduce v6 one atomicAdd per block", (r[6]["global_store_requests"], r[6]["global_store_sectors"]), (264, 264))

    # Divergence: v1 does v3's additions in 3.3 times the shared-memory instructions.
    expect("reduce v1 shared requests (47 warp-steps)", (r[1]["shared_requests"], r[1]["shared_wavefronts"]), (787 * 150, 787 * 150))
    for v in (1, 2, 3):
        expect(f"reduce v{v} active lanes of its shared requests (1022 per block)", r[v]["shared_request_lanes"], 787 * 1022)
    # Bank conflicts: v2 has v3's requests but v1's wavefronts.
    expect("reduce v2 shared requests (12 warp-steps)", r[2]["shared_requests"], 787 * 45)
    expect("reduce v2 wavefronts (2- to 8-way conflicts)", r[2]["shared_wavefronts"], 787 * 150)
    expect("reduce v2 bank conflicts", r[2]["shared_wavefronts"] - r[2]["shared_ideal_wavefronts"], 787 * 105)
    expect("reduce v3 conflict-free (requests, wavefronts)", (r[3]["shared_requests"], r[3]["shared_wavefronts"]), (787 * 45, 787 * 45))
    expect("reduce v4 (requests, wavefronts)", (r[4]["shared_requests"], r[4]["shared_wavefronts"]), (392 * 45, 392 * 45))
    expect("reduce v5 (requests, wavefronts)", (r[5]["shared_requests"], r[5]["shared_wavefronts"]), (392 * 28, 392 * 28))
    expect("reduce v6 (requests, wavefronts)", (r[6]["shared_requests"], r[6]["shared_wavefronts"]), (264 * 9, 264 * 9))

    for v in (1, 2, 3):
        expect(f"reduce v{v} barriers (9 per block)", r[v]["barriers"], 787 * 9)
    expect("reduce v4 barriers (9 per block)", r[4]["barriers"], 392 * 9)
    # The goal: a warp-shuffle reduction has no barriers inside a warp. v5 replaces the
    # last 6 steps (6 barriers) by 5 shuffles of 32 lanes.
    expect("reduce v5 barriers (3 per block: none in the warp stage)", r[5]["barriers"], 392 * 3)
    expect("reduce v5 warp ops (5 shuffles per block, 32 lanes)", (r[5]["warp_ops"], r[5]["warp_op_lanes"]), (392 * 5, 392 * 5 * 32))
    expect("reduce v6 barriers (1 per block)", r[6]["barriers"], 264)
    expect("reduce v6 warp ops (45 per block, 32 lanes)", (r[6]["warp_ops"], r[6]["warp_op_lanes"]), (264 * 45, 264 * 45 * 32))
    for v in (1, 2, 3, 4):
        expect(f"reduce v{v} has no warp ops", r[v]["warp_ops"], 0)

    # The exercise: the last warp through shared memory without any synchronization. The sum is
    # wrong, and the counters say why: v5's 3 barriers per block, but no warp operation at all —
    # nothing makes a lane wait for the lane whose sum it reads (18 unsynchronized requests).
    expect("reduce exercise caught (wrong sum)", r[9]["ok"], False)
    expect("reduce exercise: barriers as v5, no warp ops", (r[9]["barriers"], r[9]["warp_ops"]), (392 * 3, 0))
    expect("reduce exercise shared requests (8 stores + the tree's 18 + 6 steps x 3 + s[0])", r[9]["shared_requests"], 392 * 45)
    # The race detector (Note [Shared-memory races]): in the warp stage lane t writes w[t] and lane
    # t - 1 reads it (w[t - 1] + w[t]) with nothing between them: words 1..31 of every block race
    # (w[0] is only lane 0's; w[32..63] are only read).
    expect("reduce exercise: shared-memory races (31 words per block)", r[9]["shared_races"], 392 * 31)
    for v in (1, 2, 3, 4, 5, 6):
        expect(f"reduce v{v} has no shared-memory race", r[v]["shared_races"], 0)
    first, last = (source_line("reduce", f"w[tid] = w[tid] + w[tid + {k}];", after="reduce_exercise") for k in (32, 1))
    race = re.search(r"shared-memory races; the first: .*reduce\.cu:(\d+).*reduce\.cu:(\d+)", table(sys.argv[1], "reduce", "--version", "9"))
    expect("reduce exercise: the race names two lines of the unsynchronized warp stage",
           bool(race) and all(first <= int(line) <= last for line in race.groups()), True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
