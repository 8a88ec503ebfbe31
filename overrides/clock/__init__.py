"""Timing by the clock: the Timer core and its statistics, and the pinned heap and layout of the
processes that time.

- `timer.py`: the one Timer core;
- `loops.py`: the generated loops it times, and the hot loops pyspybench and Callgrind run;
- `cuda.py`: the Timer core's loops on a CUDA device: the host's cost, the synchronized cost and
  the GPU's own, each per call;
- `stats.py`: the headline statistic, intervals, trust flags;
- `speed.py`: was the run slowed as a whole: a reference loop timed beside the cases, against
  this machine's earlier runs;
- `allocator.py`: glibc's heap pinned from process start;
- `layout.py`: `bench.py` re-executed with its memory layout pinned.

What the clock's figures become (results records, comparisons) sits above, at the package's root.
"""
