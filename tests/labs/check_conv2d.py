#!/usr/bin/env python3
"""The conv2d lab on the emulator (ctest labs:conv2d): every version correct at three sizes, the
exercise caught with its line named, and the counters equal to the paper values.

  check_conv2d.py LAB_DIR     (LAB_DIR: the build's labs/ folder)

The canonical case: N = 8 images of C = 4 channels, 15 x 15, K = 12 filters of 3 x 3, stride 1,
pad 1: the output is 8 x 12 x 15 x 15 = 21600 floats. The im2col matrix has C*R*R = 36 rows and
N*OH*OW = 1800 columns: 64800 floats. Both are multiples of 32 floats, and 1800 * 4 bytes is a
multiple of 32: its rows start on sector boundaries.

v1 direct: 21600 outputs in 675 full warps, consecutive floats: 675 store requests, 4 sectors each.
v2 tiled: one 16 x 16 tile per image (15 x 15 is ragged), 3 groups of 4 filters: 24 blocks, 2
  barriers per channel: 24 * 2 * 4 = 192. Stores: 8 warps (2 rows of 16 lanes) x 4 filters per
  block: 768 requests.
v3 im2col + GEMM, v4 implicit GEMM: the GEMM has 57 block columns (1800 = 56 * 32 + 8), one block
  row (12 filters), and 2 steps over the 36 rows (32 + 4): 57 * 2 * 2 = 228 barriers. Shared,
  per warp and step, 2 stores + 2 * 32 loads = 66: 57 * 32 * 2 * 66 = 240768, conflict-free.
  The weight tile: 12 rows of 36 floats, 144 bytes apart, so odd rows start half-way into a sector:
  32 floats cost 4 or 5 sectors, the 4 that follow 1. 6 * 5 + 6 * 6 = 66 sectors per block,
  57 * 66 = 3762 in 57 * 12 * 2 = 1368 requests, in v3 and v4 alike.
  v3 writes the im2col matrix (64800 floats, 2025 full warps: 2025 requests, 8100 sectors) and
  the GEMM reads it back once (one block row): 57 block columns x 36 rows = 2052 requests, 56 * 36
  * 4 + 36 * 1 = 8100 sectors. v4 does neither; its stores are exactly v3's minus the im2col
  matrix.
  The loads of x in im2col (v3) and in v4's tile loader are gathers: which sectors a warp touches
  depends on where the 32 columns fall among the image rows, the padding and the channels. The
  script derives them the way one would on paper, warp by warp from the kernels' index arithmetic
  (gather_requests below), and so the stores of y by the GEMM's epilogue.
exercise: `ih <= H` lets the rows ih = H through. Inside the tensor they read the next channel's
  first row (a wrong output); for the last channel of the last image they run past the end of x:
  the last output row (oh = 14, fh = 2) of each of the 12 filters, 3 * 15 - 2 = 43 (ow, fw) pairs
  with iw inside the image: 12 * 43 = 516 out-of-bounds loads, reported with conv2d.cu's line.
"""
import re
import sys

from labcheck import expect, finish, run, source_line, table

N, C, H, W, K, R, STRIDE, PAD = 8, 4, 15, 15, 12, 3, 1, 1
OH = (H + 2 * PAD - R) // STRIDE + 1
OW = (W + 2 * PAD - R) // STRIDE + 1
ROWS, COLS = C * R * R, N * OH * OW


def x_index(row, col):
    """The element of x that im2col element (row, col) holds, None in the padding (im2col_element)."""
    c, fh, fw = row // (R * R), row // R % R, row % R
    n, oh, ow = col // (OH * OW), col // OW % OH, col % OW
    ih, iw = oh * STRIDE - PAD + fh, ow * STRIDE - PAD + fw
    return ((n * C + c) * H + ih) * W + iw if 0 <= ih < H and 0 <= iw < W else None


