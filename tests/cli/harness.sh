#!/usr/bin/env bash
# The harness the CLI test scripts share (tests/cli/robust.sh, hostile_files.sh and
# hostile_inputs.sh), sourced first thing with the path of the ember binary:
#   source "$(dirname "$0")/harness.sh" "$1"
# It sets $ember (an absolute path), $here (tests/cli), a scratch directory $work (the current
# directory from then on, removed at exit), and the checks below, which count into $passed and
# $failures; a script ends with `finish`.
set -u
ember="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failures=0
passed=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
ok() { passed=$((passed + 1)); }

# run NAME ARGS...: runs ember, leaving NAME.out, NAME.err and $rc.
run() {
  local name="$1"
  shift
  "$ember" "$@" >"$name.out" 2>"$name.err"
  rc=$?
}
# expect_error "exact error line" ARGS...: exit code 1 and exactly one "ember: error:" line, this one.
n_err=0
expect_error() {
  local want="ember: error: $1"
  shift
  n_err=$((n_err + 1))
  run "err$n_err" "$@"
  local errs
  errs="$(grep '^ember: error:' "err$n_err.err")"
  if [ "$rc" -ne 1 ] || [ "$errs" != "$want" ]; then
    fail "ember $* -> exit $rc, stderr:"
    sed 's/^/    /' "err$n_err.err"
    echo "  wanted exit 1 and: $want"
  else
    ok
  fi
}
expect_rc() {  # expect_rc NAME WANT
  if [ "$rc" -ne "$2" ]; then
    fail "$1: exit $rc, wanted $2"
    sed 's/^/    /' "$1.err" 2>/dev/null | tail -5
  else
    ok
  fi
}
expect_line() {  # expect_line NAME FILE "exact line"
  if grep -qxF -- "$3" "$2"; then ok; else
    fail "$1: $2 lacks the line: $3"
    sed 's/^/    /' "$2" | tail -5
  fi
}
# finish: the tally, and the script's exit status.
finish() {
  echo "$passed passed, $failures failed"
  [ "$failures" -eq 0 ]
}

# steps_in FILE: the step events in a metrics file so far (0 before it exists).
steps_in() { cat "$1" 2>/dev/null | grep -c '"event":"step"'; }
