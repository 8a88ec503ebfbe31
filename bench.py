"""Time torch calls per case and show the __torch_function__ overhead; see README.md."""

import sys

from overrides.cli import main

if __name__ == "__main__":
    sys.exit(main())
