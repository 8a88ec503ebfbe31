"""The subclasses users run, through the tool and by hand, side by side: DTensor (a fake process
group of 4 ranks), torchao's int8 weight-only Linear, fastai's TensorImage, NestedTensor (jagged)
and MaskedTensor, each through `--cases`, `--step`, `--step --compiled` and an A/A
`--compare A A --step`, from a folder of the user's own.

By hand means none of the tool's code: a small program (BY_HAND below) run in the library's
interpreter alternates your op (or step) with its plain counterpart in batches, reads
`time.perf_counter_ns` around each batch, and takes the 2nd percentile a call. For ops it times
yours alone (a per-call cost is one figure, whatever twin a tool picks); for steps, your step
and its plain twin (the factory's `plain=True`), and their difference. Each tool figure is set
beside it as a ratio of medians over `--repeats` turns, the tool and by hand alternating
(one run of each is a draw on this machine: a MaskedTensor add read 509 us by the tool and 230 us
by hand in one turn, 126 and 115 us in the next).

Libraries that pin another torch, or are not in this project's environment (torchao, fastai),
run in an interpreter of their own (`--python`, a virtualenv under /tmp: never this project's
requirements):

    python3 -m venv /tmp/libenv && /tmp/libenv/bin/pip install torch==2.13.0 torchvision==0.28.0 \\
        torchao==0.18.0 fastai
    python benchmarks/shipped_libraries.py --python /tmp/libenv/bin/python [--libraries dtensor torchao]
        [--skip compiled aa] [--log FILE]

One line of JSON per check is appended to `--log` as it finishes; the table is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench.py")
USERLIB = os.path.join(ROOT, "benchmarks", "userlib")

TORCHAO = '''"""A small MLP whose two hidden Linear weights are torchao int8 weight-only; the rest trains."""
import torch
import torch.nn as nn
from torchao.quantization import Int8WeightOnlyConfig, quantize_


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def step(plain=False, batch=32):
    """3-layer MLP, the hidden weights torchao Int8WeightOnly (frozen), SGD on the rest"""
    model = _model()
    if not plain:
        quantize_(model[0], Int8WeightOnlyConfig())
        quantize_(model[2], Int8WeightOnlyConfig())
    for layer in (model[0], model[2]):
        layer.weight.requires_grad_(False)
    x, target = torch.randn(batch, 256), torch.randn(batch, 10)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)

    def run():
        opt.zero_grad()
        loss = (model(x) - target).square().mean()
        loss.backward()
        opt.step()
        return loss

    return run


def pair():
    layer = nn.Linear(256, 256)
    quantize_(layer, Int8WeightOnlyConfig())
    torch.manual_seed(0)
    return torch.randn(32, 256), layer.weight
'''

FASTAI = '''"""fastai's TensorImage in a small CNN's training step."""
import torch
import torch.nn as nn
from fastai.torch_core import TensorImage


def step(plain=False, batch=16):
    """a 2-conv CNN on 32x32 images as fastai's TensorImage (labels plain), SGD"""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    x = x if plain else TensorImage(x)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def run():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return run


def pair():
    torch.manual_seed(0)
    return TensorImage(torch.randn(16, 3, 32, 32)), TensorImage(torch.randn(16, 3, 32, 32))
'''


# library -> (module name, its source (None: benchmarks/userlib's), the op timed per call, what it needs)
LIBRARIES = {
    "dtensor": ("dtensors", None, "x.t()", "torch.distributed"),
    "torchao": ("torchao_mlp", TORCHAO, "torch.nn.functional.linear(x, y)", "torchao"),
    "fastai": ("fastai_cnn", FASTAI, "x + y", "fastai"),
    "nested": ("jagged", None, "x + y", "torch.nested"),
    "masked": ("masked", None, "x + y", "torch.masked"),
}
STEP_FACTORY = {"dtensor": "mlp"}  # the rest: step

BY_HAND = r'''
import importlib, json, sys, time, warnings
warnings.filterwarnings("ignore")
import torch
torch.set_num_threads(1)
module, kind, name, extra, seconds = sys.argv[1:6]
mod = importlib.import_module(module)

def batched(call, n):
    def run():
        start = time.perf_counter_ns()
        for _ in range(n):
            call()
        return (time.perf_counter_ns() - start) / n
    return run

if kind == "op":
    x, y = getattr(mod, name)()
    op = eval("lambda x, y: " + extra, {"torch": torch})
    calls = {"yours": lambda: op(x, y)}
