"""What is called: the cases (the operands of each call) and the ops (the statements timed).

- `casenames.py`: every built-in case's name and description, without torch;
- `ops.py`: the ops, and whether an op applies to a case;
- `seedcases.py`: the four seed cases of PyTorch's original benchmark, and how cases are built;
- `catalog.py`: the rest of the catalog (modes, dispatch subclasses, mixed and many operands);
- `usercases.py`: a user's own case, `pkg.module:factory`;
- `twins.py`: its plain twin, `pkg.module:factory@plain`, the baseline of its overhead;
- `registry.py`: every tool's one way from a name to a case.

This wing imports nothing of the package but its basics (`overrides/errors.py`).
"""
