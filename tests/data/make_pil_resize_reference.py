#!/usr/bin/env python3
"""Reference outputs for tests/test_image_transforms.cpp: PIL's bilinear (antialiased) resize and
torchvision-style Resize / CenterCrop chains on u8 RGB images.

Run with Debian's python3 (PIL 9.4, numpy):  /usr/bin/python3 tests/data/make_pil_resize_reference.py
It writes tests/data/pil/<case>.bin: the output image as raw uint8 in (C, H, W) order, no header.
The inputs are not stored: pattern() below is an integer formula the C++ test computes too
(test_image_transforms.cpp, pattern_image), so both sides start from identical pixels.

Resize(size) and CenterCrop follow torchvision 0.15+ (transforms/functional.py) for PIL images:
  resize: shorter side -> size, longer side -> int(size * long / short); PIL BILINEAR, reducing_gap None
  center_crop: pad with zeros when the crop is larger, then top = int(round((H - h) / 2.0))
"""
import os

import numpy as np
from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pil")


def pattern(h, w):
    """u8 (3, h, w): gradients plus hashed noise, wrapping mod 256 (sharp edges on purpose)."""
    img = np.zeros((3, h, w), dtype=np.uint8)
    for c in range(3):
        for y in range(h):
            for x in range(w):
                base = (x * 200) // w + (y * 150) // h + c * 40
                n = ((x * 73856093) ^ (y * 19349663) ^ (c * 83492791)) & 0xFFFFFFFF
                img[c, y, x] = (base + ((n >> 7) & 63)) & 255
    return img


def to_pil(chw):
    return Image.fromarray(np.ascontiguousarray(chw.transpose(1, 2, 0)), mode="RGB")


def to_chw(pil):
    return np.asarray(pil, dtype=np.uint8).transpose(2, 0, 1)


def resize_exact(pil, h, w):
    return pil.resize((w, h), Image.BILINEAR)


def resize_shorter(pil, size):
    # torchvision _compute_resized_output_size (max_size None)
    w, h = pil.size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    return resize_exact(pil, new_h, new_w)


def center_crop(pil, ch, cw):
    # torchvision.transforms.functional.center_crop, transcribed for PIL images
    iw, ih = pil.size
    if cw > iw or ch > ih:
        left = (cw - iw) // 2 if cw > iw else 0
        top = (ch - ih) // 2 if ch > ih else 0
        right = (cw - iw + 1) // 2 if cw > iw else 0
        bottom = (ch - ih + 1) // 2 if ch > ih else 0
        padded = Image.new("RGB", (iw + left + right, ih + top + bottom), (0, 0, 0))
        padded.paste(pil, (left, top))
        pil = padded
        iw, ih = pil.size
        if cw == iw and ch == ih:
            return pil
    top = int(round((ih - ch) / 2.0))
    left = int(round((iw - cw) / 2.0))
    return pil.crop((left, top, left + cw, top + ch))


def main():
    os.makedirs(OUT, exist_ok=True)
    a = to_pil(pattern(53, 37))   # (H, W) = (53, 37)
    b = to_pil(pattern(48, 64))
    c = to_pil(pattern(300, 400))
    cases = {
        "a_resize_23x16": resize_exact(a, 23, 16),          # down ~2.3x
        "a_resize_7x11": resize_exact(a, 7, 11),            # down a lot, different aspect
        "a_resize_80x56": resize_exact(a, 80, 56),          # up 1.5x
        "a_resize_40x60": resize_exact(a, 40, 60),          # down in H, up in W
        "b_resize_21x28": resize_exact(b, 21, 28),
        "b_resize_7x11": resize_exact(b, 7, 11),
        "b_resize_72x96": resize_exact(b, 72, 96),
        "b_resize32_crop24": center_crop(resize_shorter(b, 32), 24, 24),
        "b_crop_60x70": center_crop(b, 60, 70),             # pads both sides
        "b_crop_31x41": center_crop(b, 31, 41),             # odd crop of an even image
        "a_resizedcrop_5_3_30_20_to_16": resize_exact(a.crop((3, 5, 3 + 20, 5 + 30)), 16, 16),
        "c_resize256_crop224": center_crop(resize_shorter(c, 256), 224, 224),
    }
    total = 0
    for name, pil in cases.items():
        data = np.ascontiguousarray(to_chw(pil)).tobytes()
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(data)
        total += len(data)
        print(f"{name}: (3, {pil.size[1]}, {pil.size[0]})")
    print(f"{len(cases)} files, {total} bytes")


if __name__ == "__main__":
    main()
