"""A timing worker: one persistent process per environment, driven by the A/B parent over a pipe.

Started as the `time` role of `overrides/entry.py` with this checkout on PYTHONPATH, so any
interpreter that has torch can be measured without installing anything into it. It speaks
entry.py's protocol: one request on stdin, one reply on stdout, each a JSON line.

Requests:
  {"cmd": "prepare", "targets": [[case, op], ...], "calls": [int|null, ...]}
      build operands, warm up, calibrate (or take the given calls); reply {"calls": [...],
      "errors": [...]}
  {"cmd": "sample", "target": i}   one timed sample; reply {"ok": true} or {"error": "..."}
  {"cmd": "result"}                reply {"targets": [{"samples_ns", "loop_overhead_ns",
                                   "calls_per_sample", "error"}, ...]} and forget the samples
  {"cmd": "exit"}
Every reply may instead be {"fatal": "..."} if the worker cannot go on (entry.py says it).
The first line a worker writes is {"ready": true, "environment": {...}}.
"""

from __future__ import annotations

import os

from overrides import variables


def serve(channel) -> None:
    """Answer requests until told to exit (`channel`: entry.Channel)."""
    import gc

    import torch

    from overrides import environment
    from overrides.cases.registry import resolve_cases
    from overrides.cases.ops import NOT_APPLICABLE_MARK, get_op, not_applicable_reason
    from overrides.single_run import target_for
    from overrides.clock.timer import TimerConfig, _Slot

    reply = channel.say
    threads = int(os.environ.get(variables.WORKER_THREADS, "1"))
    torch.set_num_threads(threads)
    reply({"ready": True, "environment": environment.collect(threads).to_dict()})
    slots: list[_Slot] = []
    for request in channel.requests():
        cmd = request["cmd"]
        if cmd == "prepare":
            slots = []
            for (case_name, op_name), calls in zip(request["targets"], request["calls"]):
                (case,) = resolve_cases([case_name])
                op = get_op(op_name)
                slot = _Slot(target_for(case, op))  # the case's own statement and mode
                reason = not_applicable_reason(case, op)
                if reason:  # untimed, said as n/a (a statement a tensor-like has no method for)
                    slot.error = f"{NOT_APPLICABLE_MARK}{reason}"
                else:
                    slot.prepare(TimerConfig(calls_per_sample=calls, device_figures=False))  # judged on the host's
                slots.append(slot)
            gc.collect()
            gc.disable()  # off for the rest of the worker's life: it only times
            from overrides.cases.usercases import module_files

            reply({"calls": [s.calls for s in slots], "errors": [s.error for s in slots],
                   "modules": module_files([case for case, _ in request["targets"]])})
        elif cmd == "sample":
            slot = slots[request["target"]]
            if slot.error is None:
                slot.sample()
            reply({"error": slot.error} if slot.error else {"ok": True})
        elif cmd == "result":
            out = []
            for slot in slots:
                timed = slot.result()
                out.append({"samples_ns": list(timed.samples_ns),
                            "loop_overhead_ns": timed.loop_overhead_ns,
                            "calls_per_sample": timed.calls_per_sample, "error": timed.error})
                slot.raw_ns, slot.empty_ns = [], []
            reply({"targets": out})
        elif cmd == "exit":
            return
        else:
            reply({"fatal": f"unknown command {cmd!r}"})
