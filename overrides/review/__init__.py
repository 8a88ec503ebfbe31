"""A report for a PR: `scripts/record.sh` (one build into runs/LABEL/) and `scripts/report.sh`
(two builds compared into a ZIP).

- `record.py`, `runs.py`: record.sh; a recorded run's folder read back, listed, cleaned;
- `manifest.py`: a recorded run's record.json as a frozen record (read by attribute, never changed);
- `pr_report.py`: report.sh, running the pieces below in order;
- `sides.py`: what BASE and BRANCH are (a label or an interpreter);
- `measuring.py`: measuring and judging, into one `Evidence`;
- `sections.py`, `time_sections.py`, `markdown.py`: presenting an Evidence as report.md;
- `time_analysis.py`: a case's differential worked out once, for `time_sections.py` to draw;
- `count_tables.py`: the counts' tables for people (report.md, and the history's largest step);
- `pack.py`: the figures (SVGs and their PNGs), differential.json and the ZIP;
- `step_report.py`: `report.sh --step`: each build's `bench.py --step`, compared, into report.md
  and the ZIP.
"""
