#!/usr/bin/env python3
"""The run report in a real browser: headless Chromium renders report.html, and the page must run
its script without a JavaScript error and draw every plot where it says it is.

  report_browser.py path/to/ember WORKDIR [--train-args "..."] [--screenshot OUT.png]

Trains two tiny runs (tests/cli/make_data.py data), writes a run's report and a comparison, and
for each: dumps the DOM after the script ran (data-report-ready="yes", no data-js-errors, the
boxes the script recorded for each checked element), takes a screenshot of the whole page and
counts, inside each plot's box, the pixels drawn in the run's color (curves, bars), in the heat
map's blues, or the dark pixels of the thumbnails. Then it proves the checks can fail: a copy
with a planted JavaScript error, and a copy with the curves removed, must both be rejected.
Exits 77 (ctest: skipped, not passed) only when no Chromium is installed.
--train-args replaces run A's training options (e.g. for the screenshot in docs/);
--screenshot keeps the top of run A's screenshot, down to its final evaluation, in 256 colors.
"""
import argparse
import html.parser
import os
import re
import shlex
import shutil
import subprocess
import sys

from PIL import Image

RUN_COLORS = [(0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)]  # the report's first two run colors
WIDTH = 1300


class Boxes(html.parser.HTMLParser):
    """The data-check elements' data-box attributes, <html>'s markers, and each plot's curves
    (lines[plot id]: (stroke color, points) of its polylines)."""

    def __init__(self):
        super().__init__()
        self.boxes, self.root, self.lines, self.svg = {}, {}, {}, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html":
            self.root = a
        if tag == "svg":
            self.svg = a.get("id")
        if tag == "polyline" and self.svg:
            self.lines.setdefault(self.svg, []).append(((a.get("stroke") or "").lower(), a.get("points", "")))
        if "data-check" in a and "data-box" in a:
            self.boxes[a["data-check"]] = [int(v) for v in a["data-box"].split(",")]

    handle_startendtag = handle_starttag


