#!/usr/bin/env python3
"""The tensor_core_gemm lab on the emulator (ctest labs:tensor_core_gemm): every version correct,
the exercise caught, and the counters equal to the paper values.

  check_tensor_core_gemm.py LAB_DIR     (LAB_DIR: the build's labs/ folder)

Paper values, M = 128, N = 64, K = 128 (bf16 A and B, float C, all row-major):
  v1 CUDA cores, blocks of 32x8: M N / 32 = 256 warps, each lane K steps. Per step a warp reads
     one element of A (all lanes the same address: 1 sector) and 32 consecutive bf16 of B (64
     bytes: 2 sectors): 2 K requests and 3 K sectors per warp. C: one 128-byte row, 4 sectors.
  v2 WMMA from global memory, a warp per 16x16 tile: 32 warps, K / 16 = 8 steps of (load A,
     load B, mma) and one store: 32 (8 x 3 + 1) = 800 warp ops of 32 lanes. The emulator's WMMA
     loads each lane's fragment elements, two adjacent ones at once (kernels/simt/include/mma.h):
       A row-major: 4 requests of 4 bytes per lane; a request covers 8 rows x 16 bytes: 8 sectors
       B row-major: the fragment's pairs run down k, not adjacent: 8 requests of 2 bytes; a
                    request covers 4 rows x 16 bytes: 4 sectors
       C store:     4 requests of 8 bytes, 8 rows x 32 bytes: 8 sectors
  v3-v5, 64x64 tiles, 4 warps per block, K in tiles of 64: 2 blocks x 2 k-tiles = 4 tile steps.
     Per tile step, copying A's and B's tiles: 2 x 16 requests of 16 bytes per lane (4 rows of
     128 bytes: 16 sectors) from global memory, the same 32 requests into shared memory (8 lanes
     per pass write one whole 128-byte row: 4 wavefronts per request). Two barriers per step.
     v3: WMMA loads from the unpadded tile (rows 128 bytes apart: the same banks) per warp and
         16-k step: 2 A loads x 4 requests, each 8 rows in the same 4 banks: 8 wavefronts; 2 B loads
         x 8 requests, each 4 rows x 4 words in the same banks: 4 wavefronts. Per tile step:
         16 warp-steps x (8 x 8 + 16 x 4) = 2048 wavefronts in 384 requests, + the copies.
         Warp ops: 8 warps x 2 tiles x 4 steps x (2 + 2 + 4) + 8 warps x 4 stores = 544.
     v4: per warp and 16-k step 2 ldmatrix.x4 (A) + 2 ldmatrix.x4.trans (B) + 8 mma = 12 warp ops:
         768 in all. An x4 is 32 lanes x 16 bytes in 4 passes of 8 rows; unpadded rows are 128
         bytes apart: 8 rows in the same 4 banks, 8 wavefronts per pass, 32 per ldmatrix.
         Per tile step: 64 ldmatrix x 32 = 2048 wavefronts, + 32 x 4 for the copies.
     v5: rows 144 bytes (36 words) apart: row r starts in bank 4r, the 8 rows cover the 32 banks:
         4 wavefronts per ldmatrix, the ideal.
     v6: rows 128 bytes apart, 16-byte chunk c of row r stored at chunk c ^ (r % 8): the 8 rows of
         a pass are in 8 different chunks, which cover the 32 banks: 4 wavefronts per ldmatrix; the
         copies still write whole rows (a permutation of one row's chunks): 4 per request.
     C stores (v4-v6): per warp 2 x 4 mma tiles x 2 float2 stores, 8 rows x 32 bytes: 8 sectors.
  Exercise: the barrier after the copies is missing: wrong results (warps read tile rows that other
  warps have not written: the emulator fills shared memory with NaN first) and 4 barriers, not 8.
"""
import sys

from labcheck import expect, finish, run


def main():
    g = run(sys.argv[1], "tensor_core_gemm")
    M, N, K = 128, 64, 128
    for v in (1, 2, 3, 4, 5, 6):
        expect(f"gemm v{v} correct", g[v]["ok"], True)
        expect(f"gemm v{v} counted memory", g[v]["memory_counted"], True)

    def loads(v):
        return (g[v]["global_load_requests"], g[v]["global_load_sectors"])

    def stores(v):
        return (g[v]["global_store_requests"], g[v]["global_store_sectors"])

    def shared(v):
        return (g[v]["shared_requests"], g[v]["shared_wavefronts"])

    def warp(v):
        return (g[v]["warp_ops"], g[v]["warp_op_lanes"], g[v]["barriers"])

    warps1 = M * N // 32
    expect("gemm v1 loads (A broadcast: 1 sector, B: 2)", loads(1), (warps1 * K * 2, warps1 * K * 3))
    expect("gemm v1 stores", stores(1), (warps1, warps1 * 4))
    expect("gemm v1 no warp ops or barriers", warp(1), (0, 0, 0))

    warps2, steps = M * N // 256, K // 16
    expect("gemm v2 loads (A: 4 x 8 sectors, B: 8 x 4 per step)", loads(2), (warps2 * steps * 12, warps2 * steps * 64))
    expect("gemm v2 stores", stores(2), (warps2 * 4, warps2 * 4 * 8))
    expect("gemm v2 warp ops (load, load, mma per step; a store)", warp(2),
           (warps2 * (steps * 3 + 1), 32 * warps2 * (steps * 3 + 1), 0))

    tile_steps = (M // 64) * (N // 64) * (K // 64)
    warps = (M // 64) * (N // 64) * 4
    for v in (3, 4, 5, 6):
        expect(f"gemm v{v} tile copies: 16 sectors per request", loads(v), (tile_steps * 32, tile_steps * 32 * 16))
        expect(f"gemm v{v} C stores", stores(v), (warps * 16, warps * 16 * 8))
    expect("gemm v3 shared (WMMA loads from an unpadded tile)", shared(3),
           (tile_steps * (32 + 384), tile_steps * (32 * 4 + 2048)))
    expect("gemm v3 warp ops and barriers", warp(3), (544, 544 * 32, 2 * tile_steps))
    expect("gemm v4 shared (ldmatrix, unpadded: 32 wavefronts each)", shared(4),
           (tile_steps * (32 + 64), tile_steps * (32 * 4 + 64 * 32)))
    expect("gemm v5 shared (ldmatrix, padded: 4 wavefronts each)", shared(5),
           (tile_steps * (32 + 64), tile_steps * (32 * 4 + 64 * 4)))
    expect("gemm v6 shared (ldmatrix, swizzled: 4 wavefronts each)", shared(6),
           (tile_steps * (32 + 64), tile_steps * (32 * 4 + 64 * 4)))
    for v in (4, 5, 6):
        expect(f"gemm v{v} warp ops and barriers", warp(v),
               (warps * (K // 64) * 4 * 12, warps * (K // 64) * 4 * 12 * 32, 2 * tile_steps))
    expect("gemm exercise caught (wrong output)", g[9]["ok"], False)
    expect("gemm exercise: one barrier per tile step, not two", g[9]["barriers"], tile_steps)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
