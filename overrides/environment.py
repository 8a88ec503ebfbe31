"""What was measured on: the interpreter, the torch build and the machine.

Recorded with every result, because a number without the build and machine it came from
cannot be compared with anything.
"""

from __future__ import annotations

import os
import platform
import socket
import sys

from overrides.clock.layout import randomisation_off
from overrides.progress import counted


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def collect(threads: int) -> dict:
    """The environment record written into every results file (imports torch: the parent of
    `--compare` never calls this, its workers do)."""
    import torch

    return {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "torch_version": torch.__version__,
        "torch_git_hash": getattr(torch.version, "git_version", "unknown"),
        "torch_debug_build": bool(getattr(torch.version, "debug", False)),
        "torch_path": os.path.dirname(torch.__file__),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": _cpu_count(),
        "threads": threads,
        "hostname": socket.gethostname(),
        # see overrides/clock/allocator.py: the heap's start-up state moves plain calls by ~4%
        "malloc_top_pad": os.environ.get("MALLOC_TOP_PAD_"),
        # see overrides/clock/layout.py: bench.py pins these unless --random-layout
        "aslr_off": randomisation_off(),
        "python_hash_seed": os.environ.get("PYTHONHASHSEED"),
        # the GPU a CUDA case ran on; asked only where CUDA is already in use (it starts it)
        "cuda_device": (torch.cuda.get_device_name() if torch.cuda.is_available() and torch.cuda.is_initialized()
                        else None),
    }


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def one_line(env: dict) -> str:
    """The environment as the one line printed under every table."""
    return (
        f"torch {env.get('torch_version')} ({str(env.get('torch_git_hash'))[:10]}"
        f"{', debug build' if env.get('torch_debug_build') else ''}), "
        f"Python {env.get('python')}, {env.get('cpu')} ({env.get('cpu_count')} CPUs), "
        f"{counted(env.get('threads'), 'torch thread')}"
        + (f", {env['cuda_device']}" if env.get("cuda_device") else "")
    )
