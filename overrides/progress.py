"""Progress for people, on stderr: what is running and how far along, with elapsed seconds.

Every long-running command line here (bench.py, record.sh, report.sh) reports through this, so
stdout stays for results and a script can silence the chatter with `2>/dev/null` or `-q`.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable

# One line at a time: threads report too (the report's PNG drawer), and print()
# writes a line's text and its newline separately, so two lines could run into one.
_WRITING = threading.Lock()


def stderr_progress(quiet: bool = False) -> Callable[[str], None] | None:
    """A `say(message)` that prints `[  12.3s] message` to stderr, or None when quiet."""
    if quiet:
        return None
    started = time.monotonic()

    def say(message: str) -> None:
        line = f"[{time.monotonic() - started:5.1f}s] {message}\n"
        with _WRITING:
            sys.stderr.write(line)
            sys.stderr.flush()

    return say


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n noun` with the noun in the plural unless n is 1: "1 case", "2 cases" (`plural` where
    adding an s is wrong: "2 processes")."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"
