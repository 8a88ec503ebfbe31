"""Time torch calls per case and show the __torch_function__ overhead; see README.md."""

import sys

from overrides.clock.layout import reexec_pinned

if __name__ == "__main__":
    reexec_pinned()  # before torch is imported: see overrides/clock/layout.py
    from overrides.cli import instruction_head_start, main
    from overrides.counts.callgrind import head_start

    # --instructions: valgrind imports torch for 20+ s; let it start while we import torch too.
    planned = instruction_head_start(sys.argv[1:])
    if planned:
        head_start(sys.executable, *planned)

    sys.exit(main())
