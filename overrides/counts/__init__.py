"""Counting instead of timing: instructions per call (Callgrind) and Python calls per call, and
where they went.

- `callgrind.py`: what is counted, by the worker in each valgrind process, and the counts read back;
- `valgrind.py`: that process: its command line and environment, switched on, heard from;
- `records.py`: the counts as records and their JSON (inside results files);
- `dumps.py`: reading one Callgrind dump;
- `judge.py`: verdicts on count deltas between builds;
- `rounds.py`: which hash seeds, counted in rounds until the counts decide;
- `calltree.py`: where the instructions went, by call path;
- `pycalls.py`: where the Python calls went, counted in each side's interpreter;
- `attribution.py`: whose work the interpreter's instruction change is, when one Python
  function's is the only Python change.
"""
