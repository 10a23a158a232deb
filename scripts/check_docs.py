#!/usr/bin/env python3
"""Checks that ember's documents and comments can still be true: run by scripts/check-docs.sh.

  python3 scripts/check_docs.py [ROOT]      # ROOT: the repository (default: this script's parent)

Three rules, each failure printed as FILE:LINE: what is wrong:

1. Notes. A Note is defined by a comment line that holds nothing but its name
   (`// Note [Caching allocator]`, also framed as `// ---- Note [Tiled transpose] ----`; `#` in CMake
   and shell) and referenced anywhere else
   as `Note [Caching allocator]`. Every referenced Note must be defined exactly once, and no Note
   may be defined twice.
2. Paths. A repository path named in a Markdown file, or in a comment of a source file, must exist:
   a path that starts at a top-level folder of the repository (`kernels/cuda/conv.cu`,
   `layers/*.cpp`, `tests/gradcheck.{h,cpp}`, `bench/bench_ddp` for a target built from
   bench/bench_ddp.cpp), a Markdown link's relative target, and a .cpp or .cu file named without
   its folder in a C++/CUDA comment.
3. Stale plans. Documents and comments say what the code does now; phrases that promise work
   ("a later issue", "until the X lands", "will implement", "(later)") belong in issues.

Files: those git tracks (and untracked, not ignored) when ROOT is a checkout; else every file
under ROOT. Exit status 0 when every rule holds, 1 otherwise.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from pathlib import Path

from repo_files import repo_files

SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".c", ".cmake", ".sh", ".py", ".in", ".txt"}
SOURCE_NAMES = {"CMakeLists.txt", "run"}
DOC_SUFFIXES = {".md"}

NOTE_DEF = re.compile(r"^\s*(?://+|#+|\*)\s*(?:-+\s*)?Note \[([^\]]+)\]\s*(?:-+\s*)?$")
NOTE_REF = re.compile(r"Note \[([^\]]+)\]")
STALE = re.compile(
    r"\b(?:a |the )?(?:later|future|next) issues?\b"
    r"|\buntil (?:the |a )?[\w ./+-]{1,40}? lands\b"
    r"|\bwill (?:be )?implement(?:ed|s)?\b"
    r"|\(later\)"
    r"|\bthe CUDA issue\b",
    re.IGNORECASE,
)
# The checker and its test quote the phrases they look for.
SELF = {"scripts/check_docs.py", "tests/docs/check_docs_planted.sh"}
# A file named without its folder in a C++/CUDA comment ("see engine.cpp"): must be one of ours.
BARE_SOURCE = re.compile(r"(?<![\w./*<>-])([A-Za-z_][\w-]*\.(?:cpp|cu))\b")
# A comment in a source file: // or /* ... */ continuation lines in C++/CUDA, # in the rest.
CPP_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".c"}


def comment_text(path: Path, line: str) -> str | None:
    """The comment part of one source line, or None when the line has no comment."""
    if path.suffix in CPP_SUFFIXES:
        i = line.find("//")
        if i >= 0:
            return line[i + 2:]
        s = line.lstrip()
        if s.startswith("/*") or s.startswith("*"):
            return s.lstrip("/*")
        return None
    i = line.find("#")
    return line[i + 1:] if i >= 0 else None


def expand_braces(p: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", p)
    if not m:
        return [p]
    return [x for alt in m.group(1).split(",") for x in expand_braces(p[: m.start()] + alt + p[m.end():])]


class Checker:
    def __init__(self, root: Path):
        self.root = root
        rel = repo_files(root)
        self.files = [root / n for n in rel if self.kind(root / n)]
        self.all_paths = set(rel)
        self.basenames = {p.rsplit("/", 1)[-1] for p in rel}
        self.all_dirs = {"/".join(p.split("/")[:i]) for p in rel for i in range(1, p.count("/") + 1)}
        self.top = sorted({p.split("/")[0] for p in rel if "/" in p} - {"build"})
        self.path_token = re.compile(
            r"(?<![\w./-])((?:" + "|".join(map(re.escape, self.top)) + r")/[\w./*{},\\-]*[\w*}/])"
        ) if self.top else None
        self.errors: list[str] = []

    @staticmethod
    def kind(f: Path) -> str | None:
        if f.suffix in DOC_SUFFIXES:
            return "doc"
        if f.suffix in SOURCE_SUFFIXES or f.name in SOURCE_NAMES:
            return "source"
        return None

    def fail(self, f: Path, n: int, msg: str) -> None:
        self.errors.append(f"{f.relative_to(self.root).as_posix()}:{n}: {msg}")

    def path_exists(self, p: str) -> bool:
        p = p.replace("\\", "").rstrip(".,")
        for alt in expand_braces(p):
            alt = alt.rstrip("/")
            if any(c in alt for c in "*?["):
                if any(fnmatch.fnmatchcase(x, alt) for x in self.all_paths | self.all_dirs):
                    continue
                return False
            if alt in self.all_paths or alt in self.all_dirs:
                continue
            # A target or a family named without its extension: bench/bench_ddp, kernels/cuda/conv.
            if "." not in alt.rsplit("/", 1)[-1] and any(x.startswith(alt + ".") for x in self.all_paths):
                continue
            return False
        return True

    def run(self) -> int:
        defs: dict[str, list[tuple[Path, int]]] = {}
        refs: dict[str, list[tuple[Path, int]]] = {}
        for f in self.files:
            kind = self.kind(f)
            try:
                lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            in_fence = False
            for n, line in enumerate(lines, 1):
                if kind == "doc":
                    if line.lstrip().startswith("```"):
                        in_fence = not in_fence
                    text = line
                else:
                    text = comment_text(f, line)
                    if text is None:
                        continue
                m = NOTE_DEF.match(line)
                if m and kind == "source":
                    defs.setdefault(m.group(1), []).append((f, n))
                else:
                    for name in NOTE_REF.findall(text):
                        if name != "...":
                            refs.setdefault(name, []).append((f, n))
                if f.relative_to(self.root).as_posix() not in SELF:
                    for m in STALE.finditer(text):
                        self.fail(f, n, f"stale plan '{m.group(0)}': say what the code does now (plans go in issues)")
                if self.path_token is not None:
                    for m in self.path_token.finditer(text):
                        p = m.group(1)
                        if not self.path_exists(p):
                            self.fail(f, n, f"'{p}' names no file or folder of the repository")
                if kind == "source" and f.suffix in CPP_SUFFIXES:
                    for m in BARE_SOURCE.finditer(text):
                        if m.group(1) not in self.basenames:
                            self.fail(f, n, f"'{m.group(1)}' is no file of the repository")
                if kind == "doc" and not in_fence:
                    for target in re.findall(r"\]\(([^)\s]+)\)", text):
                        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                            continue
                        t = target.split("#")[0]
                        resolved = os.path.normpath((f.parent / t).as_posix())
                        if not Path(resolved).exists():
                            self.fail(f, n, f"link target '{target}' does not exist")
        for name, where in sorted(defs.items()):
            if len(where) > 1:
                places = ", ".join(f"{p.relative_to(self.root).as_posix()}:{n}" for p, n in where)
                self.fail(where[1][0], where[1][1], f"Note [{name}] is defined {len(where)} times ({places})")
        for name, where in sorted(refs.items()):
            if name not in defs:
                f, n = where[0]
                self.fail(f, n, f"Note [{name}] is referenced but never defined")
        for e in self.errors:
            print(e)
        nfiles = len(self.files)
        if self.errors:
            print(f"check-docs: {len(self.errors)} problem(s) in {nfiles} files")
            return 1
        print(f"check-docs: {nfiles} files, {len(defs)} Notes, no problems")
        return 0


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent).resolve()
    if not root.is_dir():
        print(f"check-docs: '{root}' is not a directory", file=sys.stderr)
        return 2
    return Checker(root).run()


if __name__ == "__main__":
    sys.exit(main())
