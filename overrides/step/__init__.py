"""Your training step as a case (`bench.py --step pkg.module:factory`): timed whole against its
plain twin, op by op through your subclass's hooks, and the two set side by side.

A subclass author's question is what the subclass costs in a real step, not in one op. The
pieces are a library as much as a command (a later wing times compiled steps with them):
`factory.build_steps`, `timing.time_steps`, `hooks.capture_step`, `optable.price_step`,
`closure.close`; `command.py` is bench.py's side of it.
"""
