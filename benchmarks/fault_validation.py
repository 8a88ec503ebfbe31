"""Does `--compare` still give the right verdicts when a worker is killed mid-pair?

The bare shim (one Python call added to every Tensor subclass's __torch_function__) against
this interpreter, N times: in each, one timing worker is killed with SIGKILL (as the
out-of-memory killer sends) while the second pair samples, and the pair is run again with fresh
workers. Beside each, the same comparison with nothing killed, interleaved: the verdicts, the
retry said in the notes, the wall time.

    python benchmarks/fault_validation.py [-n 5] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides import children  # noqa: E402
from overrides.ab import shimenv  # noqa: E402

BENCH = os.path.join(ROOT, "bench.py")
CASES = ("Tensor", "SubTensor")
EXPECTED = {"Tensor": {"no change"}, "SubTensor": {"regression"}}


def _kill_a_worker(process: subprocess.Popen) -> bool:
    for pid in children.descendants(process.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as src:
                if b"overrides/entry.py\x00time" in src.read():
                    os.kill(pid, signal.SIGKILL)
                    return True
        except OSError:
            pass
    return False


def compare(base: str, branch: str, out: str, kill: bool) -> dict:
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, BENCH, "--compare", base, branch, "--cases", *CASES,
                                "--json", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(line.rstrip() for line in process.stderr), daemon=True)
    reader.start()
    killed = False
    while kill and not killed and process.poll() is None:
        if any("pair 2" in line and "sampling" in line for line in list(lines)):
            killed = _kill_a_worker(process)
        time.sleep(0.05)
    stdout = process.stdout.read()
    process.wait()
    reader.join(timeout=10)
    payload = json.load(open(out)) if os.path.exists(out) else {}
    verdicts = {c["case"]: c["verdict"] for c in payload.get("comparisons", [])}
    return {"exit": process.returncode, "killed": killed, "verdicts": verdicts,
            "retried": "retried: 1 worker died" in stdout,
            "died": payload.get("settings", {}).get("workers_died", []),
            "pairs": payload.get("settings", {}).get("pairs"), "wall_s": time.monotonic() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5)
    parser.add_argument("--work", default="/tmp/fault-validation")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    bare = shimenv.make_shim_env(sys.executable, os.path.join(args.work, "bare"), "bare").python
    log = {"killed": [], "untouched": []}
    for i in range(args.n):
        for kind in ("killed", "untouched"):
            result = compare(sys.executable, bare, os.path.join(args.work, f"{kind}-{i}.json"), kind == "killed")
            log[kind].append(result)
            print(f"[{i + 1}/{args.n}] {kind}: exit {result['exit']}, {result['verdicts']}, pairs {result['pairs']}, "
                  f"retried {result['retried']}, {result['wall_s']:.0f} s", file=sys.stderr, flush=True)
    print(f"\nbare shim against plain, {', '.join(CASES)}; one worker killed while pair 2 sampled:")
    for kind, runs in log.items():
        right = sum(all(r["verdicts"].get(c) in EXPECTED[c] for c in CASES) for r in runs)
        print(f"  {kind:9s} right verdicts (Tensor no change, SubTensor regression) {right}/{len(runs)}; "
              f"worker killed {sum(r['killed'] for r in runs)}/{len(runs)}, retry in the notes "
              f"{sum(r['retried'] for r in runs)}/{len(runs)}; exit 1 in {sum(r['exit'] == 1 for r in runs)}/{len(runs)}; "
              f"wall median {statistics.median(r['wall_s'] for r in runs):.0f} s")
    with open(os.path.join(args.work, "log.json"), "w", encoding="utf-8") as out:
        json.dump(log, out)


if __name__ == "__main__":
    main()
