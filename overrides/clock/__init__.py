"""Timing by the clock: the Timer core and its statistics, and the pinned heap and layout of the
processes that time.

- `timer.py`: the one Timer core;
- `loops.py`: the generated loops it times, and the hot loops pyspybench and Callgrind run;
- `stats.py`: the headline statistic, intervals, trust flags;
- `allocator.py`: glibc's heap pinned from process start;
- `layout.py`: `bench.py` re-executed with its memory layout pinned.

What the clock's figures become (results records, comparisons) sits above, at the package's root.
"""