def requests(warps):
    """(requests, sectors) of warp requests given as lists of float indices (None: lane idle)."""
    n = sectors = 0
    for lanes in warps:
        touched = {i * 4 // 32 for i in lanes if i is not None}
        n += bool(touched)
        sectors += len(touched)
    return n, sectors


def gemm_tile_rows():
    """(row, columns) of each warp request of the GEMM's B-tile loader: a tile row of 32 columns."""
    for bx in range((COLS + 31) // 32):
        for r0 in range(0, ROWS, 32):
            for ty in range(32):
                if r0 + ty < ROWS:
                    yield r0 + ty, [c for c in range(bx * 32, bx * 32 + 32) if c < COLS]


def main():
    lab_dir = sys.argv[1]
    v = run(lab_dir, "conv2d")
    for i in (1, 2, 3, 4):
        expect(f"conv2d v{i} correct", v[i]["ok"], True)
        expect(f"conv2d v{i} flops", v[i]["flops"], 2 * N * K * OH * OW * C * R * R)
    # stride 2; and a 5 x 5 filter with pad 2 on a 9 x 11 image, 7 filters (a ragged group of 4)
    for size in ("2,3,15,15,5,3,2,1", "3,5,9,11,7,5,1,2"):
        other = run(lab_dir, "conv2d", "--size", size)
        for i in (1, 2, 3, 4):
            expect(f"conv2d v{i} correct at {size}", other[i]["ok"], True)

    def stores(i):
        return (v[i]["global_store_requests"], v[i]["global_store_sectors"])

    def loads(i):
        return (v[i]["global_load_requests"], v[i]["global_load_sectors"])

    expect("conv2d v1 stores (consecutive outputs)", stores(1), (675, 2700))
    expect("conv2d v2 barriers (2 per channel per block)", v[2]["barriers"], 192)
    expect("conv2d v2 store requests", v[2]["global_store_requests"], 768)
    expect("conv2d v3 launches (im2col, GEMM)", v[3]["launches"], 2)
    for i in (3, 4):
        expect(f"conv2d v{i} barriers (2 per step per block)", v[i]["barriers"], 228)
        expect(f"conv2d v{i} shared requests, wavefronts", (v[i]["shared_requests"], v[i]["shared_wavefronts"]),
               (240768, 240768))

    weights = (1368, 3762)
    im2col_gather = requests([[x_index(i // COLS, i % COLS) for i in range(w, min(w + 32, ROWS * COLS))]
                              for w in range(0, ROWS * COLS, 32)])
    implicit_gather = requests([[x_index(row, c) for c in cols] for row, cols in gemm_tile_rows()])
    matrix_reads = requests([[row * COLS + c for c in cols] for row, cols in gemm_tile_rows()])
    expect("conv2d v3: the GEMM reads the im2col matrix once", matrix_reads, (2052, 8100))
    expect("conv2d v3 loads: x gathered by im2col, the weights, the im2col matrix", loads(3),
           tuple(a + b + c for a, b, c in zip(im2col_gather, weights, matrix_reads)))
    expect("conv2d v4 loads: the weights, x gathered by the tile loader", loads(4),
           tuple(a + b for a, b in zip(weights, implicit_gather)))
    y_stores = requests([[(c // (OH * OW) * K + k) * OH * OW + c % (OH * OW) for c in range(bx * 32, bx * 32 + 32)
                          if c < COLS] for bx in range((COLS + 31) // 32) for k in range(K)])
    expect("conv2d v4 stores (the GEMM's epilogue into NCHW)", stores(4), y_stores)
    expect("conv2d v3 stores: v4's plus the im2col matrix", stores(3), (y_stores[0] + 2025, y_stores[1] + 8100))

    expect("conv2d exercise caught (wrong output)", v[9]["ok"], False)
    expect("conv2d exercise: out-of-bounds loads past the end of x", v[9]["out_of_bounds"], 12 * (3 * W - 2))
    bug_line = source_line("conv2d", "ih <= s.H")
    out = table(lab_dir, "conv2d", "--version", "9")
    expect("conv2d exercise diagnostic names conv2d.cu and the line", bool(re.search(rf"conv2d\.cu:{bug_line}\b", out)),
           True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
