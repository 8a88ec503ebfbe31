"""Known-cost "branch" environments, for validating verdicts against a truth we control.

A shim environment is a virtualenv that shares the base interpreter's packages (a `.pth` file
lists the base's site-packages, so nothing is copied or installed, and a base that is itself
a virtualenv works too) and, at start-up, wraps `torch.Tensor.__torch_function__` in a Python
shim. Plain tensors never reach `__torch_function__` and a tensor-like does not inherit it, so
the shim can only cost something in subclass cases: a real change of the kind reviewers care
about, whose true cost `shim_truth_ns` measures in one process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import venv

SHIM_MODULE = "_overrides_shim"

# What the shim does before calling the original, by name. `bare` only adds the Python call.
SHIM_WORK = {
    "bare": "",
    "loop10": "for _ in range(10): pass",
    "loop40": "for _ in range(40): pass",
    "sleep1us": "_t = _clock() + 1000\n    while _clock() < _t: pass",
    "sleep5us": "_t = _clock() + 5000\n    while _clock() < _t: pass",
}

_SHIM_SOURCE = '''"""Start-up shim written by overrides.shimenv: wraps torch.Tensor.__torch_function__."""
import time
import torch

_clock = time.perf_counter_ns
_original = torch.Tensor.__torch_function__.__func__


def _shim(cls, func, types, args=(), kwargs=None):
    {work}
    return _original(cls, func, types, args, kwargs)


def install():
    torch.Tensor.__torch_function__ = classmethod(_shim)


def uninstall():
    torch.Tensor.__torch_function__ = classmethod(_original)
'''


@dataclasses.dataclass(frozen=True)
class ShimEnv:
    path: str
    python: str
    work: str


def shim_source(work: str) -> str:
    if work not in SHIM_WORK:
        raise ValueError(f"unknown shim work {work!r}; choose from {', '.join(SHIM_WORK)}")
    body = SHIM_WORK[work] or "pass"
    return _SHIM_SOURCE.format(work=body)


def base_site_packages(python: str) -> list[str]:
    out = subprocess.run([python, "-c", "import json, site; print(json.dumps(site.getsitepackages()))"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def make_shim_env(base_python: str, dest: str, work: str | None) -> ShimEnv:
    """A virtualenv at `dest` sharing `base_python`'s packages; with `work`, the shim installed."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(dest)
    python = os.path.join(dest, "bin", "python")
    site_dir = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site_dir, "_overrides_base.pth"), "w", encoding="utf-8") as pth:
        pth.write("\n".join(base_site_packages(base_python)) + "\n")
    if work is not None:
        with open(os.path.join(site_dir, SHIM_MODULE + ".py"), "w", encoding="utf-8") as module:
            module.write(shim_source(work))
        # Sorted after _overrides_base.pth, so torch is importable when this line runs.
        with open(os.path.join(site_dir, "zz_overrides_shim.pth"), "w", encoding="utf-8") as pth:
            pth.write(f"import {SHIM_MODULE}; {SHIM_MODULE}.install()\n")
    return ShimEnv(dest, python, work or "none")


def load_shim(work: str):
    """The shim module, loaded in this process (installed on demand), for truth measurements."""
    import importlib.util
    import tempfile

    folder = tempfile.mkdtemp(prefix="shim-")
    path = os.path.join(folder, f"{SHIM_MODULE}_{work}.py")
    with open(path, "w", encoding="utf-8") as module:
        module.write(shim_source(work))
    spec = importlib.util.spec_from_file_location(f"{SHIM_MODULE}_{work}", path)
    shim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim)
    return shim


def shim_truth_ns(work: str, cases, rounds: int = 6, seconds_per_round: float = 1.0,
                  progress=None) -> dict[str, float]:
    """The shim's true cost per case, in this process: on and off in alternating rounds.

    Each switch rewrites a type attribute and so invalidates the interpreter's caches; every
    round therefore starts with an untimed warm-up (the Timer core's own), and the shim is
    switched per round, never per sample. Truth = median over rounds of (on - off), pairing
    each "on" round with the "off" round beside it.
    """
    from overrides import stats
    from overrides.ops import DEFAULT_OP
    from overrides.timer import Target, TimerConfig, time_targets

    shim = load_shim(work)
    per_state: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    targets = [Target(c.name, DEFAULT_OP.stmt, c.make_operands) for c in cases]
    config = TimerConfig(min_time_s=seconds_per_round / max(1, len(targets)))
    try:
        for index in range(rounds * 2):
            state = (index % 4) in (1, 2)  # off, on, on, off, ...: balanced against drift
            shim.install() if state else shim.uninstall()
            run = time_targets(targets, config)
            per_state[state].append({t.name: stats.headline(t.samples_ns) for t in run.targets})
            if progress:
                progress(f"truth for shim {work!r}: round {index + 1}/{rounds * 2}")
    finally:
        shim.uninstall()
    return {
        c.name: stats.median([on[c.name] - off[c.name]
                              for on, off in zip(per_state[True], per_state[False])])
        for c in cases
    }


if __name__ == "__main__":  # python -m overrides.shimenv DEST WORK: make one by hand
    env = make_shim_env(sys.executable, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    print(env.python)
