#!/usr/bin/env python3
"""Checks ember's layering and its size budgets: run by scripts/check-layering.sh (ctest docs:layering).

  python3 scripts/check_layering.py [ROOT]      # ROOT: the repository (default: this script's parent)

Three rules, each failure printed as FILE:LINE: what is wrong:

1. Includes. Every `#include` of one of ember's files must be allowed by the layering table in
   docs/architecture.md (the rows between `<!-- layering table -->` and `<!-- end of layering table -->`).
   A row names the files it governs (a glob: `*` stays inside a folder, `**` crosses folders) and
   the files they may include. The most specific row governs a file: the one with the longest
   pattern that matches it. In the "may include" column:
     - `core/*.h (Tensor-free)` is a header directly in core/ that does not include core/tensor.h,
       directly or through other headers (dtype.h, error.h, shape.h, ...): what a kernel may see;
     - `(in sources)` after a pattern allows it from .cpp and .cu files only, not from headers;
     - a file may always include files matched by its own row's pattern.
2. File budget. No C++/CUDA source or header has more than FILE_BUDGET lines.
3. Function budget. No function in library code (LIBRARY_FOLDERS, and apps/) has a body longer
   than FUNCTION_BUDGET lines, counted from the first line of its signature to its closing brace.

Exit status 0 when every rule holds, 1 otherwise.
"""

from __future__ import annotations

import bisect
import os
import re
import sys
from pathlib import Path

from repo_files import repo_files

FILE_BUDGET = 800
FUNCTION_BUDGET = 120
LIBRARY_FOLDERS = ("core", "kernels", "layers", "optim", "data", "io", "models", "parallel", "train", "apps")
# The kernel labs are teaching programs that stand alone (one .cu file with its own main); they
# keep the file budget but not the function budget.
FUNCTION_BUDGET_EXEMPT = ("kernels/labs/",)
CODE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
SOURCE_SUFFIXES = (".cpp", ".cc", ".cu")
TABLE_BEGIN = "<!-- layering table -->"
TABLE_END = "<!-- end of layering table -->"
TENSOR_FREE = "(Tensor-free)"
IN_SOURCES = "(in sources)"

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def glob_match(path: str, pattern: str) -> bool:
    """fnmatch where `*` does not cross a `/` and `**` does."""
    regex = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            regex += ".*"
            i += 2
        elif pattern[i] == "*":
            regex += "[^/]*"
            i += 1
        else:
            regex += re.escape(pattern[i])
            i += 1
    return re.fullmatch(regex, path) is not None


class Rule:
    def __init__(self, pattern: str, line: int):
        self.pattern = pattern
        self.line = line
        self.allowed: list[tuple[str, bool, bool]] = []  # (pattern, tensor_free_only, sources_only)


def read_table(root: Path) -> tuple[list[Rule], list[str]]:
    doc = root / "docs" / "architecture.md"
    errors: list[str] = []
    rules: list[Rule] = []
    try:
        lines = doc.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        return [], [f"docs/architecture.md: cannot read the layering table: {e}"]
    inside = False
    for n, line in enumerate(lines, 1):
        if line.strip() == TABLE_BEGIN:
            inside = True
            continue
        if line.strip() == TABLE_END:
            inside = False
            continue
        if not inside or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or set(cells[0]) <= set("- ") or cells[0].lower() == "files":
            continue
        for pattern in re.findall(r"`([^`]+)`", cells[0]):
            rule = Rule(pattern, n)
            for m in re.finditer(r"`([^`]+)`((?:\s*\((?:Tensor-free|in sources)\))*)", cells[1]):
                quals = m.group(2)
                rule.allowed.append((m.group(1), TENSOR_FREE in quals, IN_SOURCES in quals))
            rules.append(rule)
    if not rules:
        errors.append(f"docs/architecture.md: no layering table between {TABLE_BEGIN} and {TABLE_END}")
    return rules, errors


