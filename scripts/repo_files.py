"""The files that ember's checks read (scripts/check_docs.py, scripts/check_layering.py).

    from repo_files import repo_files
    names = repo_files(root)    # sorted paths relative to root, "/"-separated
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def repo_files(root: Path) -> list[str]:
    """When ROOT is a git checkout: the files git tracks below it and the untracked ones it does not
    ignore, as they are in the working tree. Elsewhere (a copy without .git): every file below
    ROOT but those in hidden folders and in build* folders."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True,
        ).stdout.decode()
        names = sorted({n for n in out.split("\0") if n and (root / n).is_file()})
        if names:
            return names
    except (OSError, subprocess.CalledProcessError):
        pass
    names = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and not d.startswith("build")]
        names.extend(Path(os.path.relpath(os.path.join(dirpath, f), root)).as_posix() for f in filenames)
    return sorted(names)
