"""Timing by the clock: the Timer core, its statistics, and the pinned heap and layout of the processes that time."""
