"""Folders the tool made and needs no more, removed after the process that made them has exited.

Why it exists. A comparison's two views hold thousands of hard links (placement.py). Removed on
a thread, the interpreter waited for it at exit: 1.3 s of an A/A on this 2-CPU machine, after
its table was out (benchmarks/history.md, 'The views removed after exit'). So a folder leaves its
path at once (renamed aside) and a detached process removes it (entry.py's `remove` role, which
forks and leaves the process this one waits for), taking with it any folder an earlier remover
left unfinished (killed with its machine, say).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from overrides import entry

SUFFIX = ".removing"  # a folder moved aside, its removal under way or left unfinished
# A folder moved aside this long ago is one whose remover did not finish: a living remover is
# done with its own in seconds, so the age keeps two removers off one tree (and two would only
# race to unlink the same files).
STALE_S = 600
START_S = 30  # the remover forks within milliseconds; past this the folder is removed here


def remove_later(folder: str) -> None:
    """Move `folder` aside now and have a detached process delete it, with what earlier removers
    left beside it (STALE_S); delete it here where no process could be started."""
    trash = f"{folder}{SUFFIX}"
    try:
        os.rename(folder, trash)
    except OSError:
        trash = folder
    command = entry.command(sys.executable, "remove", trash, *_left_beside(trash), flags=("-I", "-S"))
    try:
        subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=START_S)
    except (OSError, subprocess.SubprocessError):
        shutil.rmtree(trash, ignore_errors=True)


def _left_beside(trash: str) -> list[str]:
    """Folders moved aside beside `trash` more than STALE_S ago."""
    parent = os.path.dirname(trash)
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    left = []
    for name in names:
        path = os.path.join(parent, name)
        try:
            if name.endswith(SUFFIX) and path != trash and time.time() - os.lstat(path).st_mtime > STALE_S:
                left.append(path)
        except OSError:  # removed meanwhile by its own remover
            continue
    return left
