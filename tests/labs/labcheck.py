"""Shared by the kernel labs' checks (tests/labs/check_copy.py and its siblings, one per lab, each
the ctest labs:<lab>): run a lab's program with --json --broken, compare a value with the one
derived on paper, and report.
"""
import json
import os
import subprocess

here = os.path.dirname(os.path.abspath(__file__))
labs_src = os.path.join(here, "..", "..", "kernels", "labs")
failures = []


def run(lab_dir, lab, *extra):
    """Every version of `lab` (exercises included), as {version: its JSON row}."""
    p = subprocess.run([os.path.join(lab_dir, f"lab_{lab}"), "--json", "--broken", *extra], capture_output=True, text=True)
    if p.returncode != 0:
        failures.append(f"lab_{lab} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return {d["version"]: d for d in (json.loads(l) for l in p.stdout.splitlines() if l.startswith("{"))}


def table(lab_dir, lab, *args):
    """The lab's printed table (for the diagnostics that name a line)."""
    return subprocess.run([os.path.join(lab_dir, f"lab_{lab}"), *args], capture_output=True, text=True).stdout


def source_line(lab, needle, after=None):
    """The 1-based line of kernels/labs/<lab>/<lab>.cu that contains `needle` (the first one below
    the line containing `after`, when given)."""
    src = open(os.path.join(labs_src, lab, f"{lab}.cu")).read().splitlines()
    start = 0 if after is None else next(i for i, l in enumerate(src) if after in l)
    return next(i + 1 for i, l in enumerate(src) if i >= start and needle in l)


def expect(what, got, want):
    status = "ok" if got == want else "FAIL"
    print(f"{status:4} {what}: {got} (expected {want})")
    if got != want:
        failures.append(f"{what}: {got}, expected {want}")


def finish():
    print(f"{'FAILED' if failures else 'PASSED'}: {len(failures)} failures")
    return 1 if failures else 0
