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

Each request and reply is a record below, written by its `to_dict` and read by its `from_dict`
on the other side of the pipe (the parent: ab/pairs.py and ab/paired.py).
"""

from __future__ import annotations

import dataclasses
import os

from overrides import variables

# The requests' commands.
PREPARE = "prepare"
SAMPLE = "sample"
RESULT = "result"
EXIT = "exit"


@dataclasses.dataclass(frozen=True)
class Request:
    """A request: its `cmd`, and what the command takes (prepare: `targets` and `calls`; sample:
    `target`)."""

    cmd: str
    targets: tuple[tuple[str, str], ...] = ()  # prepare: the [case, op] names to build
    calls: tuple[int | None, ...] = ()  # prepare: calls a sample of each target, None to calibrate
    target: int | None = None  # sample: the index of the target to time

    def to_dict(self) -> dict:
        if self.cmd == PREPARE:
            return {"cmd": self.cmd, "targets": [list(t) for t in self.targets], "calls": list(self.calls)}
        if self.cmd == SAMPLE:
            return {"cmd": self.cmd, "target": self.target}
        return {"cmd": self.cmd}

    @classmethod
    def from_dict(cls, data: dict) -> "Request":
        return cls(data["cmd"], tuple(tuple(t) for t in data.get("targets", ())), tuple(data.get("calls", ())),
                   data.get("target"))


@dataclasses.dataclass(frozen=True)
class Ready:
    """The first line: the worker has imported torch, in this environment (environment.Environment)."""

    environment: object

    def to_dict(self) -> dict:
        return {"ready": True, "environment": self.environment.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> "Ready":
        from overrides.environment import Environment

        return cls(Environment.from_dict(data["environment"]))


@dataclasses.dataclass(frozen=True)
class Prepared:
    """The reply to prepare: each target's calls a sample and its error (None where it is
    timed), and the files of yours the worker ran ({spec: file}, usercases.module_files)."""

    calls: tuple[int | None, ...]
    errors: tuple[str | None, ...]
    modules: dict

    def to_dict(self) -> dict:
        return {"calls": list(self.calls), "errors": list(self.errors), "modules": self.modules}

    @classmethod
    def from_dict(cls, data: dict) -> "Prepared":
        return cls(tuple(data["calls"]), tuple(data["errors"]), dict(data.get("modules") or {}))


@dataclasses.dataclass(frozen=True)
class Sampled:
    """The reply to sample: the target's error, None where it was timed."""

    error: str | None = None

    def to_dict(self) -> dict:
        return {"error": self.error} if self.error else {"ok": True}

    @classmethod
    def from_dict(cls, data: dict) -> "Sampled":
        return cls(data.get("error"))


@dataclasses.dataclass(frozen=True)
class TargetSamples:
    """One target's part of the reply to result: its samples (ns a call, the loop's cost taken
    off) and that cost, its calls a sample, its error."""

    samples_ns: tuple[float, ...]
    loop_overhead_ns: float
    calls_per_sample: int | None
    error: str | None

    def to_dict(self) -> dict:
        return {"samples_ns": list(self.samples_ns), "loop_overhead_ns": self.loop_overhead_ns,
                "calls_per_sample": self.calls_per_sample, "error": self.error}

    @classmethod
    def from_dict(cls, data: dict) -> "TargetSamples":
        return cls(tuple(data["samples_ns"]), data["loop_overhead_ns"], data.get("calls_per_sample"),
                   data.get("error"))


@dataclasses.dataclass(frozen=True)
class Result:
    """The reply to result: every target's samples since the last one, in the prepared order."""

    targets: tuple[TargetSamples, ...]

    def to_dict(self) -> dict:
        return {"targets": [target.to_dict() for target in self.targets]}

    @classmethod
    def from_dict(cls, data: dict) -> "Result":
        return cls(tuple(TargetSamples.from_dict(target) for target in data["targets"]))


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
    reply(Ready(environment.collect(threads)).to_dict())
    slots: list[_Slot] = []
    for said in channel.requests():
        request = Request.from_dict(said)
        if request.cmd == PREPARE:
            slots = []
            for (case_name, op_name), calls in zip(request.targets, request.calls):
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

            reply(Prepared(tuple(s.calls for s in slots), tuple(s.error for s in slots),
                           module_files([case for case, _ in request.targets])).to_dict())
        elif request.cmd == SAMPLE:
            slot = slots[request.target]
            if slot.error is None:
                slot.sample()
            reply(Sampled(slot.error).to_dict())
        elif request.cmd == RESULT:
            out = []
            for slot in slots:
                timed = slot.result()
                out.append(TargetSamples(tuple(timed.samples_ns), timed.loop_overhead_ns, timed.calls_per_sample,
                                         timed.error))
                slot.raw_ns, slot.empty_ns = [], []
            reply(Result(tuple(out)).to_dict())
        elif request.cmd == EXIT:
            return
        else:
            reply({"fatal": f"unknown command {request.cmd!r}"})
