"""Was this run slowed as a whole? A reference loop timed beside the cases, against this
machine's own earlier runs.

Why this exists: the headline (stats.py) rejects slow spells that hit some samples and not
others, and the trust flags catch a run whose samples spread. Neither sees a run in which the
machine was slower for the whole run, evenly (another tenant of the host on the same physical
core, a lower clock): every sample is slowed alike, the floor is narrow and high, no row gets a
`!`, and the figures all read high by the same factor. Nothing inside one run can tell that from
slower code. So the Timer core times a fixed statement that no build, case or op changes
(REFERENCE_STMT: Python and C work, no torch) beside the cases, in the same round-robin, and its
figure is compared with the fastest this machine and interpreter gave in its earlier runs, kept
in a small cache file. A run whose reference ran past SLOW_RUN_RATIO of that is marked slow, on
the table and in the JSON.

What it cannot do: judge the first run on a machine (nothing to compare with: it says so), or
see a slowdown that spares the reference's plain Python and C work and hits only torch's.
"""

from __future__ import annotations

import dataclasses
import json
import os

from overrides.clock import stats
from overrides.clock.timer import Target
from overrides.errors import UsageError
from overrides.files import schema_of, write_json_atomic

# The statement the run's speed is read from: a C builtin calling a C key function over a fresh
# tuple and list. Nothing a build or a case changes runs in it, so two runs of one interpreter
# on one machine differ in it only by the machine's speed; it has no operands (x, y go unused).
REFERENCE_STMT = "sorted((3, 1, 2), key=abs)"
REFERENCE_NAME = "speed reference"


def reference_target() -> Target:
    """The reference as a Timer core target (beside the cases: single_run.py; beside a step's
    samples: step/timing.py)."""
    return Target(REFERENCE_NAME, REFERENCE_STMT, lambda: (None, None))

# A run is marked slow when its reference ran past this multiple of the fastest of this
# machine's kept runs. The quiet runs' reference figures spread by ~2% (the fastest of them is
# the yardstick, so a quiet run reads up to ~1.02x), and a slowdown reaches the reference a
# little less than the torch calls (under a real-time ticker per core here the cases slowed
# 3.6-4.0x and the reference 3.6x): 1.06 leaves the quiet runs room and still catches the
# runs whose figures read 10% high (figures: benchmarks/README.md, 'A run slowed as a whole').
SLOW_RUN_RATIO = 1.06
# Runs kept per machine and interpreter: the yardstick is the fastest of these, so a machine
# that became slower for good (moved to other hardware under the same name) stops being marked
# slow once this many runs have seen it.
KEPT_RUNS = 30
MIN_REFERENCE_SAMPLES = stats.MIN_TRUSTED_SAMPLES  # fewer, and its headline is not a figure
CACHE_SCHEMA = "torch-function-overhead/speed-cache/1"
CACHE_FILE = os.path.join("torch-function-overhead", "speed.json")


def cache_path() -> str:
    """Where this user's runs keep their reference figures (XDG_CACHE_HOME, else ~/.cache)."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(home, CACHE_FILE)


@dataclasses.dataclass(frozen=True)
class SpeedCheck:
    """The run's reference samples (facts) and the yardstick it was judged against."""

    stmt: str
    calls_per_sample: int
    samples_ns: tuple[float, ...]  # per call, loop cost removed, as a case's
    best_ns: float | None  # the fastest reference of this machine's earlier kept runs
    earlier_runs: int  # how many kept runs best_ns is the fastest of
    limit: float = SLOW_RUN_RATIO

    @property
    def reference_ns(self) -> float | None:
        return stats.headline(self.samples_ns) if len(self.samples_ns) >= MIN_REFERENCE_SAMPLES else None

    @property
    def ratio(self) -> float | None:
        """This run's reference over the yardstick: 1.0 as fast as the fastest run kept."""
        if self.reference_ns is None or not self.best_ns:
            return None
        return self.reference_ns / self.best_ns

    @property
    def slow(self) -> bool:
        return self.ratio is not None and self.ratio > self.limit

    def to_dict(self) -> dict:
        ratio, reference = self.ratio, self.reference_ns
        return {"reference_stmt": self.stmt, "calls_per_sample": self.calls_per_sample,
                "reference_per_call_ns": None if reference is None else round(reference, 3),
                "best_per_call_ns": self.best_ns, "earlier_runs": self.earlier_runs,
                "ratio": None if ratio is None else round(ratio, 4), "slow_ratio": self.limit,
                "slow": self.slow, "samples_ns": [round(s, 3) for s in self.samples_ns]}


