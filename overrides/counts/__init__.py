"""Counting instead of timing: instructions per call (Callgrind) and Python calls per call, and where they went."""
