"""How a figure is written: the one place that decides its digits, its sign and its thousands
separator, for people (text and Markdown) and for the JSON files alike.

Nanoseconds and instructions per call are written whole ("+1,431"): the changes that matter are
tens of nanoseconds and tens of instructions, and a decimal below that is noise on this kind of
machine. Python calls and bytecodes per call are counted over CALLS calls, so they are exact to
a thousandth and written so ("4.001"), whole where whole. A missing or non-finite figure is "-".
"""

from __future__ import annotations

import math

JSON_PLACES = 2  # a figure in JSON: enough for a delta of a tenth of a nanosecond to survive
COUNT_PLACES = 3  # a Python count per call, over a thousand calls: exact to a thousandth


def whole(value: float | None, signed: bool = False) -> str:
    """"1,431", or with `signed` "+1,431"; "-" where there is no figure."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:+,.0f}" if signed else f"{value:,.0f}"


def micros(value_ns: float | None, signed: bool = False) -> str:
    """Nanoseconds written as microseconds to a tenth ("6.7", "+4.5"): a CUDA call's figures,
    whose host side alone is microseconds and whose GPU side reaches milliseconds."""
    if value_ns is None or not math.isfinite(value_ns):
        return "-"
    return f"{value_ns / 1000:+,.1f}" if signed else f"{value_ns / 1000:,.1f}"


def signed(value: float | None) -> str:
    """A change in whole units: "+1,431", "-12", "+0"; "-" where there is no figure."""
    return whole(value, signed=True)


def count(value: float) -> str:
    """A Python count per call: whole where it is whole ("4"), to a thousandth otherwise."""
    return f"{value:,.{COUNT_PLACES}f}".rstrip("0").rstrip(".") if value else "0"


def signed_count(value: float) -> str:
    """A change of a Python count per call: "+1", "-0.001", "0"."""
    return "0" if not value else ("+" if value > 0 else "-") + count(abs(value))


def json_figure(value: float | None, places: int = JSON_PLACES) -> float | None:
    """A figure as the JSON files carry it: rounded to `places`, None where it is missing or
    not finite (JSON has no NaN)."""
    return None if value is None or not math.isfinite(value) else round(value, places)
