#!/usr/bin/env python3
"""The sgemm lab on the emulator (ctest labs:sgemm): every version correct at three sizes, the
exercise caught, and the counters equal to the paper values.

  check_sgemm.py LAB_DIR     (LAB_DIR: the build's labs/ folder)

Paper values for M x N x K = 140 x 136 x 72 (ragged: 140 = 4*32 + 12 = 2*64 + 12 = 128 + 12,
136 = 4*32 + 8 = 2*64 + 8 = 128 + 8, 72 = 2*32 + 8). N*4 = 544 and K*4 = 288 bytes are multiples of
32, so every row of A, B and C starts on a sector boundary: 32 consecutive floats are 4 sectors,
8 are 1. A column block of 32 columns of C is full four times and holds 8 columns once: a row of
C or B costs 4+4+4+4+1 = 17 sectors when read in warps of 32 lanes.

The stores of C follow the loads of C (C[m][n] = alpha*acc + beta*C[m][n] reads and writes the
same element): the same requests and sectors, counted below with each version's C loads.

v1 naive (lanes along M): a warp is (32 rows, one column n); ceil(140/32) * 136 = 680 warps have
  work, each making K loads of A, K of B and one of C: 680 * 145 = 98600 requests.
  A: every lane its own row, its own sector: M*N*K = 1370880 sectors (32 per full request);
  B: one address per warp: 680 * 72 = 48960; C: every lane its own row: M*N = 19040.
v2 coalesced (lanes along N): 140 rows * ceil(136/32) = 700 warps, 700 * 145 = 101500 requests.
  A: one address per warp: 700 * 72 = 50400; B: 72 * 140 * 17 = 171360 (4 per full request);
  C: 140 * 17 = 2380.
v3 shared tiles (32 x 32, K in 3 steps): 5 x 5 = 25 blocks, 2 barriers per step: 150 barriers.
  Global, per step of 32 k (the last holds 8): A rows of 32 or 8 floats: 4, 4, 1 sectors, read
  once per block column: 5 * 140 * 9 = 6300 sectors in 5 * 140 * 3 = 2100 requests;
  B rows: once per block row: 5 * 72 * 17 = 6120 in 5 * 5 * 72 = 1800; C 2380 in 700.
  Total 14800 sectors against v2's 224140: B falls by 140/5 = 28 (the tile height, 32, but for the
  ragged last tile), A by 8 (v2 read one 32-byte sector per 4-byte broadcast).
  Shared: each of the 32 warps of a block, per step: 2 stores + 32 * (As[ty][k] + Bs[k][tx]) = 66
  requests, 25 * 32 * 3 * 66 = 158400, one wavefront each (a broadcast, 32 consecutive words).
v9 exercise (Bt[tx][ty], read Bt[tx][k]): the same 158400 requests; a warp stores and reads a
  column of a 32-float-wide tile: 32 lanes in one bank, 32 wavefronts. Per warp and step
  1 + 32 + 32 * (1 + 32) = 1089: 25 * 32 * 3 * 1089 = 2613600.
v4 1-D tile (64 x 64 x 8, 512 threads = 16 warps, 9 steps, 3 x 3 blocks): 9 * 9 * 2 = 162
  barriers. A: a warp loads 4 rows x 8 floats (4 sectors): 16 warps per step for block rows 0, 1,
  3 for the 12 rows of block row 2: 3 * 9 * 35 = 945 requests, 3780 sectors. B: a warp loads 32
  floats of a row: 16 + 16 + 8 requests per step over the block columns (the last: 8 lanes, 1
  sector): 3 * 9 * 40 = 1080 requests, 3 * 9 * 136 = 3672 sectors. C: 140 rows x 5 column warps
  = 700 requests, 2380 sectors. Shared, per warp and step: 2 stores + 8 * (1 + 8) loads = 74:
  9 * 16 * 9 * 74 = 95904, conflict-free.
v5 2-D tile (128 x 128 x 8, 256 threads = 8 warps, 2 x 2 blocks): 4 * 9 * 2 = 72 barriers.
  A: 2 * 9 * (32 + 3) = 630 requests of 4 sectors; B: 2 * 9 * (32 + 8) = 720 requests,
  2 * 9 * (32 * 4 + 8) = 2448 sectors; C: 630 requests (two rows of 16 floats each), 2380 sectors.
  Shared, per warp and step: 8 stores + 8 * (8 + 8) loads = 136: 4 * 8 * 9 * 136 = 39168.
v6 float4: the same 7348 sectors as v5 in 666 requests: A 2 * 9 * (8 + 1) = 162 requests of 16
  lanes' rows (16 sectors), B 2 * 9 * (8 + 8) = 288, C 216. Shared, per warp and step: 4 scalar
  stores of the transposed A tile, 1 float4 store of B, 8 * 4 float4 loads: 37 requests,
  4 * 8 * 9 * 37 = 10656. A float4 request is served 8 lanes per pass: 4 wavefronts at best
  (39168 ideal). The transposed stores As[4c + i][row] put the lanes with c = 0 and c = 1 four
  rows of 128 floats apart, in the same bank: 2 wavefronts instead of 1, 1152 extra (4 per warp
  and step): 40320.
v7 double buffered: v6's loads and shared-memory accesses exactly, and one barrier per step plus
  the one after the first tiles: 4 * (9 + 1) = 40.
"""
import sys

