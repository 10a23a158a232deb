#!/usr/bin/env bash
# Checks that the documents and comments can still be true (scripts/check_docs.py says how):
# every referenced Note defined exactly once, every repository path named in docs/ or a comment
# present, no stale plans (the phrases are listed in check_docs.py). CI runs it as the ctest docs:check.
#   scripts/check-docs.sh [ROOT]
exec python3 "$(dirname "$0")/check_docs.py" "$@"
