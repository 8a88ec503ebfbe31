"""The paired comparison (`bench.py --compare`, `report.sh`): two builds measured side by side in
worker pairs, judged case by case.

- `paired.py`: `run_ab`, and why each piece of the method is there;
- `config.py`: `ABConfig` and the flags that set it;
- `pairs.py`: the parent's handles on its worker processes;
- `worker.py`: the timing worker, `overrides/entry.py`'s `time` role in each side's interpreter;
- `estimates.py`: what the pairs say, pooled into verdicts, and when to stop;
- `countfirst.py`: the instruction counts made before the pairs;
- `named.py`: what changed in the cases that moved, by name (their Python calls, counted);
- `shimenv.py`: known-cost "branch" environments, for validating the verdicts: a fixture of
  tests/ and benchmarks/ alike, kept here since both import it and its truth is measured in a
  fresh process as entry.py's `shim-truth` role (the tool's processes start only through
  entry.py, whose roles are this package's modules).
"""
