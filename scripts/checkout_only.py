"""The build backend pyproject.toml names: `pip install .` stops here, with the reason.

This tool runs from its checkout (`python bench.py`, `scripts/report.sh`): its package is named
`overrides`, as PyPI's `overrides` package is (a dependency of jupyter_server and others), so an
install would replace that one in the user's environment, and the commands would still run from
here. So every build hook says so in one line and builds nothing.
"""

import sys

MESSAGE = ("torch-function-overhead is not installed with pip: it runs from this checkout "
           "(make bench, or python bench.py inside the environment whose torch you measure; "
           "see docs/pythons.md, 'Setting up'), and installing its package would replace PyPI's "
           "'overrides' package")


def _refuse(*args, **kwargs):
    """One line on stderr, which pip shows as the hook's output, and no traceback."""
    print(f"error: {MESSAGE}", file=sys.stderr)
    raise SystemExit(2)


get_requires_for_build_wheel = get_requires_for_build_sdist = get_requires_for_build_editable = \
    lambda config_settings=None: []
build_wheel = build_sdist = build_editable = _refuse
prepare_metadata_for_build_wheel = prepare_metadata_for_build_editable = _refuse
