"""Counting instead of timing: instructions per call (Callgrind) and Python calls per call, and
where they went.

- `callgrind.py`: what is counted, by the worker in each valgrind process, and the counts read back;
- `valgrind.py`: that process: its command line and environment, switched on, heard from;
- `forkserver.py`: one such process per build and seed imports torch once and forks a child per
  job; `caseloops.py`: what a child counts of a job of cases, and its profiles read back;
- `kept.py`: counts kept by content and reused while nothing they depend on has changed;
- `statfinder.py`: a counting process's imports, found by stat so that files coming and going
  beside the code do not move the counts (loaded by its file path, it imports nothing);
- `isolated.py`: each module of yours counted in valgrind processes of its own;
- `records.py`: the counts as records and their JSON (inside results files);
- `dumps.py`: reading one Callgrind dump;
- `judge.py`: verdicts on count deltas between builds;
- `rounds.py`: which hash seeds, counted in rounds until the counts decide;
- `calltree.py`: where the instructions went, by call path;
- `pycalls.py`: where the Python calls went, counted in each side's interpreter;
- `pyhook.py`: the Python-call counter in that interpreter (a profiler hook and a bytecode
  counter);
- `callsites.py`: where a counted call is made: the caller's lines, base against branch;
- `attribution.py`: whose work the interpreter's instruction change is, when one Python
  function's is the only Python change.
"""
