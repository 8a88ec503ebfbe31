"""Measure what `__torch_function__` dispatch costs per call, and show a reviewer where it went.

The package is in layers, lowest first: a module imports from its own layer and those below,
never from above (docs/layout.md draws them; tests/test_imports.py checks the imports, and
tests/test_package_docs.py that this list names every layer and every module at the root):
- basics, at the root: what every wing may use: `errors` (the one usage error), `files`
  (whole-or-nothing files), `progress`, `children` (child processes Ctrl-C stops), `entry` (the
  one way a process of the tool's own starts, and its protocol), `workers` (the parent's side of
  that protocol: one client, and a process that said why told from one that died), `argtypes`, `modes` (which
  flags combine), `variables` (the tool's environment variables), `verdicts` (the one verdict
  rule), `tables` (every table's layout), `figures` (how a figure is written), `sides` (base and
  branch, paired);
- `cases/`: what is called (operands and ops) and the registry of named cases;
- `clock/`: the Timer core, its statistics, the pinned heap and layout; beside it `builds/`: the
  builds compared: interpreters, kept copies, library views, one start-up path;
- `flame/`: flamegraphs with py-spy, and the SVGs this tool draws;
- `counts/`: instruction counts (Callgrind) and Python calls, and where they went;
- records, at the root: `results` (result records, the versioned JSON), `case_comparison` (a
  comparison's deltas and verdicts), `comparison_settings` and `run_settings` (how a comparison,
  and one run, were made), `environment` (what a result was measured on);
- workflows, at the root: `single_run` (cases into a results record), `run_report` and
  `run_notes` (one run's tables and notes), `comparison_report` (a comparison's), `budget` (the
  overhead budget for CI), `device_report` (a run on CUDA); beside them `compiled/`: eager
  against compiled (`bench.py --compiled`);
- `step/`: your training step (`bench.py --step`);
- `ab/`: the paired comparison of two builds (`bench.py --compare`);
- `review/`: record.sh and report.sh;
- `history/`: `bench.py --history`, the counts across many builds;
- command, at the root: `cli`, bench.py's command line.
"""

import os

__version__ = "0.1.0"
# This checkout: bench.py, pyspybench.py and the folder holding this package (what worker
# processes put first on PYTHONPATH).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
