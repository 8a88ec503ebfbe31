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
import os
import subprocess
import sys
import venv

from overrides import entry, workers

SHIM_MODULE = "_overrides_shim"
TRUTH_SECONDS = 2.0  # per twin pair and process
TRUTH_PROCESSES = 24  # layouts the truth is averaged over: +-100 ns each, ~20 ns for the mean
SHIM_HOOK_MODULE = "_overrides_shim_hook"

# The start-up hook installs the shim right after torch is first imported, and imports nothing
# itself. A first version imported torch from the .pth line; that changed import order and heap
# layout against the base so much that WithTorchFunction, which the shim cannot reach, read
# +42 and +65 ns in paired A/B (flagged once), and SubTensor read ~100 ns above its truth.
_HOOK_SOURCE = '''"""Start-up hook written by overrides.ab.shimenv: shim torch once torch is imported."""
import sys


class _ShimAfterTorchImport:
    # Every spec of torch it hands out installs the shim when executed, so a look-up that only
    # asks (importlib.util.find_spec, as bench.py does before importing) costs nothing; the
    # hook leaves once torch has run.
    searching = False

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "torch" or cls.searching:
            return None
        cls.searching = True
        try:
            for finder in sys.meta_path:
                if finder is cls or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            cls.searching = False
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            if cls in sys.meta_path:
                sys.meta_path.remove(cls)
            import _overrides_shim
            _overrides_shim.install()

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _ShimAfterTorchImport)
'''

# What the shim does before calling the original, by name. `partial` adds only a C-level
# functools.partial call (no Python frame): the smallest real change we can inject. `bare`
# adds a Python function call around the original.
SHIM_WORK = {
    "partial": None,
    "bare": "",
    "loop10": "for _ in range(10): pass",
    "loop40": "for _ in range(40): pass",
    "sleep100ns": "_t = _clock() + 100\n    while _clock() < _t: pass",
    "sleep1us": "_t = _clock() + 1000\n    while _clock() < _t: pass",
    "sleep5us": "_t = _clock() + 5000\n    while _clock() < _t: pass",
}

_SHIM_SOURCE = '''"""Start-up shim written by overrides.ab.shimenv: wraps torch.Tensor.__torch_function__."""
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


_PARTIAL_SOURCE = '''"""Start-up shim written by overrides.ab.shimenv: functools.partial around __torch_function__."""
import functools
import torch

_original = torch.Tensor.__torch_function__.__func__
_shim = functools.partial(_original)


def install():
    torch.Tensor.__torch_function__ = classmethod(_shim)


def uninstall():
    torch.Tensor.__torch_function__ = classmethod(_original)