else:
    factory = getattr(mod, name)
    calls = {"plain": factory(plain=True), "yours": factory()}
for call in calls.values():
    for _ in range(30):
        call()
sizes = {}
for key, call in calls.items():
    once = min(batched(call, 1)() for _ in range(20))
    sizes[key] = max(1, int(1e6 / max(once, 1.0)))
runs = {key: batched(call, sizes[key]) for key, call in calls.items()}
samples = {key: [] for key in calls}
order = list(calls)
end = time.perf_counter() + float(seconds)
turn = 0
while time.perf_counter() < end or turn < 20:
    for key in (order if turn % 2 == 0 else order[::-1]):
        samples[key].append(runs[key]())
    turn += 1
low = {key: sorted(values)[len(values) // 50] for key, values in samples.items()}
print(json.dumps(low))
'''


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(python: str, folder: str, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([python, *args], cwd=folder, capture_output=True, text=True, timeout=timeout)


def by_hand(python: str, folder: str, kind: str, module: str, name: str, extra: str = "", seconds: float = 6.0) -> dict:
    out = run(python, folder, "-c", BY_HAND, module, kind, name, extra or "-", str(seconds))
    if out.returncode:
        raise RuntimeError(f"by hand, {module}:{name}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def tool_json(python: str, folder: str, *args: str) -> tuple[dict | None, subprocess.CompletedProcess]:
    path = os.path.join(folder, f"tool-{time.monotonic_ns()}.json")
    out = run(python, folder, BENCH, *args, "--json", path, "-q")
    data = None
    if os.path.exists(path):
        with open(path) as src:
            data = json.load(src)
        os.remove(path)
    return data, out


def ratio(tool: float, hand: float) -> str:
    return f"{tool / hand:.2f}" if hand else "-"


def check_library(library: str, python: str, folder: str, skip: set, log, repeats: int) -> list[dict]:
    module, _, op, _ = LIBRARIES[library]
    factory = STEP_FACTORY.get(library, "step")
    rows = []

    def record(check: str, tool: str, hand: str, verdict: str, **more) -> None:
        row = {"library": library, "check": check, "tool": tool, "by_hand": hand, "verdict": verdict,
               "at": time.strftime("%Y-%m-%dT%H:%M:%S"), "load": os.getloadavg()[0], **more}
        rows.append(row)
        log.write(json.dumps(row) + "\n")
        log.flush()
        say(f"{library} {check}: tool {tool}, by hand {hand}: {verdict}")

    if "cases" not in skip:
        say(f"{library}: --cases {module}:pair --op {op!r}, and by hand, {repeats} turns")
        tools, hands, overheads, exits = [], [], [], []
        for _ in range(repeats):  # alternating: the machine's slow spells land on both alike
            data, out = tool_json(python, folder, "--cases", f"{module}:pair", "--op", op)
            exits.append(out.returncode)
            mine = next((r for r in (data or {}).get("results", ()) if r["case"] == f"{module}:pair"), None)
            if mine and mine.get("per_call_ns"):
                tools.append(mine["per_call_ns"])
                overheads.append(mine.get("overhead_ns") or 0.0)
            hands.append(by_hand(python, folder, "op", module, "pair", op)["yours"])
        hand = statistics.median(hands)
        if tools:
            tool = statistics.median(tools)
            within = abs(tool / hand - 1) <= 0.2
            record(f"per call, {op}", f"{tool:,.0f} ns (overhead {statistics.median(overheads):+,.0f}; "
                   f"{min(tools):,.0f}-{max(tools):,.0f})", f"{hand:,.0f} ns ({min(hands):,.0f}-{max(hands):,.0f})",
                   f"{ratio(tool, hand)}x {'within' if within else 'OUTSIDE'} 20%", exit=exits, turns=repeats)
        else:
            record(f"per call, {op}", "n/a", f"{hand:,.0f} ns", f"tool gave none (exits {exits})")
    if "step" not in skip:
        say(f"{library}: --step {module}:{factory}, and by hand, {repeats} turns")
        tools, shares, hands, hand_shares, explained, exits = [], [], [], [], [], []
        for _ in range(repeats):
            data, out = tool_json(python, folder, "--step", f"{module}:{factory}")
            exits.append(out.returncode)
            if data and data.get("timings"):
                timing = data["timings"][0]
                tools.append(timing["overhead_ns"])
                shares.append(timing["share"])
                if (data.get("closure") or {}).get("explained") is not None:
                    explained.append(data["closure"]["explained"])
            hand = by_hand(python, folder, "step", module, factory)
            hands.append(hand["yours"] - hand["plain"])
            hand_shares.append(hands[-1] / hand["plain"])
        hand_overhead = statistics.median(hands)
        if tools:
            overhead = statistics.median(tools)
            within = abs(overhead / hand_overhead - 1) <= 0.2 if hand_overhead else False
            record("step overhead", f"{overhead:+,.0f} ns ({statistics.median(shares):+.1%}; "
                   f"{min(tools):+,.0f}..{max(tools):+,.0f})",
                   f"{hand_overhead:+,.0f} ns ({statistics.median(hand_shares):+.1%}; {min(hands):+,.0f}..{max(hands):+,.0f})",
                   f"{ratio(overhead, hand_overhead)}x {'within' if within else 'OUTSIDE'} 20%", exit=exits,
                   turns=repeats)
            if explained:
                record("ops explain", f"{statistics.median(explained):.0%} ({min(explained):.0%}-{max(explained):.0%})",
                       "-", "within 60-140%" if 0.6 <= statistics.median(explained) <= 1.4 else "OUTSIDE 60-140%")
        else:
            record("step overhead", "n/a", f"{hand_overhead:+,.0f} ns", f"tool gave none (exits {exits})")
    if "compiled" not in skip:
        say(f"{library}: --step {module}:{factory} --compiled --compile-backend aot_eager")
        out = run(python, folder, BENCH, "--step", f"{module}:{factory}", "--compiled", "--compile-backend",
                  "aot_eager", "--min-time", "1", "-q")
        said = [line for line in out.stdout.splitlines() if line.startswith(("compile removed", "what compile did"))]
        record("compiled (aot_eager)", f"exit {out.returncode}", "-", "; ".join(said)[:300] or
               (out.stderr.strip().splitlines() or ["no output"])[-1][:200])
    if "aa" not in skip:
        say(f"{library}: --compare {module}:{factory} {module}:{factory} --step")
        data, out = tool_json(python, folder, "--compare", f"{module}:{factory}", f"{module}:{factory}", "--step")
        change = (data or {}).get("change") or {}
        record("A/A --compare --step", f"{change.get('ns', float('nan')):+,.0f} ns "
               f"[{', '.join(f'{v:+,.0f}' for v in change.get('ci95_ns') or ())}]", "-",
               change.get("verdict", f"none (exit {out.returncode})"), stretches=len(change.get("stretches_ns") or ()))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter with the libraries (and its torch)")
    parser.add_argument("--libraries", nargs="+", choices=list(LIBRARIES), default=list(LIBRARIES))
    parser.add_argument("--skip", nargs="*", default=(), choices=("cases", "step", "compiled", "aa"))
    parser.add_argument("--repeats", type=int, default=3,
                        help="turns of the tool and by hand, alternating, for ops and steps (medians; default 3)")
    parser.add_argument("--log", default=os.path.join(tempfile.gettempdir(), "shipped_libraries.jsonl"))
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="shipped-libraries-")
    for name in os.listdir(USERLIB):
        if name.endswith(".py"):
            shutil.copy(os.path.join(USERLIB, name), folder)
    for module, source, _, _ in LIBRARIES.values():
        if source:
            with open(os.path.join(folder, f"{module}.py"), "w") as out:
                out.write(source)
    rows = []
    with open(args.log, "a") as log:
        for library in args.libraries:
            needs = LIBRARIES[library][3]
            found = run(args.python, folder, "-c", f"import {needs}")
            if found.returncode:
                say(f"{library}: {args.python} cannot import {needs}; skipped")
                continue
            rows += check_library(library, args.python, folder, set(args.skip), log, args.repeats)
    widths = [max(len(str(r[key])) for r in rows + [{"library": "library", "check": "check", "tool": "tool",
                                                     "by_hand": "by hand", "verdict": "verdict"}])
              for key in ("library", "check", "tool", "by_hand", "verdict")]
    header = ("library", "check", "tool", "by hand", "verdict")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-" * (sum(widths) + 8))
    for r in rows:
        print("  ".join(str(r[key]).ljust(w) for key, w in zip(("library", "check", "tool", "by_hand", "verdict"), widths)))
    print(f"log: {args.log}; folder: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
