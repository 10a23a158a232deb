#!/usr/bin/env python3
"""`ember lab` (ctest cli:lab): the command finds every lab that kernels/labs holds, lists at least
four versions and one exercise of each, runs a lab and passes its options and exit status through,
and refuses an unknown lab or a missing labs folder with one error line.

  lab.py EMBER LAB_DIR
"""
import json
import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
labs_src = os.path.join(here, "..", "..", "kernels", "labs")
failures = []


def check(what, ok, detail=""):
    print(f"{'ok' if ok else 'FAIL':4} {what}{': ' + detail if detail and not ok else ''}")
    if not ok:
        failures.append(what)


def ember(*args, env=None):
    return subprocess.run([sys.argv[1], *args], capture_output=True, text=True, env=env)


def main():
    lab_dir = sys.argv[2]
    env = dict(os.environ, EMBER_LABS_DIR=lab_dir)
    labs = sorted(d for d in os.listdir(labs_src) if os.path.isfile(os.path.join(labs_src, d, f"{d}.cu")))

    p = ember("lab", "list", env=env)
    check("lab list exits 0", p.returncode == 0, p.stderr)
    listed, current = {}, None
    for line in p.stdout.splitlines()[1:]:
        if not line.startswith(" "):
            current = line.strip()
            listed[current] = []
        else:
            m = re.match(r"\s+v(\d+)\s+(.*)", line)
            check(f"list row of {current} reads 'vN name idea'", m is not None, line)
            if m:
                listed[current].append((int(m.group(1)), "(exercise)" in line))
    check("lab list names every lab of kernels/labs", sorted(listed) == labs, f"{sorted(listed)} vs {labs}")
    for lab, versions in listed.items():
        check(f"{lab}: at least 4 versions", sum(1 for _, ex in versions if not ex) >= 4, str(versions))
        check(f"{lab}: one exercise", sum(1 for _, ex in versions if ex) == 1, str(versions))

    p = ember("lab", "run", "transpose", env=env)
    rows = [l for l in p.stdout.splitlines() if re.match(r"\d+\s", l)]
    check("lab run transpose exits 0", p.returncode == 0, p.stderr)
    check("lab run transpose prints one row per version (exercise left out)", [int(r.split()[0]) for r in rows] == [1, 2, 3, 4], p.stdout)
    check("every row says ok", all(re.search(r"\s(yes|NO|BUG)\s", r).group(1) == "yes" for r in rows), p.stdout)

    p = ember("lab", "run", "copy", "--version", "9", "--json", env=env)
    got = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    check("--version 9 --json runs the exercise alone", [(g["version"], g["broken"], g["ok"]) for g in got] == [(9, True, False)], p.stdout)
    check("an exercise's wrong answer does not fail the run", p.returncode == 0, str(p.returncode))

    p = ember("lab", "run", "transpose", "--size", "40,70", "--json", env=env)
    got = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    # 40 x 70 floats, the naive version (a thread per element, 32x32 blocks): each of the 40 rows
    # is read by 3 warps (70 columns = 32 + 32 + 6 lanes), 120 load requests.
    check("--size reaches the lab (120 warp-row load requests at 40 x 70)", got and got[0]["global_load_requests"] == 120, str(got[:1]))

    p = ember("lab", "run", "nope", env=env)
    check("unknown lab: exit 1", p.returncode == 1, str(p.returncode))
    check("unknown lab: the error names it and the labs", p.stderr.strip() == f"ember: error: no lab named 'nope'; the labs are {', '.join(labs)} (ember lab list)", p.stderr)
    p = ember("lab", "list", env=dict(os.environ, EMBER_LABS_DIR="/nonexistent-labs"))
    check("missing labs folder: one error line naming it", p.returncode == 1 and p.stderr.strip() == "ember: error: EMBER_LABS_DIR=/nonexistent-labs is not a directory", p.stderr)
    p = ember("lab", "run", "copy", "--version", "-3", env=env)
    check("a negative --version is refused", p.returncode == 1 and "--version must be a version number" in p.stderr, p.stderr)

    print(f"{'FAILED' if failures else 'PASSED'}: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
