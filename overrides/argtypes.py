"""Argument parsing shared by every command line here (bench.py, pyspybench.py, record.sh,
report.sh): a parser whose mistakes are one line and exit status 2, and checked number types."""

from __future__ import annotations

import argparse

from overrides.errors import UsageError


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line naming the problem, not a usage dump."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be 1 or more")
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def positive_float(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be above 0")
    return value


def non_negative_float(text: str) -> float:
    value = _float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return value
