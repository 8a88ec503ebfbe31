"""Which hash seeds a comparison counts under, and counting in rounds until the counts decide.

A verdict on counts must not rest on one layout unless the counts are exact, and one more seed
costs a whole valgrind process (figures: benchmarks/history.md, 'Docstring figures'): so a
comparison draws its seeds afresh (`fresh_seeds`), counts a round's worth at once (one valgrind
process per CPU), and counts again, for the cases still undecided only, while more seeds could
decide them (`count_until_decided`).
"""

from __future__ import annotations

import shutil
import time
from typing import Callable, Sequence

from overrides.counts.callgrind import count_jobs
from overrides.counts.valgrind import INSTALL_HINT, find_valgrind
from overrides.counts.judge import (COUNTS_NO_CHANGE_CONFIDENCE, DEFAULT_THRESHOLD_INSTRUCTIONS_PCT,
                                    CountComparison, compare_counts, half_width)
from overrides.counts.records import CountRun
from overrides.errors import UsageError
from overrides.verdicts import DECIDED

# Comparing builds: a verdict must not rest on one layout unless the counts are exact, so three
# seeds are drawn afresh for every comparison (fresh_seeds) and counted in rounds that fill the
# CPUs (count_until_decided; one seed a round on two CPUs). Fixed seeds (1, 2, 3) made every
# comparison of a pair the same sample of layouts: the bare shim on SubTensor read +517
# [-262..+1,297], "inconclusive", in every comparison of one batch, one seed far from the other
# two each time.
COMPARE_SEED_COUNT = 3
# Seeds whose counts leave a case undecided get company, for those cases only, up to this many
# in all, while more could decide them (more_seeds_could_decide). With layout's known spread
# pooled in (LAYOUT_SPREAD_PCT) most cases are decided on one or two seeds; six is for a
# comparison whose own spread is wider than that. One more seed costs ~15 s quiet, ~30 s busy
# (both builds at once; the imports under valgrind are most of it).
MAX_COMPARE_SEEDS = 6
# Drawn seeds have six digits: PYTHONHASHSEED's value is in the environment, so every
# comparison's environment then has one length.
FRESH_SEED_RANGE = (100_000, 999_999)


def counting_plan(asked: bool, refused: bool, seeds: Sequence[int] | None
                  ) -> tuple[tuple[int, ...], str | None]:
    """The seeds a comparison of two builds counts instructions under, and why it does not.

    Comparisons count by default wherever valgrind is installed: the counts call changes the
    clock cannot (a ~1% one at the 0.75% threshold). Without `seeds`, COMPARE_SEED_COUNT fresh
    ones. `asked` (--instructions) or `seeds` make a missing valgrind an error; `refused`
    (--no-instructions) turns counting off. Returns (seeds, None), or ((), why counting is
    skipped and how to install valgrind)."""
    if refused:
        if seeds:
            raise UsageError("--seeds chooses layouts for the counts; drop --no-instructions or --seeds")
        return (), None
    if asked or seeds or (shutil.which("valgrind") and shutil.which("callgrind_control")):
        find_valgrind()  # asked for and missing: say how to install it now, not after the timing
        return tuple(seeds or fresh_seeds()), None
    return (), f"valgrind is not installed; {INSTALL_HINT}"


def fresh_seeds(count_: int = COMPARE_SEED_COUNT, taken: Sequence[int] = ()) -> tuple[int, ...]:
    """`count_` distinct hash seeds, drawn anew and none of `taken`: each comparison counts its
    own sample of layouts."""
    import random

    rng, taken, drawn = random.SystemRandom(), set(taken), []
    while len(drawn) < count_:
        seed = rng.randint(*FRESH_SEED_RANGE)
        if seed not in taken:
            taken.add(seed)
            drawn.append(seed)
    return tuple(drawn)


def more_seeds_could_decide(c: CountComparison, max_seeds: int = MAX_COMPARE_SEEDS) -> bool:
    """Whether counting an undecided case under more seeds, up to `max_seeds`, could decide it,
    were the per-seed deltas to go on as they have (their mean and spread). With one seed there
    is no spread yet to go on. A case more seeds cannot decide (its delta sits near the
    threshold, or moves too much by layout) is left to the clock rather than counted on: the
    bare shim's untouched WithTorchFunction, whose delta spread across zero over the seeds, once
    took several seeds of valgrind to stay "inconclusive" (figures: benchmarks/history.md,
    'Docstring figures')."""
    if c.why:
        return False  # the sides do not count alike: more seeds measure the same offset
    if c.spread is None or c.limit is None or c.seeds >= max_seeds:
        return c.seeds < max_seeds
    size = abs(c.delta)
    no_change = size + half_width(c.spread, max_seeds, c.base, COUNTS_NO_CHANGE_CONFIDENCE) <= c.limit
    change = size >= c.limit and size - half_width(c.spread, max_seeds, c.base, 0.95) > 0
    return no_change or change


