"""The paired comparison's settings: `ABConfig`, and the flags that set it (`bench.py --compare`
and `report.sh` share them)."""

from __future__ import annotations

import dataclasses

from overrides.verdicts import DEFAULT_THRESHOLD_NS, DEFAULT_THRESHOLD_PCT

DEFAULT_SECONDS_PER_PAIR = 2.5  # a pair is ~2 s of start-up and this much sampling
# A pair's sampling once the counts have decided every case, so that the clock only checks them
# (`estimates.decided`): its interval over pairs is then set mostly by the layouts the pairs draw,
# not by how long each samples. The same pairs cut to their first 60% gave 95% intervals
# 0.92-1.13x as wide on every seed case but plain Tensor (1.4-1.9x of its +-3 ns, far inside
# the 20-ns threshold); cut to 40%, up to 1.46x (benchmarks/pair_length_probe.py, 7 A/A and 7
# bare-shim comparisons; benchmarks/README.md, 'Where a verdict's seconds go'). A --pair-seconds
# of the user's holds for every pair.
CHECK_SECONDS_PER_PAIR = 1.5
# Pairs are added until every case has a verdict or the cap is reached: a clear change stops
# early, an unclear one gets all the time there is. 60 s is ~12 pairs of the four seed cases.
DEFAULT_MAX_SECONDS = 60.0
MIN_PAIRS = 5  # before this the t-interval (4 degrees of freedom, t = 2.78) decides nothing
MAX_PAIRS = 200  # a bound for --max-seconds far beyond the default


@dataclasses.dataclass(frozen=True)
class ABConfig:
    pairs: int | None = None  # None: add pairs until decided or max_seconds (see estimates.why_stop)
    max_seconds: float = DEFAULT_MAX_SECONDS
    seconds_per_pair: float = DEFAULT_SECONDS_PER_PAIR
    # seconds_per_pair once the counts decide every case; None: seconds_per_pair throughout
    check_seconds_per_pair: float | None = CHECK_SECONDS_PER_PAIR
    threads: int = 1
    threshold_ns: float = DEFAULT_THRESHOLD_NS
    threshold_pct: float = DEFAULT_THRESHOLD_PCT
    fix_layout: bool = True  # setarch -R + per-pair hash seed; off only to show why it is on
    # Load identical shared libraries from one file and copy differing ones per pair
    # (overrides/builds/placement.py); off only to show why it is on.
    match_placement: bool = True
    # Hash seeds to count instructions under (Callgrind), before the timing; empty: no counts.
    instruction_seeds: tuple[int, ...] = ()
    # The seeds were drawn (no --seeds): cases their counts leave undecided are counted under
    # more drawn seeds, up to rounds.MAX_COMPARE_SEEDS. A user's own seeds are kept as given.
    add_seeds: bool = False
    hash_seed_base: int | None = None  # None: drawn at random per comparison
    call_paths: bool = False  # count with Callgrind's call paths (overrides/counts/calltree.py)
    # Counts asked for by default rather than by the user: when counting fails (a torch built
    # without valgrind support), keep the clock's verdicts and say why instead of failing.
    instructions_optional: bool = False
    # Two versions of your own code in one environment (`--compare units:pair units_fast:pair`):
    # (the base's spec, the branch's). Both sides run one interpreter; the compared case is named
    # by the base's spec, and each side's processes build it from their own (side_env).
    your_code: tuple[str, str] | None = None
    # Name what changed in each case that moved: its Python functions counted on both sides
    # (ab/named.py). `bench.py --compare` asks for it; report.sh counts every case itself.
    name_functions: bool = False


def side_env(config: ABConfig, label: str) -> tuple[tuple[str, str], ...]:
    """The variables every process of side `label` gets of its own: which of your code it builds
    (casenames.YOUR_CODE_VARIABLE), on both sides alike when two versions are compared."""
    if not config.your_code:
        return ()
    from overrides.cases.casenames import your_code_env

    from overrides.sides import Sides

    yours = Sides.of(config.your_code)
    return tuple(your_code_env(yours.base, yours.side(label)).items())


def add_arguments(group) -> None:
    """The A/B's flags, shared by `bench.py --compare` and `report.sh`."""
    from overrides.argtypes import non_negative_float, positive_float, positive_int

    group.add_argument("--pairs", type=positive_int, default=None, metavar="P",
                       help="exactly P fresh worker pairs, each with its own memory layout "
                            "(default: add pairs until every case is decided or --max-seconds)")
    group.add_argument("--max-seconds", type=positive_float, default=DEFAULT_MAX_SECONDS, metavar="S",
                       help=f"time cap for the timed pairs (default {DEFAULT_MAX_SECONDS:g}; "
                            f"at least {MIN_PAIRS} pairs run)")
    group.add_argument("--pair-seconds", type=positive_float, default=None,
                       metavar="S", help=f"sampling time per pair (default {DEFAULT_SECONDS_PER_PAIR:g}, "
                                         f"{CHECK_SECONDS_PER_PAIR:g} where the counts decide every case)")
    group.add_argument("--threshold-ns", type=non_negative_float, default=DEFAULT_THRESHOLD_NS,
                       metavar="NS", help=f"smallest change worth a verdict, ns (default {DEFAULT_THRESHOLD_NS:g})")
    group.add_argument("--threshold-pct", type=non_negative_float, default=DEFAULT_THRESHOLD_PCT,
                       metavar="PCT", help=f"... or percent of base, whichever is larger "
                                           f"(default {DEFAULT_THRESHOLD_PCT:g})")


def config_from_arguments(args, *, threads: int = 1, counts: bool = True,
                          call_paths: bool = False) -> tuple[ABConfig, str | None]:
    """The one place a command's flags become the A/B's settings (`bench.py --compare`,
    `report.sh`, `bench.py --history --clock`): (the config, why instructions are not counted
    or None). `counts`: whether the command counts instructions beside the clock, as
    --instructions, --no-instructions and --seeds say (counts.rounds.counting_plan, which also
    refuses their contradictions); `call_paths`: with Callgrind's call paths, where counted."""
    from overrides.counts.rounds import counting_plan

    seeds, skipped = (counting_plan(args.instructions, args.no_instructions, args.seeds) if counts
                      else ((), None))
    return ABConfig(pairs=args.pairs, max_seconds=args.max_seconds,
                    seconds_per_pair=args.pair_seconds or DEFAULT_SECONDS_PER_PAIR,
                    check_seconds_per_pair=None if args.pair_seconds else CHECK_SECONDS_PER_PAIR,
                    threads=threads,
                    threshold_ns=args.threshold_ns, threshold_pct=args.threshold_pct,
                    instruction_seeds=tuple(seeds), add_seeds=not args.seeds,
                    call_paths=call_paths and bool(seeds),
                    instructions_optional=not args.instructions), skipped