def includes_of(root: Path, path: str, files: set[str]) -> list[tuple[int, str]]:
    """(line, repository path) of each ember file `path` includes."""
    out = []
    try:
        text = (root / path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for n, line in enumerate(text.splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        kind, name = m.groups()
        target = None
        if kind == '"':
            cand = os.path.normpath(os.path.join(os.path.dirname(path), name))
            if cand in files:
                target = cand
        if target is None and name.startswith("ember/") and name[len("ember/"):] in files:
            target = name[len("ember/"):]
        if target is not None:
            out.append((n, target))
    return out


def tensor_free_headers(root: Path, files: set[str]) -> set[str]:
    core = {f for f in files if glob_match(f, "core/*.h")}
    graph = {f: [t for _, t in includes_of(root, f, files)] for f in core}
    memo: dict[str, bool] = {}

    def reaches_tensor(f: str, seen: frozenset = frozenset()) -> bool:
        if f == "core/tensor.h":
            return True
        if f in memo:
            return memo[f]
        result = any(reaches_tensor(t, seen | {f}) for t in graph.get(f, []) if t not in seen)
        memo[f] = result
        return result

    return {f for f in core if not reaches_tensor(f)}


def governing_rule(rules: list[Rule], path: str) -> Rule | None:
    matching = [r for r in rules if glob_match(path, r.pattern)]
    return max(matching, key=lambda r: len(r.pattern)) if matching else None


def check_includes(root: Path, files: list[str], rules: list[Rule]) -> list[str]:
    errors = []
    file_set = set(files)
    tensor_free = tensor_free_headers(root, file_set)
    for path in files:
        if not path.endswith(CODE_SUFFIXES):
            continue
        rule = governing_rule(rules, path)
        for line, target in includes_of(root, path, file_set):
            if rule is None:
                errors.append(f"{path}:{line}: no row of the layering table (docs/architecture.md) governs this file")
                break
            if glob_match(target, rule.pattern):
                continue
            ok = False
            for pattern, tf_only, src_only in rule.allowed:
                if not glob_match(target, pattern):
                    continue
                if tf_only and target not in tensor_free:
                    continue
                if src_only and not path.endswith(SOURCE_SUFFIXES):
                    continue
                ok = True
                break
            if not ok:
                why = " (a Tensor header)" if target.startswith("core/") and target not in tensor_free else ""
                errors.append(f"{path}:{line}: includes {target}{why}, which `{rule.pattern}` may not "
                              f"(docs/architecture.md:{rule.line})")
    return errors


# What strip_code blanks out, in the order a scanner meets them: raw strings, comments, string and
# character literals (a digit separator, 1'000, is not one), and preprocessor lines with their
# continuations.
_NOISE = re.compile(
    r'R"(?P<delim>[^()\\ ]{0,16})\((?:.|\n)*?\)(?P=delim)"'
    r"|//[^\n]*"
    r"|/\*(?:.|\n)*?\*/"
    r'|"(?:\\.|[^"\\\n])*"'
    r"|(?<![\w'])'(?:\\.|[^'\\\n])+'"
    r"|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*",
    re.M,
)


def strip_code(text: str) -> str:
    """The text with comments, string and character literals and preprocessor lines blanked out
    (newlines kept, so that line numbers stay right)."""
    def blank(m: re.Match) -> str:
        token = m.group(0)
        kept = '""' if token[0] == '"' or token.startswith('R"') else "''" if token[0] == "'" else ""
        return kept + "\n" * token.count("\n")

    return _NOISE.sub(blank, text)


SCOPE_KEYWORDS = re.compile(r"\b(namespace|extern\s*\"\")")
CLASS_KEYWORDS = re.compile(r"^(?:template\s*<.*>\s*)?(?:class|struct|union)\b", re.S)
ENUM_KEYWORD = re.compile(r"\benum\b")
_BRACES = re.compile(r"[{};]")


def functions(text: str):
    """(name, first line, last line) of each function defined at namespace or class scope."""
    code = strip_code(text)
    newlines = [m.start() for m in re.finditer("\n", code)]

    def line_of(pos: int) -> int:
        return bisect.bisect_left(newlines, pos) + 1

    stack: list[str] = []  # "ns", "class", "function", "init", "other"
    header_start = 0       # where the text before the next `{` at this level begins
    func_start: list[tuple[int, str]] = []
    result = []
    for m in _BRACES.finditer(code):
        i, c = m.start(), m.group(0)
        if c == ";":
            if not stack or stack[-1] in ("ns", "class"):
                header_start = i + 1
            continue
        if c == "}":
            kind = stack.pop() if stack else "other"
            if kind == "function" and func_start:
                start, name = func_start.pop()
                result.append((name, start, line_of(i)))
            if kind != "init":
                header_start = i + 1
            continue
        scope = stack[-1] if stack else "ns"
        header = code[header_start:i].strip()
        kind = "other"
        if scope in ("ns", "class"):
            if SCOPE_KEYWORDS.search(header) and "(" not in header:
                kind = "ns"
            elif CLASS_KEYWORDS.search(header) and not ENUM_KEYWORD.search(header) \
                    and "(" not in header.split(":")[0]:
                kind = "class"
            elif "(" in header and ")" in header and not re.search(r"=\s*(\[|[\w:<>]+\s*\{)", header) \
                    and not re.search(r"\)\s*(?:noexcept\s*)?:\s*[^{}]*\w$", header):
                kind = "function"
            elif re.search(r"\)\s*(?:noexcept\s*)?:", header) and re.search(r"\w$", header):
                kind = "init"  # a brace initializer in a constructor's member list
        stack.append(kind)
        if kind == "function":
            raw = code[header_start:i]
            first = header_start + (len(raw) - len(raw.lstrip()))
            name = re.findall(r"([~\w:]+(?:operator\s*[^\s(]+)?)\s*\(", header)
            func_start.append((line_of(first), name[0] if name else "?"))
        if kind != "init":
            header_start = i + 1
    return result


def check_sizes(root: Path, files: list[str]) -> list[str]:
    errors = []
    for path in files:
        if not path.endswith(CODE_SUFFIXES):
            continue
        try:
            text = (root / path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > FILE_BUDGET:
            errors.append(f"{path}:1: {lines} lines, over the file budget of {FILE_BUDGET} (split it by responsibility)")
        if path.split("/")[0] not in LIBRARY_FOLDERS or path.startswith(FUNCTION_BUDGET_EXEMPT):
            continue
        for name, first, last in functions(text):
            length = last - first + 1
            if length > FUNCTION_BUDGET:
                errors.append(f"{path}:{first}: {name} is {length} lines, over the function budget of "
                              f"{FUNCTION_BUDGET} (cut it into named parts)")
    return errors


def main(argv: list[str]) -> int:
    root = Path(argv[1]).resolve() if len(argv) > 1 else Path(__file__).resolve().parent.parent
    files = repo_files(root)
    rules, errors = read_table(root)
    if rules:
        errors += check_includes(root, files, rules)
    errors += check_sizes(root, files)
    for e in errors:
        print(e)
    code_files = sum(1 for f in files if f.endswith(CODE_SUFFIXES))
    if errors:
        print(f"check-layering: {len(errors)} problem{'s' if len(errors) != 1 else ''} in {code_files} files")
        return 1
    print(f"check-layering: {code_files} files, {len(rules)} rows, no problems")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
