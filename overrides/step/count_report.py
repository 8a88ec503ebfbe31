"""`bench.py --step SPEC --instructions`: what its count (counting.py) prints and writes.

Two tables: instructions a step of the plain twin and of yours per hash seed counted, and their
difference; then the user's Python functions a step on both sides. Kept apart from the timing's
report (output.py): nothing here is timed, so none of its figures has an interval; the spread
over seeds is the layout's.
"""

from __future__ import annotations

import math

from overrides.step.counting import StepCounts
from overrides.tables import ruled

SCHEMA = "torch-function-overhead/step-counts/1"
DEFAULT_SEEDS = (1,)  # as `--instructions` for cases: one layout unless --seeds asks for more


def _count(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.0f}"


def _signed(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:+,.0f}"


def _calls(value: float) -> str:
    return f"{value:g}"


def render(counts: StepCounts) -> str:
    rows = [["seed", "plain twin instr/step", "yours instr/step", "yours - plain", "share"]]
    for seed, plain, yours in counts.per_seed():
        share = (yours - plain) / plain * 100 if plain and not math.isnan(plain) else math.nan
        rows.append([str(seed), _count(plain), _count(yours), _signed(yours - plain),
                     "n/a" if math.isnan(share) else f"{share:+.1f}%"])
    lines = ruled(rows)
    repeats = [case.spread_pct for run in counts.runs for case in run.cases if case.repeats]
    lines.append(f"Callgrind, {counts.steps_per_repeat} steps a repeat after {counts.warm_steps} warm steps, "
                 f"the minimum of repeats 2..n (spread up to {max(repeats, default=0):.3f}%); "
                 f"{counts.wall_s:.0f} s")
    for died in counts.died:
        lines.append(f"not counted: {died}")
    lines.append("")
    functions = [["your function", "plain calls/step", "yours calls/step"]]
    functions += [[f.function, _calls(f.plain), _calls(f.yours)] for f in counts.functions]
    lines += ruled(functions) if counts.functions else ["your functions: none of your files' functions ran"]
    return "\n".join(lines)


def payload(counts: StepCounts) -> dict:
    from overrides.counts.records import to_dict
    from overrides.figures import json_figure

    return {"schema": SCHEMA, "step": counts.spec, "steps_per_repeat": counts.steps_per_repeat,
            "warm_steps": counts.warm_steps, "wall_s": round(counts.wall_s, 1),
            # a seed whose process died counts NaN: null, as every payload writes it
            "per_seed": [{"seed": seed, "plain": json_figure(plain), "yours": json_figure(yours)}
                         for seed, plain, yours in counts.per_seed()],
            "functions": [{"function": f.function, "plain": f.plain, "yours": f.yours} for f in counts.functions],
            "instructions": to_dict(counts.runs)}
