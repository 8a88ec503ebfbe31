"""What was measured on: the interpreter, the torch build and the machine, as one record.

Recorded with every result, because a number without the build and machine it came from
cannot be compared with anything. This module is the one owner of that record: it collects it
(`collect`), writes and reads its JSON (`Environment.to_dict` / `from_dict`, in the results,
the comparison and the worker's first line) and says what "the same environment" means, once:
for instruction counts and a budget (`Environment.fingerprint`, `Fingerprint.differences`) and
for the clock's speed reference (`Environment.machine_key`). Everything else reads its fields
by attribute (tests/test_owners.py fails on an environment read by string key elsewhere).

A record read from a file writes back the same JSON, key for key and in its order: a file of
an older version (without `cuda_device`, say) stays without it, and a key this version does not
know is kept, so that files written before still load and compare byte for byte.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import socket
import sys
from typing import Any

from overrides.children import usable_cpus
from overrides.clock.layout import randomisation_off
from overrides.progress import counted


@dataclasses.dataclass(frozen=True)
class Environment:
    """Where a result was measured. None: not recorded (an older file, or a side that never
    started). The field order is the JSON's: `collect` writes every field but `user_modules`."""

    python: str | None = None
    python_executable: str | None = None
    torch_version: str | None = None
    torch_git_hash: str | None = None
    torch_debug_build: bool | None = None
    torch_path: str | None = None  # the torch package folder the process imported
    platform: str | None = None
    cpu: str | None = None
    cpu_count: int | None = None
    threads: int | None = None
    hostname: str | None = None
    # see overrides/clock/allocator.py: the heap's start-up state moves plain calls by ~4%
    malloc_top_pad: str | None = None
    # see overrides/clock/layout.py: bench.py pins these unless --random-layout
    aslr_off: bool | None = None
    python_hash_seed: str | None = None
    # the GPU a CUDA case ran on; asked only where CUDA is already in use (it starts it)
    cuda_device: str | None = None
    # a paired comparison's side: {spec: file} of the user's modules its worker ran
    user_modules: dict | None = None
    # The JSON's keys in their order, and those this version does not know: a record read back
    # writes the same document (module docstring). Not compared: they say how, not what.
    keys: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    unknown: tuple[tuple[str, Any], ...] = dataclasses.field(default=(), compare=False, repr=False)

    def to_dict(self) -> dict:
        return _to_dict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Environment":
        """The record of an environment's JSON (a results file's "environment"); TypeError where
        it is not a JSON object, for the reader to name its file."""
        return _from_dict(cls, data)

    def with_user_modules(self, modules: dict | None) -> "Environment":
        """This environment with the user's modules a side ran (None or empty: as it is)."""
        if not modules:
            return self
        keys = self.keys if "user_modules" in self.keys else self.keys + ("user_modules",)
        return dataclasses.replace(self, user_modules=dict(modules), keys=keys)

    def fingerprint(self, valgrind: str) -> "Fingerprint":
        """What instruction counts taken here depend on: same fingerprint (`differences` empty),
        same counts under one seed. `valgrind`: its version (counts/callgrind.valgrind_version).
        The architecture is this process's (a results file does not record it), so take it of
        an environment collected here, as a budget's write and check do."""
        from overrides.counts.forkserver import COUNTED_BY

        return Fingerprint(self.torch_version, self.torch_git_hash, self.python, platform.machine(),
                           valgrind, self.cpu, tool_code(), COUNTED_BY, keys=FINGERPRINT_KEYS)

    def machine_key(self) -> str:
        """What a speed reference figure is comparable across (clock/speed.py): this host and
        CPU, this interpreter binary (a virtualenv's python resolves to its base) and whether the
        address space was pinned. The torch build is left out on purpose: the reference runs none
        of it. The key names a cache entry: its wording is kept as it was."""
        return "|".join(str(part) for part in (
            self.hostname or platform.node(), self.cpu, os.path.realpath(sys.executable),
            self.python or platform.python_version(), "aslr-off" if self.aslr_off else "aslr-on"))


# What moves instruction counts: a budget holds only where these are as it recorded them. The
# CPU is recorded beside them, not compared: counts are of instructions, which every model of
# one architecture runs alike.
COUNTS_MOVE_WITH = ("torch_version", "torch_git_hash", "python", "machine", "valgrind", "tool_code", "counted_by")
FINGERPRINT_KEYS = ("torch_version", "torch_git_hash", "python", "machine", "valgrind", "cpu", "tool_code",
                    "counted_by")
# Hex digits of tool_code's digest kept: a version's name, not a proof.
TOOL_CODE_DIGITS = 12


