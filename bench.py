"""Time torch calls per case and show the __torch_function__ overhead; see README.md."""

import sys

from overrides.allocator import reexec_with_pinned_heap

if __name__ == "__main__":
    reexec_with_pinned_heap()  # before torch is imported: see overrides/allocator.py
    from overrides.cli import main

    sys.exit(main())
