#!/usr/bin/env bash
# `ember train --save DIR` leaves what a report needs and the report itself, and says so;
# `ember report` rebuilds it, compares runs (--out), and refuses bad run directories with one
# `ember: error:` line, exit 1 and no report written.
#   tests/cli/report.sh path/to/ember
set -u
ember=$(realpath "${1:?usage: report.sh path/to/ember}")
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ember-report.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
passed=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { passed=$((passed + 1)); }

python3 "$here/make_data.py" idx "$work/data" >/dev/null || { echo "FAIL: make_data.py"; exit 1; }
train() {  # train DIR [args...]
  local dir=$1
  shift
  "$ember" train --data "$work/data" --model simple_cnn --epochs 2 --batch-size 32 --threads 2 --save "$dir" "$@" \
    >"$work/out" 2>"$work/err"
}

# A saved run: the stream, the evaluation, the report, and the lines that say where they are.
train "$work/a" --lr 0.0001 || fail "train exited $?: $(cat "$work/err")"
for f in metrics.jsonl evaluation.json report.html checkpoint.json; do
  [ -s "$work/a/$f" ] && ok || fail "train --save left no $f"
done
grep -qx "ember train: report: $work/a/report.html (open it in a browser; rebuild it with: ember report $work/a)" \
  "$work/err" && ok || fail "train did not print where the report is: $(tail -3 "$work/err")"
grep -q "^ember train: saved in $work/a: the checkpoint (checkpoint.json, step-\*/), metrics.jsonl, evaluation.json, report.html$" \
  "$work/err" && ok || fail "train did not print what it saved: $(tail -3 "$work/err")"
python3 - "$work/a" <<'EOF' && ok || fail "the run directory's files are not what the report needs"
import json, sys
d = sys.argv[1]
events = [json.loads(l) for l in open(d + "/metrics.jsonl")]
assert events[0]["event"] == "config" and events[0]["environment"]["version"], events[0]
steps = [e for e in events if e["event"] == "step"]
assert [e["step"] for e in steps] == list(range(1, 17)), [e["step"] for e in steps]
assert all(0 <= e["acc"] <= 1 for e in steps)
assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2]
assert events[-1]["event"] == "summary"
ev = json.load(open(d + "/evaluation.json"))
assert ev["epoch"] == 2 and ev["step"] == 16 and ev["count"] == 64
assert sum(map(sum, ev["confusion"])) == 64
wrong = 64 - sum(ev["confusion"][c][c] for c in range(10))
assert len(ev["mistakes"]) == min(24, wrong), (len(ev["mistakes"]), wrong)
conf = [m["confidence"] for m in ev["mistakes"]]
assert conf == sorted(conf, reverse=True) and all(0.1 <= c <= 1 for c in conf)
for m in ev["mistakes"]:
    assert m["true"] != m["predicted"] and 0 <= m["index"] < 64
    assert ev["confusion"][m["true"]][m["predicted"]] > 0
import base64
png = base64.b64decode(ev["mistakes"][0]["png"])
assert png[:8] == b"\x89PNG\r\n\x1a\n"
assert int.from_bytes(png[16:20], "big") == 28 and int.from_bytes(png[20:24], "big") == 28  # the 28x28 image
EOF

# --resume appends to the stream: one more epoch, its steps after the first run's.
"$ember" train --resume "$work/a" --epochs 3 --threads 2 >/dev/null 2>"$work/err" || fail "resume exited $?: $(cat "$work/err")"
python3 -c "
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
assert [e['event'] for e in ev].count('config') == 2
assert [e['step'] for e in ev if e['event'] == 'step'] == list(range(1, 25))
assert [e['epoch'] for e in ev if e['event'] == 'epoch'] == [1, 2, 3]
" "$work/a/metrics.jsonl" && ok || fail "--resume did not append to metrics.jsonl"

# ember report: rebuilt in place, and two runs compared into --out.
rm "$work/a/report.html"
out=$("$ember" report "$work/a" 2>&1) && [ "$out" = "ember report: wrote $work/a/report.html" ] && [ -s "$work/a/report.html" ] &&
  ok || fail "ember report DIR: $out"
train "$work/b" --lr 0.00005 || fail "train b exited $?"
(cd "$work" && "$ember" report a b >/dev/null 2>&1) && grep -q "Comparing 2 runs: a, b" "$work/report.html" && ok ||
  fail "ember report A B did not write ./report.html"
"$ember" report "$work/a" "$work/b" --out "$work/cmp/compare.html" >/dev/null 2>&1 && [ -s "$work/cmp/compare.html" ] && ok ||
  fail "ember report A B --out FILE in a new directory"

# Bad input: one error line, exit 1, no report (and the previous one untouched).
expect_error() {  # expect_error "text" report-args...
  local want=$1
  shift
  local err rc
  err=$("$ember" report "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne 1 ] || [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ] || [[ "$err" != "ember: error: "*"$want"* ]]; then
    fail "ember report $* -> exit $rc, stderr '$err' (wanted one 'ember: error:' line with: $want)"
  else
    ok
  fi
}
expect_error "run directory '$work/missing' does not exist" "$work/missing"
[ ! -e "$work/missing" ] && ok || fail "a report was written for a missing directory"
mkdir "$work/empty"
expect_error "'$work/empty' holds no metrics.jsonl" "$work/empty"
[ -z "$(ls -A "$work/empty")" ] && ok || fail "files left in a directory without metrics: $(ls -A "$work/empty")"
cp -r "$work/a" "$work/cut"
before=$(cksum <"$work/cut/report.html")
size=$(stat -c %s "$work/cut/metrics.jsonl")
truncate -s $((size - 30)) "$work/cut/metrics.jsonl"
lines=$(wc -l <"$work/cut/metrics.jsonl")
expect_error "$work/cut/metrics.jsonl line $((lines + 1)) is cut short (no end of line): the file is truncated or damaged" "$work/cut"
[ "$(cksum <"$work/cut/report.html")" = "$before" ] && ok || fail "a failed report changed the previous report.html"
ls -A "$work/cut" | grep -q '\.tmp-' && fail "a temporary file was left: $(ls -A "$work/cut")" || ok
expect_error "is a directory" "$work/a" --out "$work/cmp"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
