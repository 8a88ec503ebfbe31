"""The one exception type for user mistakes, and the one wording of a full or unwritable place.

Everything a user can get wrong (an unknown case, a bad flag value, a file that is not a
results file) raises `UsageError` with a one-line message that names the problem and the fix.
The command-line edges turn it into that line on stderr and exit status 2; nothing else
should ever print a traceback for a user mistake. A place that cannot take a file (a full
disk, no inodes, read-only, not yours) is the user's to fix too, and is worded once, here
(`place_error`): the path, what was being written, the cause and the fix.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import os
import shutil
import signal
import sys
import threading
from typing import Iterable

USAGE_EXIT_STATUS = 2  # the Unix convention for "you called me wrong", as argparse uses
# A child process died past its retries (a worker, a valgrind process): what finished is kept
# and written, marked incomplete; neither a usage error (2) nor a verdict (1).
INCOMPLETE_EXIT_STATUS = 3
INTERRUPTED_EXIT_STATUS = 130  # 128 + SIGINT: what a shell reports for a command Ctrl-C stopped
TERMINATED_EXIT_STATUS = 143  # 128 + SIGTERM: `kill`, a CI job's timeout, a closed session
# How alike a mistyped name must be to a real one to be suggested (difflib's ratio, its own
# default): SubTensr -> SubTensor, x.ad -> x.add, while Nope suggests nothing.
SUGGESTION_CUTOFF = 0.6


class UsageError(Exception):
    """A mistake in what the user asked for; the message says what and how to fix it."""


# Errors of the place written to, not of the program: said in one line with the fix.
_PLACE_ERRORS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is used up",
                 errno.EACCES: "no permission to write there", errno.EPERM: "no permission to write there",
                 errno.EROFS: "the file system is read-only"}


def place_error(path: str, exc: OSError, what: str = ""):
    """A UsageError naming `path`, what was being written, the cause and the fix, for an
    OSError of the place itself (full, read-only, not ours); None for any other OSError."""
    cause = _PLACE_ERRORS.get(exc.errno)
    if cause is None:
        return None
    folder = os.path.dirname(os.path.abspath(path)) or "."
    room = ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        with contextlib.suppress(OSError):
            room = f" ({shutil.disk_usage(folder).free / 1e6:,.1f} MB free in {folder})"
            if os.statvfs(folder).f_favail == 0:  # room in bytes, but no file can be made
                room = f" (no inodes left in {folder}: too many files, whatever the free bytes)"
        fix = "free some space there or write it to another path"
    else:
        fix = "write it to a folder you can write"
    return UsageError(f"cannot write {what + ' ' if what else ''}{path}: {cause}{room}; {fix}; "
                      "nothing was left half-written")


def incomplete(why: str, kept_in: str | None = None) -> int:
    """Say on stderr that a run ended incomplete (`why`) and where what finished was written, if
    anywhere; the exit status to return (INCOMPLETE_EXIT_STATUS)."""
    kept = f"; what finished is in {kept_in}" if kept_in else ""
    print(f"bench.py: incomplete: {why}{kept}", file=sys.stderr)
    return INCOMPLETE_EXIT_STATUS


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be: the same clean-up runs (overrides/children.py kills
    every valgrind, py-spy and worker process at once), where before the command died at once
    and its children ran on, orphaned."""


def _raise_terminated(signum, frame):
    raise Terminated()


def run_command(prog: str, body, interrupted: str | None = None) -> int:
    """A command line's edge: run `body()` for its exit status; a UsageError (or an OSError of
    a full or unwritable place, `place_error`) becomes one line on stderr and status 2, Ctrl-C
    (when `interrupted` says what was kept) status 130. SIGTERM
    raises `Terminated` where Ctrl-C would raise KeyboardInterrupt: the same clean-up, and with
    `interrupted` the same line, status 143 (bench.py keeps what it measured as on Ctrl-C)."""
    previous = None
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return body()
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return USAGE_EXIT_STATUS
    except OSError as exc:  # a full or unwritable place no step said: one line, not a traceback
        said = place_error(exc.filename or ".", exc)
        if said is None:
            raise
        print(f"{prog}: error: {said}", file=sys.stderr)
        return USAGE_EXIT_STATUS
    except ImportError as exc:
        if not _raised_inside_torch(exc):
            raise
        print(f"{prog}: error: {sys.executable} finds torch but cannot import it ({exc}); run "
              "this with an interpreter whose torch imports (PYTHON=/path/to/python)", file=sys.stderr)
        return USAGE_EXIT_STATUS
    except KeyboardInterrupt as exc:
        if interrupted is None:
            raise
        terminated = isinstance(exc, Terminated)
        print(f"{prog}: {'terminated' if terminated else 'interrupted'}; {interrupted}", file=sys.stderr)
        return TERMINATED_EXIT_STATUS if terminated else INTERRUPTED_EXIT_STATUS
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _raised_inside_torch(exc: BaseException) -> bool:
    """An import failing while torch itself imports (a missing sibling such as torchgen, a
    broken build): the interpreter's, not this tool's; any other ImportError is a bug to show."""
    tb = exc.__traceback__
    while tb is not None:
        parts = tb.tb_frame.f_code.co_filename.replace("\\", "/").split("/")
        if "torch" in parts[:-1]:
            return True
        tb = tb.tb_next
    return False


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' did you mean X?' for the choice nearest `name` (case ignored), or '' if none is near."""
    by_lower = {choice.lower(): choice for choice in choices}
    near = difflib.get_close_matches(name.lower(), by_lower, n=1, cutoff=SUGGESTION_CUTOFF)
    return f" did you mean {by_lower[near[0]]}?" if near else ""
