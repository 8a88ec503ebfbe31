"""Shared helpers: run the project's own entry points as a user would."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def run_tool(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python <tool> args...` from the project root and capture its output."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture
def bench():
    return lambda *args, **kw: run_tool("bench.py", *args, **kw)
