#!/usr/bin/env bash
# The Python virtual environment that ember's cross-check tests and side-by-side benchmarks run
# in: current PyTorch 2.x, torchvision and friends from PyPI (scripts/python-requirements.txt),
# created once and cached. Prints the environment's python interpreter on stdout.
#
#   scripts/python-env.sh            create or update the environment if needed, print its python
#   scripts/python-env.sh --check    print its python if it is ready, else exit 1 (installs nothing)
#
# Where: $EMBER_PYTHON_ENV, else ${XDG_CACHE_HOME:-~/.cache}/ember/python-env. The environment is
# rebuilt when scripts/python-requirements.txt changes (a stamp holds its hash). Concurrent calls
# wait for each other (flock). Debian's python3-torch (1.13) is not the anchor any more.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
requirements="$here/python-requirements.txt"
env_dir=${EMBER_PYTHON_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ember/python-env}
stamp="$env_dir/.ember-requirements.sha256"
want=$(sha256sum "$requirements" | cut -d' ' -f1)

ready() { [ -x "$env_dir/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; }

if [ "${1:-}" = "--check" ]; then
  ready && { echo "$env_dir/bin/python"; exit 0; }
  exit 1
fi
[ $# -eq 0 ] || { echo "python-env: unknown option '$1' (known: --check)" >&2; exit 2; }

mkdir -p "$(dirname "$env_dir")"
exec 9>"$env_dir.lock"
flock 9
if ! ready; then
  python=${PYTHON:-python3}
  command -v "$python" >/dev/null || { echo "python-env: $python not found (scripts/install-deps.sh --test installs it)" >&2; exit 1; }
  echo "python-env: creating $env_dir (PyTorch 2.x from PyPI; a few minutes the first time)" >&2
  rm -rf "$env_dir"
  "$python" -m venv "$env_dir" >&2
  "$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  "$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
  echo "$want" > "$stamp"
fi
echo "$env_dir/bin/python"