def seeds_per_round(builds: int = 2) -> int:
    """How many seeds one round of counting takes: every build under each, one valgrind process
    per CPU."""
    return max(1, count_jobs() // builds)


def first_round(seeds: Sequence[int], add_seeds: bool, per_round: int | None = None) -> int:
    """How many seeds count_until_decided counts every case under first: the user's own seeds
    all at once; drawn ones a round's worth (seeds_per_round())."""
    return max(1, per_round or seeds_per_round()) if add_seeds else len(seeds)


# Which seeds each side has counts kept under (counts/kept.py), for a list of targets: (base's,
# branch's). A seed kept for a side costs that side nothing to count again.
Kept = Callable[[list], tuple[Sequence[int], Sequence[int]]]


def kept_first(pool: Sequence[int], kept: tuple[Sequence[int], Sequence[int]]) -> list[int]:
    """`pool`'s seeds, those kept for both sides first, then for one, in the order kept; the rest
    (drawn) after: a comparison against a base compared before counts the base under no new seed."""
    base, branch = kept
    both = [s for s in base if s in branch]
    one = [s for s in [*base, *branch] if s not in both]
    return list(dict.fromkeys([*both, *one, *pool]))


def seeds_that_fit(order: Sequence[int], kept: tuple[Sequence[int], Sequence[int]], limit: int,
                   processes: int | None = None) -> tuple[int, ...]:
    """The first seeds of `order` one round counts: every seed kept for both sides (it costs
    nothing), else as many as fill `processes` (count_jobs()) with the sides not kept, at least one,
    at most `limit`."""
    base, branch = kept
    free = [s for s in order if s in base and s in branch]
    if free:
        return tuple(free[:limit])
    room, taken = processes or count_jobs(), []
    for seed in order:
        cost = (seed not in base) + (seed not in branch)
        if taken and (cost > room or len(taken) >= limit):
            break
        taken.append(seed)
        room -= cost
    return tuple(taken)


def count_until_decided(count_builds_: Callable[[list, Sequence[int]], list[list[CountRun]]],
                        targets: list, seeds: Sequence[int], add_seeds: bool,
                        say: Callable[[str], None] | None = None, per_round: int | None = None,
                        threshold_pct: float = DEFAULT_THRESHOLD_INSTRUCTIONS_PCT, kept: Kept | None = None,
                        ) -> tuple[list[CountRun], list[CountRun], list[CountComparison], tuple[int, ...]]:
    """Base and branch counted by `count_builds_(targets, seeds)` and compared. Returns (base
    runs, branch runs, comparisons, every seed counted).

    Without `add_seeds` (the user's own seeds) every seed is counted at once. With it, `seeds`
    are drawn ones, counted in rounds of `per_round` (seeds_per_round(): as many as fill the
    CPUs, one at a time on two): the first round counts every case, each later round only the
    cases still undecided whose counts more seeds could decide (more_seeds_could_decide), under
    the next drawn seeds, up to MAX_COMPARE_SEEDS in all. From one path an untouched case is
    exact on its first seed, so an A/A comparison counts one round. With `kept` (which seeds
    each side has counts kept under, for the targets of a round), a round takes those first: a
    seed kept for both costs nothing, one kept for the base costs the branch's count alone.

    Stopping once the cases are decided looks at the data after every round; that cannot make a
    "regression" of an untouched case whose layouts spread by tens of instructions, as the
    estimate itself must pass the threshold (DEFAULT_THRESHOLD_INSTRUCTIONS)."""
    if not add_seeds:
        base_runs, branch_runs = count_builds_(list(targets), tuple(seeds))
        return base_runs, branch_runs, compare_counts(base_runs, branch_runs, threshold_pct=threshold_pct), tuple(seeds)
    per_round = first_round(seeds, add_seeds, per_round)
    pool = list(seeds)
    if len(pool) < per_round:
        pool += fresh_seeds(per_round - len(pool), taken=pool)
    if kept is not None:
        held = kept(list(targets))
        counted = seeds_that_fit(kept_first(pool, held), held, MAX_COMPARE_SEEDS, 2 * per_round)
    else:
        counted = tuple(pool[:per_round])
    pool = list(dict.fromkeys([*counted, *pool]))
    round_started = time.monotonic()
    base_runs, branch_runs = count_builds_(list(targets), counted)
    comparisons = compare_counts(base_runs, branch_runs, threshold_pct=threshold_pct)
    while len(counted) < MAX_COMPARE_SEEDS:
        open_ = [c for c in comparisons if c.verdict not in DECIDED]
        undecided = [(c.case, c.op) for c in open_ if more_seeds_could_decide(c)]
        if not undecided:
            if open_ and say:
                say(f"counts cannot decide {', '.join(c.case for c in open_)} with more seeds: "
                    "the clock judges")
            break
        take = min(per_round, MAX_COMPARE_SEEDS - len(counted))
        unused = [seed for seed in pool if seed not in counted]
        if kept is not None:
            held = kept(undecided)
            unused = [s for s in kept_first(unused, held) if s not in counted]
            new = seeds_that_fit(unused, held, MAX_COMPARE_SEEDS - len(counted), 2 * per_round) if unused else ()
        else:
            new = tuple(unused[:take])
        if len(new) < take and not (kept is not None and new):
            new += fresh_seeds(take - len(new), taken=counted + new)
        if say:
            say(f"counts leave {', '.join(case for case, _ in undecided)} undecided: seed"
                f"{'s' if len(new) > 1 else ''} {len(counted) + 1}"
                f"{f'-{len(counted) + len(new)}' if len(new) > 1 else ''} of at most {MAX_COMPARE_SEEDS}"
                f" (the last round took {time.monotonic() - round_started:.0f} s)")
        round_started = time.monotonic()
        more_base, more_branch = count_builds_(undecided, new)
        base_runs, branch_runs = base_runs + more_base, branch_runs + more_branch
        counted += new
        comparisons = compare_counts(base_runs, branch_runs, threshold_pct=threshold_pct)
    return base_runs, branch_runs, comparisons, counted
