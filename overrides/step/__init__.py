"""Your training step as a case (`bench.py --step pkg.module:factory`): timed whole against its
plain twin, op by op through your subclass's hooks, and the two set side by side.

A subclass author's question is what the subclass costs in a real step, not in one op. The
pieces are a library as much as a command (a later wing times compiled steps with them):
`factory.build_steps`, `timing.time_steps`, `hooks.capture_step`, `optable.price_step`,
`closure.close`; `command.py` is bench.py's side of it.

- `factory.py`: your factory found and asked for both steps (`plain=False`, `plain=True`,
  `batch=`); `drift.py`: whether a step drifts (live tensors kept, grads never zeroed);
- `timing.py`: both steps timed in one process, in alternation: the overhead and its interval;
- `hooks.py`: one step under a profile hook on every `__torch_function__` call and a dispatch
  mode on every aten op a subclass dispatches;
- `optable.py`: each op timed on the step's operands as yours and as plain tensors;
  `kernels.py`: what a wrapper's op runs inside its dispatch, priced apart from dispatch;
  `sequence.py`: the step's calls timed in its own order, back to back;
- `closure.py`: the op table's sum against the step's overhead; `output.py`: the text and JSON;
  `stepfile.py`: the JSON's records, which its reader (report.sh) reads back; `command.py`:
  `bench.py --step`;
- `compiling.py`, `compiled_output.py`, `stays.py`: `--step --compiled`, and what stays named;
- `device.py`: `--step --device cuda`;
- `comparing.py`, `compare_output.py`: `--compare BASE BRANCH --step`;
- `counting.py`, `count_report.py`: `--step --instructions`;
- `budget.py`: a step's budget (`--write-budget` / `--check-budget FILE --step`);
- `flameloop.py`: `pyspybench.py --step`: your step as the hot loop py-spy records.
"""
