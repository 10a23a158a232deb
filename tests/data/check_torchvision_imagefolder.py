#!/usr/bin/env python3
"""Cross-checks `ember inspect --json` against torchvision's datasets.ImageFolder on a tricky tree.

    check_torchvision_imagefolder.py <ember binary> <work dir>

The tree has what goes wrong in practice: nested folders whose sorted-path order is not the
depth-first order ("a-c" sorts before "a/b"), upper/lower/mixed-case extensions, every extension
torchvision accepts, hidden files and a hidden class directory (.ipynb_checkpoints), non-image
files, an uppercase class name (sorts before lowercase), a symlinked directory and a symlinked
file, and a file whose name merely contains an image extension. torchvision lists files without
decoding them, and so does `ember inspect --json`, so the files hold a few bytes only.

classes, class_to_idx and samples (path, label) must be equal, in order. Then the same with
`--skip-hidden` against torchvision with the hidden entries removed by hand. Last, smoke checks
of `ember inspect` (the summary: counts, size statistics, the unreadable file) and
`ember bench loader` (its JSON line) on a few real PNGs written with the standard library.

Exit status: 0 pass, 1 fail (including torchvision missing: scripts/install-deps.sh installs
python3-torchvision, and a cross-check that did not run must not pass). Run it with Debian's
/usr/bin/python3, which is where python3-torchvision lives.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib

try:
    from torchvision import datasets
except ImportError as e:  # not a skip: see the docstring
    print(f"FAIL: torchvision is not importable by {sys.executable} ({e}); run scripts/install-deps.sh")
    sys.exit(1)


def touch(path, data=b"x"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def make_tree(root):
    shutil.rmtree(root, ignore_errors=True)
    files = [
        "cat/b.jpg", "cat/A.JPG", "cat/c.Jpeg", "cat/a/b/deep.png", "cat/a-c/dash.png", "cat/a/top.PNG",
        "cat/a b/space.bmp", "cat/notes.txt", "cat/.hidden.png", "cat/jpg", "cat/x.jpg.txt", "cat/.DS_Store",
        "dog/1.ppm", "dog/10.pgm", "dog/2.tif", "dog/3.TIFF", "dog/4.webp", "dog/5.WEBP", "dog/sub/.secret/s.jpg",
        "Zebra/z.jpeg", "Zebra/Z.jpg", ".ipynb_checkpoints/cp.png", "bird/ünï.png", "bird/u.png",
    ]
    for f in files:
        touch(os.path.join(root, f))
    os.makedirs(os.path.join(root, "not_a_class_file_dir"), exist_ok=True)
    touch(os.path.join(root, "not_a_class_file_dir", "only.png"))
    touch(os.path.join(root, "loose_file.png"))  # a file at the root is not a class
    # Symlinks: a directory (followed, as os.walk(followlinks=True)) and a file.
    os.symlink(os.path.join(root, "dog", "sub"), os.path.join(root, "cat", "linked_dir"))
    os.symlink(os.path.join(root, "dog", "1.ppm"), os.path.join(root, "bird", "link.ppm"))


def ember_json(ember, root, *flags):
    out = subprocess.run([ember, "inspect", "--json", *flags, root], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"FAIL: ember inspect exited {out.returncode}: {out.stderr.strip()}")
        sys.exit(1)
    text = out.stdout.strip()
    if not text.startswith('{"classes":[') or '],"class_to_idx":{' not in text or '},"samples":[' not in text:
        print(f"FAIL: output is not {{\"classes\":...,\"class_to_idx\":...,\"samples\":...}}: {text[:200]}")
        sys.exit(1)
    return json.loads(text)


def compare(what, got, ds):
    want = {"classes": ds.classes, "class_to_idx": ds.class_to_idx, "samples": [[p, l] for p, l in ds.samples]}
    ok = True
    for key in ("classes", "class_to_idx", "samples"):
        if got[key] != want[key]:
            ok = False
            print(f"FAIL ({what}): {key} differs")
            print(f"  ember:       {got[key]}")
            print(f"  torchvision: {want[key]}")
    if list(got.keys()) != ["classes", "class_to_idx", "samples"]:
        ok = False
        print(f"FAIL ({what}): key order {list(got.keys())}")
    if ok:
        print(f"ok ({what}): {len(ds.classes)} classes, {len(ds.samples)} samples identical")
    return ok


def write_png(path, w, h, seed):
    """A real RGB PNG with the standard library only."""
    rows = b"".join(b"\x00" + bytes(((x * 7 + y * 3 + seed * 50 + c * 80) % 256) for x in range(w) for c in range(3))
                    for y in range(h))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    touch(path, png)


def check_commands(ember, work):
    """`ember inspect` (summary) and `ember bench loader` on a small tree of real PNGs + one bad file."""
    root = os.path.join(work, "pngs")
    shutil.rmtree(root, ignore_errors=True)
    for i in range(6):
        write_png(os.path.join(root, "ab"[i % 2], f"{i}.png"), 30 + i, 20 + 2 * i, i)
    touch(os.path.join(root, "a", "broken.png"), b"\x89PNG\r\n\x1a\nnot really")
    out = subprocess.run([ember, "inspect", root], capture_output=True, text=True)
    text = out.stdout
    ok = out.returncode == 0
    for want in ("7 images in 2 classes", "width min 30, median 33, max 35", "height min 20, median 26, max 30",
                 "unreadable files: 1", "broken.png"):
        if want not in text:
            ok = False
            print(f"FAIL (inspect): '{want}' not in:\n{text}{out.stderr}")
    os.remove(os.path.join(root, "a", "broken.png"))
    out = subprocess.run([ember, "bench", "loader", "--root", root, "--batch-size", "4", "--workers", "1",
                          "--resize", "20", "--crop", "16", "--epochs", "2"], capture_output=True, text=True)
    try:
        j = json.loads(out.stdout)
        good = j["images"] == 12 and j["decoded"] == 12 and j["images_per_sec"] > 0 and "stall_seconds" in j \
            and "decode_seconds" in j and "transform_seconds" in j
    except (ValueError, KeyError):
        good = False
    if not good:
        ok = False
        print(f"FAIL (bench loader): {out.stdout} {out.stderr}")
    if ok:
        print("ok (inspect summary, bench loader JSON)")
    return ok


def main():
    ember, work = sys.argv[1], sys.argv[2]
    root = os.path.join(work, "tree")
    make_tree(root)
    ok = compare("all entries", ember_json(ember, root), datasets.ImageFolder(root))
    # --skip-hidden: torchvision has no such option; remove the hidden entries from a copy by hand.
    hidden_free = os.path.join(work, "tree_no_hidden")
    shutil.rmtree(hidden_free, ignore_errors=True)
    shutil.copytree(root, hidden_free, symlinks=True)
    for dirpath, dirnames, filenames in os.walk(hidden_free, topdown=True):
        for name in [d for d in dirnames if d.startswith(".")]:
            shutil.rmtree(os.path.join(dirpath, name))
            dirnames.remove(name)
        for name in [f for f in filenames if f.startswith(".")]:
            os.remove(os.path.join(dirpath, name))
    # The symlinked directory still points into the original tree, where dog/sub/.secret lives.
    got = ember_json(ember, hidden_free, "--skip-hidden")
    ds = datasets.ImageFolder(hidden_free, is_valid_file=lambda p: not any(
        part.startswith(".") for part in os.path.relpath(p, hidden_free).split(os.sep))
        and p.lower().endswith(datasets.folder.IMG_EXTENSIONS))
    ok = compare("--skip-hidden", got, ds) and ok
    ok = check_commands(ember, work) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
