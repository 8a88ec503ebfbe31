"""`bench.py --compiled`: its two flags, what it refuses beyond overrides/modes.py's rules, and
the run itself: measure (overrides/compiled/measure.py), print (report.py), write --json.

It runs in bench.py's own process, like a plain timing run: compiling needs the cases' classes
and the compiled functions live in this process's Dynamo caches.
"""

from __future__ import annotations

import sys

from overrides.compiled.dynamo import DEFAULT_BACKEND  # imports no torch: the parser is built without it
from overrides.errors import INTERRUPTED_EXIT_STATUS, UsageError

FORMATS = ("table", "markdown")


def add_arguments(parser) -> None:
    group = parser.add_argument_group("eager against compiled")
    group.add_argument("--compiled", action="store_true",
                       help="time each case and op four ways: eager and under torch.compile, each on plain "
                            "tensors and on the case; what compile removed of the overhead, what stays a "
                            "call, compile's seconds apart, and its graph breaks, recompiles or failure")
    group.add_argument("--compile-backend", metavar="NAME",
                       help=f"--compiled: torch.compile's backend (default {DEFAULT_BACKEND}; aot_eager and "
                            "eager compile in a fraction of the time, without Inductor's code)")


def check(args) -> str:
    """The backend asked, or a UsageError where --compiled cannot run as asked. Needs torch."""
    if args.format not in FORMATS:
        raise UsageError(f"--compiled prints a table or markdown; drop --format {args.format}")
    return checked_backend(args.compile_backend, args.device)


def checked_backend(backend: str | None, device: str | None = None) -> str:
    """`backend` (--compile-backend; None: DEFAULT_BACKEND), or a UsageError where --compiled cannot
    run on `device` (--device) or torch.compile has no such backend. Needs torch."""
    import torch._dynamo

    if device and device != "cpu":
        raise UsageError(f"--compiled runs on the CPU; drop --device {device}")
    backend = backend or DEFAULT_BACKEND
    known = torch._dynamo.list_backends(exclude_tags=())
    if backend not in known:
        raise UsageError(f"--compile-backend {backend}: torch.compile has no such backend; "
                         f"choose one of {', '.join(sorted(known))}")
    return backend


def run(args, cases, ops, progress) -> int:
    """Measure, print, write --json; exit 0, 1 where an eager figure failed, 130 on Ctrl-C. A
    compile that fails is a finding (said in the notes), not a failure of the run."""
    from overrides.clock.timer import DEFAULT_MAX_TIME_S, DEFAULT_PRECISION, STOP_FLOOR_S, TimerConfig
    from overrides.compiled import report
    from overrides.compiled.measure import run_compiled
    from overrides.files import write_json_atomic

    backend = check(args)
    config = TimerConfig(min_time_s=args.min_time or STOP_FLOOR_S, calls_per_sample=args.nreps,
                         samples=args.nrepreps, threads=args.threads, precision=DEFAULT_PRECISION,
                         max_time_s=DEFAULT_MAX_TIME_S)
    measured = run_compiled(cases, ops, config, backend, progress)
    print(report.render(measured, args.format), flush=True)  # shown even if --json cannot be written
    if args.json:
        write_json_atomic(args.json, report.payload(measured), what="--json")
        print(f"results written to {args.json}", file=sys.stderr)
    if measured.interrupted:
        return INTERRUPTED_EXIT_STATUS
    eager_failed = [r for r in measured.results for f in (r.eager_plain, r.eager_subclass) if f is not None and not f.ok]
    return 1 if eager_failed else 0
