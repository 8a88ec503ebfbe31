"""The parent's side of entry.py's protocol: one client for every process of the tool's own.

Why it exists. The processes the tool starts all answer one way (`overrides/entry.py`: JSON lines
on stdout, `{"fatal": "Type: message"}` and exit 1 when they cannot go on), but their parents
read them three ways (the timing workers in `ab/pairs.py`, the counting processes in
`counts/valgrind.py` and `counts/forkserver.py`), each with its own exceptions and its own words
for the same event, and nine callers read a finished process's answer, each checking for a
missing one its own way. Here is the one reading:

- `WorkerSaid`: the process said why it cannot go on (its fatal message, or its last line on
  stderr as it exited with a status above 0): the user's to fix, so a `UsageError` (one line,
  exit 2);
- `WorkerDied`: it ended with no answer (a signal, a crash, an exit that said nothing): a fault
  a fresh process may not meet again, which callers retry (`ab/paired.py` a pair,
  `counts/callgrind.py` a seed's job);
- `Client`: a live process, sent requests and read message by message; how a line is read, how
  stderr's last lines are had and what is done before waiting for its end are its subclasses'
  (`ab/pairs.py`'s `Worker`: the defaults; `counts/forkserver.py`'s `Server`: select, a drained
  stderr, its process group killed);
- `answer`: a finished process's answer, or why there is none (`reason`);
- `Value`: the one parser of a message that carries one value under its kind's key (`{"fatal":
  ...}`, `{"ended": code}`, a forked child's `{"ready": pid}`): read by attribute everywhere else.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from typing import Any, NoReturn

from overrides import children, entry
from overrides.errors import UsageError

# valgrind's own lines on a process's stderr ("==1234== ..."): they follow the real reason (its
# summary, a leak check), so they are never what a process said.
_VALGRIND_LINE = re.compile(r"==\d+==")
NO_MESSAGE = "no message"  # why, where a process said nothing at all
# The two keys the protocol itself gives a meaning: why a process cannot go on (entry.main's last
# line), and a forked child's exit status said by the server that forked it (forkserver._turn).
FATAL = "fatal"
ENDED = "ended"


@dataclasses.dataclass(frozen=True)
class Value:
    """What a message carries under `key`, the name of its kind: `{"ended": 0}` carries 0 under
    "ended"; None where it is no message (a line of someone else's) or carries nothing there."""

    key: str
    value: Any

    @classmethod
    def from_dict(cls, said, key: str) -> "Value":
        return cls(key, said.get(key) if isinstance(said, dict) else None)


def value_of(said, key: str):
    """The value `said` (a message, or None) carries under `key` (Value)."""
    return Value.from_dict(said, key).value


class WorkerSaid(UsageError):
    """A process of the tool's own said why it cannot go on: the user's to fix (no torch, a case
    that fails, a module that does not import)."""


class WorkerDied(Exception):
    """A process of the tool's own ended with no answer (a signal, a crash, an exit): a fault of
    the machine or of the code it ran, which a fresh process may not meet again."""


# A fatal message is "Type: message"; a UsageError's message is already worded for the user
# (what is wrong, and the fix), and its type name only stands in the way.
_USAGE_PREFIX = "UsageError: "


def _worded(fatal: str) -> str:
    """A process's fatal message as said to the user: a UsageError's without its type name."""
    return fatal[len(_USAGE_PREFIX):] if fatal.startswith(_USAGE_PREFIX) else fatal


def last_said(lines) -> str:
    """The last line of a process's stderr that says something: not blank, not valgrind's."""
    return next((line.strip() for line in reversed(list(lines))
                 if line.strip() and not _VALGRIND_LINE.match(line.strip())), "")


class Client:
    """The parent's half of the protocol for one live process: `who` it is in a message ("the
    base worker (/usr/bin/python3)"), `doing` what it was last asked to do. `wait_s`: how long a
    process whose output ended may take to end itself before it is said to have stopped
    answering (None: as long as it takes)."""

    def __init__(self, process: subprocess.Popen, who: str, wait_s: float | None = None):
        self.process = process
        self.who = who
        self.doing = "starting"
        self.wait_s = wait_s

    def write(self, text: str, doing: str | None = None) -> None:
        """`text` on the process's stdin; a process gone is how it ended (`died`)."""
        if doing is not None:
            self.doing = doing
        try:
            self.process.stdin.write(text)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            self.died()

    def send(self, request: dict, doing: str | None = None) -> None:
        """One request, a JSON line."""
        self.write(json.dumps(request) + "\n", doing)

    def ask(self, request: dict, key: str | None = None) -> dict:
        self.send(request)
        return self.read(key)

    def value(self, key: str, doing: str | None = None):
        """What the next message holding `key` carries there (a message of one value: a
        child's `{"ready": pid}`)."""
        return value_of(self.read(key, doing), key)

    def read(self, key: str | None = None, doing: str | None = None) -> dict:
        """The next message (with `key`, the next holding it), skipping lines that are none (a
        library writing to the stdout it inherited). A fatal message is a WorkerSaid; a child's
        `{"ended": code}` while something else was awaited, or the end of the output, a death."""
        if doing is not None:
            self.doing = doing
        while True:
            line = self._line()
            if line is None:
                self.died()
            said = entry.message(line)
            if not isinstance(said, dict):
                continue
            if value_of(said, FATAL):
                raise WorkerSaid(f"{self.who} ended early while {self.doing}: {_worded(value_of(said, FATAL))}")
            if key is None or key in said:
                return said
            if ENDED in said:  # a forked child's end, said by the process that forked it
                raise WorkerDied(f"{self.who} {children.ended(value_of(said, ENDED))} while {self.doing}")

    def died(self, doing: str | None = None) -> NoReturn:
        """Raise how the process ended: WorkerSaid where it exited above 0 with a line on
        stderr, else WorkerDied saying how it ended and what it was doing."""
        if doing is not None:
            self.doing = doing
        self._stop()
        try:
            code = self.process.wait(timeout=self.wait_s)
        except subprocess.TimeoutExpired:
            code = None
        said = last_said(self._stderr_lines(code))
        if code is not None and code > 0 and said:
            raise WorkerSaid(f"{self.who} ended early while {self.doing}: {said}")
        raise WorkerDied(f"{self.who} {children.ended(code)} while {self.doing}" + (f" ({said})" if said else ""))

    # What a subclass may do otherwise.

    def _line(self) -> str | None:
        """The next whole line on stdout, None once it has ended (nothing, or half a line)."""
        line = self.process.stdout.readline()
        return line if line.endswith("\n") else None

    def _stop(self) -> None:
        """What is done before waiting for the process's end (nothing: it is ending)."""

    def _stderr_lines(self, code: int | None) -> list[str]:
        """stderr's lines, read once the process has ended (`code` None: it has not)."""
        if code is None or self.process.stderr is None:
            return []
        return self.process.stderr.read().splitlines()


def reason(done: subprocess.CompletedProcess) -> str:
    """Why a finished process gave no answer: its fatal message, else its last line on stderr."""
    for line in reversed((done.stdout or "").splitlines()):
        fatal = value_of(entry.message(line), FATAL)
        if fatal:
            return _worded(fatal)
    return last_said((done.stderr or "").splitlines()) or NO_MESSAGE


def answer(done: subprocess.CompletedProcess, *keys: str, failed: str) -> dict:
    """A finished process's last message holding any of `keys` (any message, without keys);
    where there is none, or a fatal message came after it, WorkerSaid: "`failed`: why"."""
    for line in reversed((done.stdout or "").splitlines()):
        said = entry.message(line)
        if value_of(said, FATAL):
            break
        if isinstance(said, dict) and (not keys or any(key in said for key in keys)):
            return said
    raise WorkerSaid(f"{failed}: {reason(done)}")