def covered(lines, plot, run):
    """Whether every curve of `run` in `plot` lies exactly under a curve of another run drawn after
    it (measured curves, such as two runs' loader stall near 0%, can coincide; the later one then
    hides the earlier one's pixels)."""
    color = "#%02x%02x%02x" % RUN_COLORS[run]
    curves = lines.get(plot, [])
    mine = [i for i, (c, _) in enumerate(curves) if c == color]
    return bool(mine) and all(any(c != color and pts == curves[i][1] for c, pts in curves[i + 1:]) for i in mine)


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def browser(exe, work, args, page):
    profile = os.path.join(work, "chromium-profile")
    cmd = [exe, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-extensions",
           "--hide-scrollbars", "--force-device-scale-factor=1", "--enable-logging=stderr", "--v=0",
           "--user-data-dir=" + profile] + args + ["file://" + os.path.abspath(page)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return r


def render(exe, work, page, shot):
    """Returns (problems, page): what is wrong with the page in the browser, and the parsed DOM (Boxes).
    The DOM is dumped at the screenshot's width, so that the boxes are where the screenshot has them;
    shot "": no screenshot."""
    problems = []
    r = browser(exe, work, ["--dump-dom", "--window-size=%d,1000" % WIDTH], page)
    if r.returncode != 0:
        return ["chromium --dump-dom exited %d: %s" % (r.returncode, r.stderr[-2000:])], {}
    p = Boxes()
    p.feed(r.stdout)
    if p.root.get("data-report-ready") != "yes":
        problems.append("the page's script did not finish (no data-report-ready on <html>)")
    if "data-js-errors" in p.root:
        problems.append("%s JavaScript error(s) in the page" % p.root["data-js-errors"])
    uncaught = [l for l in r.stderr.splitlines() if "Uncaught" in l]
    if uncaught:
        problems.append("console: " + uncaught[0])
    height = int(p.root.get("data-page-height", "3000"))
    if not shot:
        return problems, p
    r = browser(exe, work, ["--screenshot=" + shot, "--window-size=%d,%d" % (WIDTH, height)], page)
    if r.returncode != 0 or not os.path.exists(shot):
        problems.append("chromium --screenshot failed: %s" % r.stderr[-2000:])
    return problems, p


def count(img, box, test):
    x, y, w, h = box
    region = img.crop((x, y, x + w, y + h)).convert("RGB")
    return sum(1 for px in region.getdata() if test(px))


def near(color, tolerance=40):
    return lambda px: sum(abs(a - b) for a, b in zip(px, color)) < tolerance


def check_drawn(shot, page, runs):
    """Problems with the drawing: each plot's box must hold its run colors (or the run's curve lie
    exactly under a later run's), the heat map its blues, the thumbnails their dark pixels."""
    problems = []
    boxes = page.boxes
    img = Image.open(shot)
    plots = ["loss", "accuracy", "lr", "throughput", "loader-stall", "per-class"]
    for name in plots + ["confusion-%d" % i for i in range(runs)] + ["mistakes-%d" % i for i in range(runs)]:
        if name not in boxes:
            problems.append("no box for %s" % name)
            continue
        box = boxes[name]
        if box[2] < 50 or box[3] < 50 or box[0] + box[2] > img.width or box[1] + box[3] > img.height:
            problems.append("%s: box %s is not on the %dx%d screenshot" % (name, box, img.width, img.height))
            continue
        if name in plots:
            for i in range(runs):
                n = count(img, box, near(RUN_COLORS[i]))
                if n < 40 and not covered(page.lines, name, i):
                    problems.append("%s: %d pixels of run %d's color in its plot area" % (name, n, i + 1))
        elif name.startswith("confusion"):
            n = count(img, box, lambda px: px[2] > px[0] + 40)
            if n < 500:
                problems.append("%s: %d shaded pixels in the heat map" % (name, n))
        else:
            n = count(img, box, lambda px: max(px) < 60)
            if n < 200:
                problems.append("%s: %d dark pixels where the thumbnails are" % (name, n))
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ember")
    ap.add_argument("work")
    ap.add_argument("--train-args", default="")
    ap.add_argument("--screenshot", default="")
    a = ap.parse_args()
    exe = chromium()
    if exe is None:
        print("SKIP: no Chromium installed (scripts/install-deps.sh --test installs Debian's chromium)")
        return 77
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    here = os.path.dirname(os.path.abspath(__file__))
    data = os.path.join(a.work, "data")
    subprocess.run([sys.executable, os.path.join(here, "make_data.py"), "idx", data], check=True, capture_output=True)
    tiny = ["--data", data, "--model", "simple_cnn", "--epochs", "3", "--batch-size", "32", "--threads", "2"]
    runs = {"a": shlex.split(a.train_args) if a.train_args else tiny + ["--lr", "0.0001"],
            "b": tiny + ["--lr", "0.00005"]}
    for name, args in runs.items():
        subprocess.run([a.ember, "train", "--save", os.path.join(a.work, name), "--quiet"] + args, check=True)
    compare = os.path.join(a.work, "compare.html")
    subprocess.run([a.ember, "report", os.path.join(a.work, "a"), os.path.join(a.work, "b"), "--out", compare],
                   check=True, capture_output=True)

    failures = []
    pages = [(os.path.join(a.work, "a", "report.html"), 1), (compare, 2)]
    for page, nruns in pages:
        shot = page + ".png"
        problems, parsed = render(exe, a.work, page, shot)
        if not problems:
            problems = check_drawn(shot, parsed, nruns)
        print("%s: %s" % (os.path.basename(page), "; ".join(problems) if problems else "drawn, no JavaScript error"))
        failures += ["%s: %s" % (page, p) for p in problems]

    # The checks must be able to fail: a planted JavaScript error, and plots without their curves.
    original = open(pages[0][0]).read()
    planted = os.path.join(a.work, "planted-error.html")
    with open(planted, "w") as f:
        f.write(original.replace("</body>", "<script>document.getElementById('no-such-element').click();</script></body>"))
    problems, _ = render(exe, a.work, planted, "")
    if not any("JavaScript error" in p for p in problems):
        failures.append("a planted JavaScript error was not detected (%s)" % problems)
    else:
        print("planted JavaScript error: detected (%s)" % "; ".join(problems))
    blank = os.path.join(a.work, "no-curves.html")
    with open(blank, "w") as f:
        f.write(re.sub(r"<polyline[^>]*/>|<circle[^>]*/>", "", original))
    problems, parsed = render(exe, a.work, blank, blank + ".png")
    drawn = check_drawn(blank + ".png", parsed, 1) if not problems else problems
    if not any(p.startswith("loss:") for p in drawn):
        failures.append("a page without curves passed the drawing check (%s)" % drawn)
    else:
        print("page without curves: rejected (%s)" % drawn[0])

    if a.screenshot:
        # From the top down to the end of the final evaluation (configuration and environment are
        # text), in 256 colors.
        _, parsed = render(exe, a.work, pages[0][0], "")
        bottom = max(b[1] + b[3] for k, b in parsed.boxes.items() if k.startswith(("confusion", "mistakes"))) + 24
        img = Image.open(pages[0][0] + ".png").convert("RGB")
        img = img.crop((0, 0, img.width, min(img.height, bottom)))
        img.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(a.screenshot, optimize=True)
        print("screenshot: %s (%d bytes)" % (a.screenshot, os.path.getsize(a.screenshot)))
    for f in failures:
        print("FAIL: " + f)
    print("%s" % ("PASS" if not failures else "%d failure(s)" % len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
