"""Progress lines on stderr stay whole when threads report at once (a report's PNG drawer)."""

import re
import subprocess
import sys

from conftest import ROOT

_FOUR_THREADS = """
import threading
from overrides.progress import stderr_progress

say = stderr_progress()
threads = [threading.Thread(target=lambda i=i: [say(f"thread {i} line {j}") for j in range(200)])
           for i in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""


def test_lines_from_threads_at_once_never_run_into_each_other():
    done = subprocess.run([sys.executable, "-c", _FOUR_THREADS], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    lines = done.stderr.splitlines()
    assert len(lines) == 800  # print() wrote text and newline apart: ~190 of 800 ran together
    assert all(re.fullmatch(r"\[ *\d+\.\ds\] thread \d line \d+", line) for line in lines)
