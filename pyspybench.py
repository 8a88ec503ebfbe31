"""Run one case's hot loop for a profiler: py-spy record -o subtensor.svg --native -- python pyspybench.py SubTensor"""

import sys

if __name__ == "__main__":
    # No heap pinning re-exec here (bench.py has one): py-spy follows the process it started,
    # and an exec would swap the interpreter under it. Flamegraph shares do not need it.
    from overrides.hotloop import main

    sys.exit(main())