def tool_code(root: str | None = None) -> str:
    """A digest of this tool's own code (counts/kept.tool_digest: every .py file of the package,
    by path and content): the counting process runs it beside your code, so another version of it
    moves every count. A budget written with one morning's commits read +314 on units:pair after
    them (its margin 359), with the library untouched; so a budget holds for the tool's code it
    was written with."""
    from overrides.counts.kept import tool_digest

    return tool_digest(root)[:TOOL_CODE_DIGITS]


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """An environment as far as instruction counts care (`Environment.fingerprint`): a budget's
    "environment", written with it and compared at every check."""

    torch_version: str | None = None
    torch_git_hash: str | None = None
    python: str | None = None
    machine: str | None = None  # platform.machine(): the architecture
    valgrind: str | None = None  # its version line
    cpu: str | None = None
    tool_code: str | None = None  # tool_code(): a budget written before it had none
    # how the counts were made (counts/forkserver.COUNTED_BY): none before a forked child counted
    # each job (7e31db8 and before: a process a job, which lays every case out otherwise)
    counted_by: str | None = None
    keys: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    unknown: tuple[tuple[str, Any], ...] = dataclasses.field(default=(), compare=False, repr=False)

    def differences(self, other: "Fingerprint") -> tuple[str, ...]:
        """"name 'was' -> 'is'" for each of COUNTS_MOVE_WITH that differs; empty: the same
        environment, as far as counts go."""
        return tuple(f"{name} {getattr(self, name)!r} -> {getattr(other, name)!r}" for name in COUNTS_MOVE_WITH
                     if getattr(self, name) != getattr(other, name))

    def to_dict(self) -> dict:
        return _to_dict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Fingerprint":
        return _from_dict(cls, data)


_BOOKKEEPING = ("keys", "unknown")


def _names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in _BOOKKEEPING)


def _to_dict(record) -> dict:
    """The record's JSON: its keys in their order (a field's value, or an unknown key's as read),
    then any other field that holds a value."""
    names, unknown = _names(type(record)), dict(record.unknown)
    out = {key: getattr(record, key) if key in names else unknown[key] for key in record.keys}
    out.update((name, getattr(record, name)) for name in names
               if name not in out and getattr(record, name) is not None)
    return out


def _from_dict(cls, data: dict):
    if not isinstance(data, dict):
        raise TypeError(f"an environment is a JSON object, not {type(data).__name__}")
    names = _names(cls)
    return cls(**{key: value for key, value in data.items() if key in names}, keys=tuple(data),
               unknown=tuple((key, value) for key, value in data.items() if key not in names))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def collect(threads: int) -> Environment:
    """The environment of this process, as written into every results file (imports torch: the
    parent of `--compare` never calls this, its workers do)."""
    import torch

    return Environment(
        python=platform.python_version(),
        python_executable=sys.executable,
        torch_version=torch.__version__,
        torch_git_hash=getattr(torch.version, "git_version", "unknown"),
        torch_debug_build=bool(getattr(torch.version, "debug", False)),
        torch_path=os.path.dirname(torch.__file__),
        platform=platform.platform(),
        cpu=cpu_model(),
        cpu_count=usable_cpus(),
        threads=threads,
        hostname=socket.gethostname(),
        malloc_top_pad=os.environ.get("MALLOC_TOP_PAD_"),
        aslr_off=randomisation_off(),
        python_hash_seed=os.environ.get("PYTHONHASHSEED"),
        cuda_device=(torch.cuda.get_device_name() if torch.cuda.is_available() and torch.cuda.is_initialized()
                     else None),
        keys=COLLECTED_KEYS,
    )


COLLECTED_KEYS = tuple(name for name in _names(Environment) if name != "user_modules")


def one_line(env: Environment) -> str:
    """The environment as the one line printed under every table."""
    return (
        f"torch {env.torch_version} ({str(env.torch_git_hash)[:10]}"
        f"{', debug build' if env.torch_debug_build else ''}), "
        f"Python {env.python}, {env.cpu} ({env.cpu_count} CPUs), "
        f"{counted(env.threads, 'torch thread')}"
        + (f", {env.cuda_device}" if env.cuda_device else "")
    )


def interpreters_differ(base: Environment, branch: Environment) -> str:
    """A line where the two sides of a comparison run different Python versions (else ""): a
    delta between them is the interpreter's change as much as torch's."""
    if not base.python or not branch.python or base.python == branch.python:
        return ""
    return (f"the sides run different Pythons ({base.python} and {branch.python}): each delta is the "
            "interpreter's change as much as torch's; compare two builds on one Python to see torch's alone")