from labcheck import expect, finish, run

M, N, K = 140, 136, 72


def main():
    lab_dir = sys.argv[1]
    g = run(lab_dir, "sgemm")
    for v in (1, 2, 3, 4, 5, 6, 7):
        expect(f"sgemm v{v} correct", g[v]["ok"], True)
        expect(f"sgemm v{v} flops 2MNK", g[v]["flops"], 2 * M * N * K)
        expect(f"sgemm v{v} counted memory", g[v]["memory_counted"], True)
    for size in ("37,45,29", "67,61,44"):  # every edge ragged; K and N odd or not a multiple of 8
        other = run(lab_dir, "sgemm", "--size", size)
        for v in (1, 2, 3, 4, 5, 6, 7, 9):
            expect(f"sgemm v{v} correct at {size}", other[v]["ok"], True)

    def loads(v):
        return (g[v]["global_load_requests"], g[v]["global_load_sectors"])

    expect("sgemm v1 loads (A: 32 sectors per request)", loads(1), (680 * 145, M * N * K + 680 * 72 + M * N))
    expect("sgemm v2 loads (B and C: 4 sectors per request)", loads(2), (700 * 145, 50400 + 171360 + 2380))
    expect("sgemm v3 loads (each element once per tile of C)", loads(3), (2100 + 1800 + 700, 6300 + 6120 + 2380))
    expect("sgemm v3 barriers (2 per step per block)", g[3]["barriers"], 25 * 3 * 2)
    expect("sgemm v3 shared requests", g[3]["shared_requests"], 158400)
    expect("sgemm v3 wavefronts (conflict-free)", g[3]["shared_wavefronts"], 158400)
    expect("sgemm v4 loads", loads(4), (945 + 1080 + 700, 3780 + 3672 + 2380))
    expect("sgemm v4 barriers", g[4]["barriers"], 162)
    expect("sgemm v4 shared requests and wavefronts", (g[4]["shared_requests"], g[4]["shared_wavefronts"]), (95904, 95904))
    expect("sgemm v5 loads", loads(5), (630 + 720 + 630, 2520 + 2448 + 2380))
    expect("sgemm v5 barriers", g[5]["barriers"], 72)
    expect("sgemm v5 shared requests and wavefronts", (g[5]["shared_requests"], g[5]["shared_wavefronts"]), (39168, 39168))
    expect("sgemm v6 loads (float4: a third of v5's requests, the same sectors)", loads(6), (162 + 288 + 216, 7348))
    expect("sgemm v6 barriers", g[6]["barriers"], 72)
    expect("sgemm v6 shared requests, wavefronts, ideal", (g[6]["shared_requests"], g[6]["shared_wavefronts"],
                                                            g[6]["shared_ideal_wavefronts"]), (10656, 40320, 39168))
    for key in ("global_load_requests", "global_load_sectors", "shared_requests", "shared_wavefronts"):
        expect(f"sgemm v7 {key} as v6", g[7][key], g[6][key])
    expect("sgemm v7 barriers (one per step, and one before the first)", g[7]["barriers"], 40)
    stores = {1: (680, M * N), 2: (700, 2380), 3: (700, 2380), 4: (700, 2380), 5: (630, 2380), 6: (216, 2380),
              7: (216, 2380)}
    for v, want in stores.items():
        expect(f"sgemm v{v} stores of C (as its loads of C)", (g[v]["global_store_requests"], g[v]["global_store_sectors"]), want)
    expect("sgemm exercise correct output (a slowdown, not a wrong result)", g[9]["ok"], True)
    expect("sgemm exercise caught: 32-way conflicts on the B tile", g[9]["shared_wavefronts"], 2613600)
    expect("sgemm exercise: the same requests as v3", g[9]["shared_requests"], 158400)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
