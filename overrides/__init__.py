"""Measure what `__torch_function__` dispatch costs per call, and show a reviewer where it went.

The package is in wings, one folder each (docs/layout.md draws them and the direction of the
imports between them; tests/test_imports.py checks it):
- `cases/`: what is called (operands and ops) and the registry of named cases;
- `clock/`: the Timer core, its statistics, the pinned heap and layout;
- `builds/`: the builds compared: interpreters, kept copies, library views, one start-up path;
- `flame/`: flamegraphs with py-spy, and the SVGs this tool draws;
- `counts/`: instruction counts (Callgrind) and Python calls, and where they went;
- `ab/`: the paired comparison of two builds;
- `review/`: record.sh and report.sh;
- `history/`: `bench.py --history`, the counts across many builds.
At the root, the basics every wing may use (`errors`, `files`, `progress`, `children`,
`argtypes`, `verdicts`: the one verdict rule, `tables`, `figures`), the records (`results`: the
versioned JSON; `case_comparison`, `environment`) and what makes and prints them (`single_run`,
`run_report`, `run_notes`, `comparison_report`, `budget`, `device_report`), and `cli`,
bench.py's command line.
"""

import os

__version__ = "0.1.0"
# This checkout: bench.py, pyspybench.py and the folder holding this package (what worker
# processes put first on PYTHONPATH).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
