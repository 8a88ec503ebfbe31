"""The builds compared: which interpreter and torch each side runs, and where its processes see
their files.

- `interpreters.py`: an interpreter (and a kept torch) asked for its real path and torch;
- `keep.py`: the copy of a recorded build that record.sh keeps for a paired report;
- `placement.py`: each side's view of its shared libraries, one file for identical ones;
- `samepath.py`, `samepath_enter.py`: every side started from one path, in a private mount
  namespace (`samepath_enter.py` runs as a script and imports nothing of the package);
- `primed.py`: what a side's bytecode cache was last primed with, and whether it still stands;
- `trash.py`: folders the tool no longer needs (the views), removed by a detached process after
  it exits.
"""