'''


def shim_source(work: str) -> str:
    if work not in SHIM_WORK:
        raise ValueError(f"unknown shim work {work!r}; choose from {', '.join(SHIM_WORK)}")
    if SHIM_WORK[work] is None:
        return _PARTIAL_SOURCE
    return _SHIM_SOURCE.format(work=SHIM_WORK[work] or "pass")


def base_site_packages(python: str) -> list[str]:
    out = subprocess.run(entry.command(python, "site-packages"), capture_output=True, text=True)
    return workers.value_of(workers.answer(out, "site_packages", failed=f"{python} could not list its site-packages"),
                            "site_packages")


def make_shim_env(base_python: str, dest: str, work: str | None) -> ShimEnv:
    """A virtualenv at `dest` sharing `base_python`'s packages; with `work`, the shim installed."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(dest)
    python = os.path.join(dest, "bin", "python")
    out = subprocess.run(entry.command(python, "purelib"), capture_output=True, text=True)
    site_dir = workers.value_of(workers.answer(out, "purelib", failed=f"{python} could not say its purelib folder"),
                                "purelib")
    # Each of the base's site folders added as the base's own start-up adds it (site.addsitedir),
    # running its .pth files, not merely listed (a listed folder's .pth files never run): a base
    # whose site-packages holds .pth files (setuptools' distutils-precedence.pth, a coverage or
    # editable-install hook) started otherwise than this environment, and their counts did not
    # match seed by seed (SubWithTorchFunction -77..-140 instructions a call, nothing changed).
    with open(os.path.join(site_dir, "_overrides_base.pth"), "w", encoding="utf-8") as pth:
        pth.write("".join(f"import site; site.addsitedir({folder!r})\n"
                          for folder in base_site_packages(base_python)))
    if work is not None:
        with open(os.path.join(site_dir, SHIM_MODULE + ".py"), "w", encoding="utf-8") as module:
            module.write(shim_source(work))
        with open(os.path.join(site_dir, SHIM_HOOK_MODULE + ".py"), "w", encoding="utf-8") as hook:
            hook.write(_HOOK_SOURCE)
        with open(os.path.join(site_dir, "zz_overrides_shim.pth"), "w", encoding="utf-8") as pth:
            pth.write(f"import {SHIM_HOOK_MODULE}\n")
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


# The cases a shim on Tensor.__torch_function__ can reach, with their shimmed twins' makers.
# Tensor never calls __torch_function__, WithTorchFunction does not inherit it: their truth is 0.
REACHED = ("SubTensor", "SubWithTorchFunction")


def shim_twins(work: str) -> dict[str, type]:
    """Twins of SubTensor and SubWithTorchFunction whose base class's __torch_function__ is the
    shim: the same call path as with the shim installed on torch.Tensor, plus the shim."""
    import torch

    shim = load_shim(work)
    base = type("ShimmedTensor", (torch.Tensor,), {"__torch_function__": classmethod(shim._shim)})

    def defer(cls, func, types, args=(), kwargs=None):
        return super(twin_sub_with, cls).__torch_function__(func, types, args, kwargs or {})

    twin_sub_with = type("ShimmedSubWithTorchFunction", (base,), {"__torch_function__": classmethod(defer)})
    return {"SubTensor": type("ShimmedSubTensor", (base,), {}), "SubWithTorchFunction": twin_sub_with}


def shim_truth_ns(work: str, seconds: float = TRUTH_SECONDS) -> dict[str, float]:
    """The shim's cost per case in this process: each reached case timed side by side with its
    shimmed twin (round-robin, as bench.py times), as the median log ratio of neighbouring
    samples applied to the case's headline.

    Switching the shim on and off in rounds (the first version) was hopeless here: rounds
    apart in time saw different machine states, and single processes read SubTensor's shim
    cost anywhere from far below zero to far above it. Twins need no switching. What remains is
    layout luck: the twin is another class, its objects sit elsewhere, and one process's figure
    is off by that luck; the mean over many processes with different hash seeds
    (truth_across_processes) removes it (figures: benchmarks/history.md, 'Docstring figures').
    """
    import math

    from overrides.cases import seedcases
    from overrides.clock import stats
    from overrides.clock.timer import Target, TimerConfig, time_targets

    twins = shim_twins(work)
    targets = []
    for name in REACHED:
        for cls in (getattr(seedcases, name), twins[name]):
            targets.append(Target(f"{name}/{cls.__name__}", "torch.add(x, y)",
                                  lambda cls=cls: tuple(t.as_subclass(cls) for t in seedcases.plain_operands())))
    timed = {t.name.split("/")[0] + ("+" if t.name.split("/")[1].startswith("Shimmed") else ""): t.samples_ns
             for t in time_targets(targets, TimerConfig(min_time_s=seconds)).targets}
    truth = {"Tensor": 0.0, "WithTorchFunction": 0.0}
    for name in REACHED:
        plain, shimmed = timed[name], timed[name + "+"]
        logs = [math.log(b / a) for a, b in zip(plain, shimmed) if a > 0 and b > 0]
        truth[name] = stats.headline(plain) * math.expm1(stats.median(logs))
    return truth


@dataclasses.dataclass(frozen=True)
class Truth:
    """A shim's true cost per case: the mean over processes, and each process's figure."""

    work: str
    mean_ns: dict
    per_process_ns: tuple  # one {case: ns} per process

    def spread_ns(self, case: str) -> float:
        values = [p[case] for p in self.per_process_ns]
        return max(values) - min(values)


def truth_across_processes(work: str, processes: int = TRUTH_PROCESSES,
                           python: str = sys.executable, progress=None) -> Truth:
    """`shim_truth_ns` in fresh processes, each with its own hash seed (its own layout), averaged.

    One process carries its layout's luck; the mean over TRUTH_PROCESSES is as free of it as
    the A/B estimate it checks (figures: benchmarks/history.md, 'Docstring figures').
    """
    from overrides.clock.allocator import MALLOC_ENV

    from overrides import ROOT as root
    per_process = []
    for index in range(processes):
        if progress:
            progress(f"truth for shim {work!r}: process {index + 1}/{processes}")
        env = dict(os.environ, PYTHONPATH=root, PYTHONHASHSEED=str(7000 + index), **MALLOC_ENV)
        out = subprocess.run(entry.command(python, "shim-truth", work), capture_output=True, text=True,
                             env=env, cwd=root)
        per_process.append(workers.answer(out, failed=f"the truth of shim {work!r} could not be measured"))
    names = list(per_process[0])
    mean = {name: sum(p[name] for p in per_process) / len(per_process) for name in names}
    return Truth(work, mean, tuple(per_process))


def serve_truth(channel, work: str) -> None:
    """`shim_truth_ns(work)` in this process (entry.py's `shim-truth` role)."""
    channel.say(shim_truth_ns(work))


if __name__ == "__main__":  # python -m overrides.ab.shimenv DEST WORK: make one by hand
    env = make_shim_env(sys.executable, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    print(env.python)
