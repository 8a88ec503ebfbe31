"""Measure what `__torch_function__` dispatch costs per call, and show a reviewer where it went.

Modules, one concern each:
- `cases`: what is called (operands and ops) and the registry of named cases.
- `casenames`: every case's name and description, readable without torch.
- `timer`: the one Timer core everything that times uses.
- `stats`: statistics over per-call samples (headline figure, spread, intervals).
- `results`: the versioned JSON results format and its records.
- `environment`: what the machine and the torch build are.
- `report`: tables for people (table, legacy, markdown).
- `cli`: `bench.py`'s argument parsing, a thin layer over the above.
"""

import os

__version__ = "0.1.0"
# This checkout: bench.py, pyspybench.py and the folder holding this package (what worker
# processes put first on PYTHONPATH).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
