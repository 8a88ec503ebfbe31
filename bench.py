"""Time torch calls per case and show the __torch_function__ overhead; see README.md."""

import sys

from overrides.clock.layout import reexec_pinned

if __name__ == "__main__":
    reexec_pinned()  # before torch is imported: see overrides/clock/layout.py
    import contextlib
    import io

    from overrides.counts.callgrind import head_start_for_command_line

    # --instructions: valgrind imports torch for 20+ s; let it start while we import torch too.
    # The guess's own parser must stay silent: bad arguments are reported once, by the real one.
    with contextlib.redirect_stderr(io.StringIO()):
        head_start_for_command_line(sys.argv[1:], sys.executable)
    from overrides.cli import main

    sys.exit(main())