def from_dict(data: dict) -> SpeedCheck:
    """A results file's `speed` read back (its ratio and verdict recomputed from the facts)."""
    best = data.get("best_per_call_ns")
    return SpeedCheck(str(data["reference_stmt"]), int(data["calls_per_sample"]),
                      tuple(float(s) for s in data["samples_ns"]),
                      None if best is None else float(best), int(data.get("earlier_runs") or 0),
                      float(data.get("slow_ratio") or SLOW_RUN_RATIO))


@dataclasses.dataclass(frozen=True)
class KeptRun:
    """An earlier run kept in the cache: its reference (ns a call) and when it was made."""

    reference_ns: float
    created: str | None

    def to_dict(self) -> dict:
        return {"reference_ns": self.reference_ns, **({} if self.created is None else {"created": self.created})}

    @classmethod
    def from_dict(cls, data) -> "KeptRun | None":
        """None for anything that is not a run kept (not an object, no positive reference)."""
        if not isinstance(data, dict) or not isinstance(data.get("reference_ns"), (int, float)) \
                or data["reference_ns"] <= 0:
            return None
        return cls(data["reference_ns"], data.get("created"))


@dataclasses.dataclass(frozen=True)
class SpeedCache:
    """The cache file: each machine key's runs as the file holds them (a machine other than this
    run's is written back untouched)."""

    machines: dict

    def to_dict(self) -> dict:
        return {"schema": CACHE_SCHEMA, "machines": self.machines}

    @classmethod
    def from_dict(cls, data) -> "SpeedCache":
        """A foreign file, or one without machines, is an empty cache (the next run writes it afresh)."""
        if schema_of(data) != CACHE_SCHEMA or not isinstance(data.get("machines"), dict):
            return cls({})
        return cls(data["machines"])

    def runs(self, key: str) -> list[KeptRun]:
        """The runs kept for the machine `key`, those that read as runs."""
        return [run for run in map(KeptRun.from_dict, self.machines.get(key, [])) if run is not None]


def _read_cache(path: str) -> SpeedCache:
    """The cache in `path`; a missing or unreadable file is an empty one (it is a cache)."""
    try:
        with open(path, encoding="utf-8") as file:
            return SpeedCache.from_dict(json.load(file))
    except (OSError, ValueError):
        return SpeedCache({})


def judge(samples_ns: tuple[float, ...], calls_per_sample: int, key: str, path: str,
          created: str = "") -> SpeedCheck:
    """This run's reference samples against the machine's kept runs in `path`; the run is then
    kept there too (when it has enough samples to be a figure). `key`: which runs it compares
    with, the environment's `machine_key()` (overrides/environment.py). A cache that cannot be
    written costs the next run its yardstick, nothing more."""
    cache = _read_cache(path)
    kept = cache.runs(key)
    check = SpeedCheck(REFERENCE_STMT, calls_per_sample, tuple(samples_ns),
                       min((run.reference_ns for run in kept), default=None), len(kept))
    if check.reference_ns is not None:
        machines = dict(cache.machines)
        machines[key] = [run.to_dict() for run in (kept + [KeptRun(round(check.reference_ns, 3), created)])[-KEPT_RUNS:]]
        try:
            write_json_atomic(path, SpeedCache(machines).to_dict())
        except (OSError, UsageError):  # a read-only home must not sink the run it measured
            pass
    return check
