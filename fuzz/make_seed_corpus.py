#!/usr/bin/env python3
"""Seed corpus for fuzz_decode: one small image of every format and mode it decodes.

    python3 fuzz/make_seed_corpus.py DIR

Each file is an option byte (see fuzz_decode.cpp) followed by the image. Needs Pillow.
"""
import io
import os
import sys

from PIL import Image


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    base = Image.new("RGB", (23, 17))
    for y in range(17):
        for x in range(23):
            base.putpixel((x, y), ((x * 11) % 256, (y * 15) % 256, ((x + y) * 7) % 256))
    variants = [
        ("jpg", base, "JPEG", {"quality": 90}), ("jpg_gray", base.convert("L"), "JPEG", {}),
        ("jpg_progressive", base, "JPEG", {"progressive": True}), ("jpg_cmyk", base.convert("CMYK"), "JPEG", {}),
        ("png", base, "PNG", {}), ("png_rgba", base.convert("RGBA"), "PNG", {}),
        ("png_palette", base.convert("P"), "PNG", {}), ("png_gray", base.convert("L"), "PNG", {}),
        ("png_16", base.convert("L").convert("I"), "PNG", {}), ("bmp", base, "BMP", {}), ("gif", base.convert("P"), "GIF", {}),
        ("ppm", base, "PPM", {}), ("pgm", base.convert("L"), "PPM", {}), ("tiff", base, "TIFF", {}),
        ("tiff_lzw", base, "TIFF", {"compression": "tiff_lzw"}), ("webp", base, "WEBP", {"quality": 80}),
        ("webp_lossless", base, "WEBP", {"lossless": True}), ("tga", base, "TGA", {}),
    ]
    for name, img, fmt, kw in variants:
        buf = io.BytesIO()
        img.save(buf, fmt, **kw)
        for opt in (0x00, 0x27, 0xB3):
            with open(os.path.join(out, f"{name}_{opt:02x}"), "wb") as f:
                f.write(bytes([opt]) + buf.getvalue())
    print(f"{len(variants) * 3} seeds in {out}")


if __name__ == "__main__":
    main()
