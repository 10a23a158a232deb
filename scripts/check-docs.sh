#!/usr/bin/env bash
# Checks that the documents and comments can still be true (scripts/check_docs.py says how):
# every referenced Note defined exactly once, every repository path named in docs/ or a comment
# present, no stale plans (the phrases are listed in check_docs.py); and that the code keeps the
# layering table of docs/architecture.md and the size budgets (scripts/check_layering.py). CI runs
# it as the ctest docs:check.
#   scripts/check-docs.sh [ROOT]
dir=$(dirname "$0")
status=0
python3 "$dir/check_docs.py" "$@" || status=1
python3 "$dir/check_layering.py" "$@" || status=1
exit $status
