"""Each module's cases counted in a process of their own (a forked child, forkserver.py), so
that a row's count moves only with its own module, never with a sibling's.

Why it exists. Counts depend on addresses (the type-attribute cache is indexed by a name's
address; pymalloc's pools and malloc's free lists hold the history of every allocation), and a
counting process imports every module its cases come from, one after the other. So an unused
function added to one of your modules moved the cases of another module counted in the same
process, and the built-in cases beside them (figures: benchmarks/README.md, 'A budget row moves
only when its case's code moves'). Here the targets are split by the module a case is built
from (your `pkg.module:factory` cases and their plain twins by `pkg.module`; the built-in cases
together) and each group is counted in a child of its own, forked from one server a seed
(which imported torch, and nothing of yours), as many servers at once as
`callgrind.count_jobs()` allows. A child then imports only the one module of yours it counts:
its count is the same to the instruction whatever its siblings hold, and whichever child of
its server it is.

What still moves a row is its own module: code added to it, even unused, lays the module's
objects out elsewhere. `LAYOUT_VARIANT_VARIABLE` makes such a change on purpose: the counting
child compiles `variant` unused functions onto the end of each source of yours it imports
(`statfinder.SourceOnlyLoader`), so a budget can size its margins from what such a change does
(`budget.rows_from`) rather than from three seeds of one layout; a budget's variants are more
children of the same servers (`count_with_variants`).
"""

from __future__ import annotations

from typing import Callable, Sequence

from overrides.cases.casenames import is_user_spec, twinned
from overrides.counts import callgrind, statfinder
from overrides.counts.records import CountRun

LAYOUT_VARIANT_VARIABLE = statfinder.LAYOUT_VARIANT_VARIABLE
BUILT_IN = ""  # the group key of the built-in cases


def module_of(case: str) -> str:
    """The module a case is built from (`units` for `units:pair` and `units:pair@plain`), or
    BUILT_IN."""
    spec = twinned(case) or case
    if not is_user_spec(spec.split("@", 1)[0]):
        return BUILT_IN
    return spec.partition(":")[0]


def groups(targets: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The targets split by module_of, each group in the targets' order, groups in order of
    first appearance."""
    by_module: dict[str, list[tuple[str, str]]] = {}
    for case, op in targets:
        by_module.setdefault(module_of(case), []).append((case, op))
    return list(by_module.values())


def count(python: str, targets: Sequence[tuple[str, str]], seeds: Sequence[int], *,
          say: Callable[[str], None] | None = None, variants: Sequence[int] = ()) -> list[CountRun]:
    """callgrind.count, each module's targets in a child of their own: one CountRun per seed (in
    seed order) holding every target in the order given. `variants`: per seed, in order, how
    many unused functions are compiled onto each of your sources (none given: none, as a check
    counts)."""
    if variants:
        return count_with_variants(python, targets, seeds, variants, say=say, plain=False)[1]
    return count_with_variants(python, targets, seeds, (), say=say)[0]


def count_with_variants(python: str, targets: Sequence[tuple[str, str]], seeds: Sequence[int],
                        variants: Sequence[int], *, say: Callable[[str], None] | None = None,
                        plain: bool = True) -> tuple[list[CountRun], list[CountRun]]:
    """Every group of `targets` under every seed (with `plain`), and your groups again under
    `variants` (one a seed, in order), all by one server a seed: (runs, variant runs), each one
    CountRun per seed holding its targets in the order given."""
    split = groups(targets)
    yours = [group for group in split if module_of(group[0][0]) != BUILT_IN]
    per_seed = list(variants) or [0] * len(seeds)
    jobs = {seed: ([callgrind.Job(tuple(group)) for group in split] if plain else [])
            + ([callgrind.Job(tuple(group), variant) for group in yours] if variant else [])
            for seed, variant in zip(seeds, per_seed)}
    runs = callgrind.count_served([callgrind.Build(python)], seeds, jobs, say=say)[0]
    merged, merged_variants = [], []
    for seed, variant, parts in zip(seeds, per_seed, runs):
        plain_parts = parts[:len(split)] if plain else []
        if plain_parts:
            merged.append(_merged(seed, plain_parts, targets, 0))
        if variant and yours:
            merged_variants.append(_merged(seed, parts[len(plain_parts):], targets, variant))
    return merged, merged_variants


def _merged(seed: int, parts: Sequence[CountRun], targets: Sequence[tuple[str, str]], variant: int) -> CountRun:
    """One seed's children as one CountRun, its targets in the order given."""
    by_key = {(c.case, c.op): c for part in parts for c in part.cases}
    settings = dict(next((p.settings for p in parts if not p.died), parts[0].settings))
    died = "; ".join(p.died for p in parts if p.died)
    settings.pop("died", None)
    settings.update({"processes": len(parts), "isolated_by": "module",
                     **({"layout_variant": variant} if variant else {}), **({"died": died} if died else {})})
    return CountRun(seed, tuple(by_key[t] for t in targets if t in by_key), settings,
                    sum(p.wall_s for p in parts))
