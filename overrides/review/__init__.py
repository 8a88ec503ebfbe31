"""A report for a PR: `scripts/record.sh` (one build into runs/LABEL/) and `scripts/report.sh` (two builds into a ZIP)."""
