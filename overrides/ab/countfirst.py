"""Instruction counts before the timed pairs: both builds counted under the same hash seeds, so
that a case the counts decide needs no more than MIN_PAIRS of the clock.

Counted after the pairs (the first version), most A/A comparisons ran the clock to its time cap
and only then counted, although the counts said "no change" to the instruction
(figures: benchmarks/history.md, 'Docstring figures').
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from typing import Sequence

from overrides import ROOT, entry, workers
from overrides.ab.config import MIN_PAIRS, ABConfig, side_env
from overrides.builds.interpreters import PROBE_TIMEOUT_S, with_import_path
from overrides.cases.casenames import USER_DIR_VARIABLE, Case
from overrides.cases.ops import Op, tried_by_running
from overrides.errors import UsageError
from overrides.sides import BASE, BRANCH, ROLES
from overrides.verdicts import DECIDED

@dataclasses.dataclass(frozen=True)
class Applicable:
    """A side's answer to which (case, op)s apply (`serve`): a reason each, None where the op
    applies; or `error`, why a case of yours could not be built."""

    reasons: tuple[str | None, ...] = ()
    error: str | None = None

    def to_dict(self) -> dict:
        return {"error": self.error} if self.error is not None else {"reasons": list(self.reasons)}

    @classmethod
    def from_dict(cls, data: dict) -> "Applicable":
        return cls(error=data["error"]) if "error" in data else cls(tuple(data["reasons"]))


def serve(channel, targets_json: str) -> None:
    """In a side's interpreter (entry.py's `applicable` role): say which of the (case, op)s apply
    (ops.not_applicable_reason, a reason or None each), or {"error": ...} for a user case that
    cannot be built."""
    from overrides.cases.ops import get_op, not_applicable_reason
    from overrides.cases.registry import get_case

    try:
        channel.say(Applicable(tuple(not_applicable_reason(get_case(c), get_op(o))
                                     for c, o in json.loads(targets_json))).to_dict())
    except UsageError as error:
        channel.say(Applicable(error=str(error)).to_dict())


def countable(targets: Sequence[tuple[Case, Op]], python: str,
               import_path: str | None, own_env: tuple = ()) -> list[tuple[str, str]]:
    """The (case, op) names worth counting: those the op applies to. A built-in case declares
    where a named op does not; the rest (your case, your statement, operands of another shape
    or device: `ops.tried_by_running`) are tried by `python`, as a worker would, because this
    process has no torch to try them with (WithTorchFunction has no `.view`, and its count's
    crash once took every other case's counts with it)."""
    declared = [(case.name, op.name) for case, op in targets if not case.not_applicable_to(op)]
    unknown = [(case.name, op.name) for case, op in targets
               if not case.not_applicable_to(op) and tried_by_running(case, op)]
    if not unknown:
        return declared
    env = with_import_path(dict(os.environ), ROOT, import_path)
    env[USER_DIR_VARIABLE] = os.getcwd()
    env.update(own_env)  # which of your code this side builds (ab.config.side_env)
    try:
        asked = subprocess.run(entry.command(python, "applicable", json.dumps(unknown)),
                               capture_output=True, text=True, env=env, cwd=ROOT,
                               timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UsageError(f"{python} took over {PROBE_TIMEOUT_S} s to build the user cases") from None
    answer = Applicable.from_dict(workers.answer(asked, "reasons", "error",
                                                 failed=f"{python} could not build the user cases"))
    if answer.error is not None:
        raise UsageError(answer.error)
    skipped = {target for target, reason in zip(unknown, answer.reasons) if reason}
    return [target for target in declared if target not in skipped]


def counts_progress(settled: int, wanted: int, check_seconds: float | None = None) -> str:
    """What the clock does next, once the counts are in (`check_seconds`: each pair's sampling
    where the counts decide every case)."""
    left = wanted - settled
    if not left:
        each = f" of {check_seconds:g} s" if check_seconds else ""
        return (f"counts decide all {wanted} case{'s' if wanted != 1 else ''}; the clock checks "
                f"them over {MIN_PAIRS} pairs{each}")
    return (f"counts decide {settled} of {wanted} cases; the clock runs until the other {left} "
            f"{'is' if left == 1 else 'are'} decided, or its cap")


def check_seconds(config: ABConfig, counted: "Counted | None", targets) -> float | None:
    """Each pair's sampling where the clock only checks the counts, because they decided every
    (case, op) the op applies to (config.check_seconds_per_pair, no longer than the pairs asked
    for); None where the pairs sample as long as config.seconds_per_pair says."""
    if counted is None or config.check_seconds_per_pair is None:
        return None
    applicable = {(case.name, op.name) for case, op in targets if not case.not_applicable_to(op)}
    if not applicable or not applicable <= set(counted.settled):
        return None
    return min(config.seconds_per_pair, config.check_seconds_per_pair)


@dataclasses.dataclass(frozen=True)
class Counted:
    """Both builds' instruction counts, made before the timed pairs."""

    runs: tuple = ()  # (base CountRuns, branch CountRuns)
    comparisons: tuple = ()  # judge.CountComparison per counted target
    seconds: float = 0.0
    skipped: str | None = None  # why there are no counts (optional counting that failed)
    seeds: tuple[int, ...] = ()  # every seed counted under, the added ones last
    seeds_added: tuple[int, ...] = ()  # those that counted only the cases left undecided

    @property
    def settled(self) -> dict:
        """(case, op) -> the counts' verdict, for the cases the counts decide."""
        return {(c.case, c.op): c.verdict for c in self.comparisons if c.verdict in DECIDED}


def count_first(base_py: str, branch_py: str, targets, config: ABConfig, say,
                 import_paths: Sequence[str | None], sources: Sequence[str | None]) -> Counted:
    """Count instructions on both sides under the same seeds, before the timed pairs. The
    counts judge (see overrides/case_comparison.py), so a case they decide needs no more than MIN_PAIRS of the clock:
    a clear change, or none at all between two copies of one build, ends the timing early.
    Counted through the views, like the workers: both sides' import paths have one length."""
    from overrides.counts import callgrind, rounds

    started = time.monotonic()
    wanted = countable(targets, base_py, import_paths[0], side_env(config, BASE))
    if config.your_code:  # the branch builds your case from its own code: what it cannot run, neither side counts
        wanted = [t for t in countable(targets, branch_py, import_paths[1], side_env(config, BRANCH))
                  if t in wanted]
    first = rounds.first_round(config.instruction_seeds, config.add_seeds)
    say(f"counting instructions first: {first} seed{'s' if first != 1 else ''} x 2 builds with Callgrind, "
        f"{min(2 * first, callgrind.count_jobs())} at once"
        + (f"; more seeds for cases left undecided, up to {rounds.MAX_COMPARE_SEEDS}" if config.add_seeds else ""))

    sides = dict(import_paths=import_paths, sources=sources,
                 side_envs=[side_env(config, label) for label in ROLES])

    def count(targets_: list, seeds_: Sequence[int]) -> list[list]:
        return callgrind.count_builds([base_py, branch_py], targets_, seeds_, say=say, tree=config.call_paths,
                                      names=ROLES, **sides)

    def kept(targets_: list) -> tuple:
        """The seeds each side's counts of these targets are kept under: counted under those first."""
        return tuple(callgrind.kept_seeds([base_py, branch_py], targets_, tree=config.call_paths, **sides))

    try:
        base_counts, branch_counts, comparisons, seeds = rounds.count_until_decided(
            count, wanted, config.instruction_seeds, config.add_seeds, say,
            threshold_pct=config.threshold_pct, kept=kept)
    except UsageError as error:
        if not config.instructions_optional:
            raise
        say(f"instruction counts skipped: {error}")
        return Counted(skipped=str(error))
    added = tuple(run.seed for run in base_counts if len(run.cases) < len(wanted))
    counted = Counted((base_counts, branch_counts), tuple(comparisons), time.monotonic() - started,
                       seeds=seeds, seeds_added=added)
    say(counts_progress(len(counted.settled), len(wanted), check_seconds(config, counted, targets)))
    return counted
