"""`bench.py`'s command line: parse, call the library, print. No measuring logic lives here.

Nothing here imports torch at module level, and the arguments are checked before anything
does: `import torch` takes seconds, a typo should not wait for it, and the parent of `--compare`
(like `--list`, `--list-ops` and `--load`) needs no torch at all. A command that does need it
says so in one line when this interpreter has none (`require_torch`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import os
import shutil
import sys

from overrides import ROOT, comparison_report, device_report, environment, modes, results, run_notes, run_report
from overrides.ab.config import add_arguments as add_ab_arguments
from overrides.argtypes import OneLineParser, positive_float, positive_int
from overrides.cases import casenames
from overrides.cases import ops as ops_mod
from overrides.clock.layout import RANDOM_LAYOUT_FLAG  # bench.py's re-exec reads it from argv first
from overrides.counts import kept, records
from overrides.clock.timer import DEFAULT_MAX_TIME_S, DEFAULT_PRECISION, STOP_FLOOR_S, TimerConfig
from overrides.errors import INCOMPLETE_EXIT_STATUS, INTERRUPTED_EXIT_STATUS, UsageError, incomplete, run_command
from overrides.files import write_json_atomic, write_text_atomic
from overrides.sides import Sides
from overrides.single_run import DEFAULT_RUN_BUDGET_S
from overrides.tables import align
from overrides.progress import stderr_progress


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="bench.py",
        description="Time torch calls on plain tensors, subclasses and tensor-likes, and show "
                    "the __torch_function__ overhead of each against plain tensors.")
    parser.add_argument("--cases", nargs="+", metavar="NAME",
                        help="cases to run (default: the four seed cases; 'all': every case; "
                             "your own: pkg.module:factory)")
    parser.add_argument("--op", nargs="+", metavar="OP",
                        help="ops to time (default: torch.add; 'all': every named op, shown as a "
                             "cases x ops matrix; your own: a statement over x, y, torch and F, "
                             "such as \"torch.matmul(x, y)\" or \"x.sum()\")")
    casenames.add_operand_arguments(parser)
    parser.add_argument("--plot", metavar="FILE",
                        help="with --device cuda and several --shape sizes: draw each case's host, synced "
                             "and GPU time a call against size, and where the GPU hides its overhead "
                             "(PNG or SVG, by FILE's suffix)")
    parser.add_argument("--list", action="store_true", help="list the cases, one per line: name and description")
    parser.add_argument("--list-ops", action="store_true", help="list the ops for --op, one per line")
    parser.add_argument("-n", "--nreps", type=positive_int, metavar="N",
                        help="calls per sample (default: calibrated to ~1 ms a sample)")
    parser.add_argument("-m", "--nrepreps", type=positive_int, metavar="M",
                        help="samples per case (default: until the stopping rule of --min-time says the figures are known)")
    parser.add_argument("--min-time", type=positive_float, default=None,
                        metavar="SECONDS",
                        help=f"sample each case at least this long when -m is not given, then "
                             f"stop once every figure is known to +-{DEFAULT_PRECISION * 100:.1f}%%, or once "
                             f"the machine's move outweighs every interval (docs/timing.md), or at "
                             f"max(SECONDS, {DEFAULT_MAX_TIME_S:g}) (default {STOP_FLOOR_S:g}; a "
                             f"run of many cases and ops is scaled to about {DEFAULT_RUN_BUDGET_S:g} s)")
    parser.add_argument("--threads", type=positive_int, default=1, metavar="N",
                        help="torch.set_num_threads while timing (default 1)")
    parser.add_argument("--json", metavar="PATH", help="also write the versioned results JSON here")
    parser.add_argument("--load", metavar="PATH",
                        help="print a results file written by --json instead of measuring")
    parser.add_argument("--format", choices=run_report.FORMATS, default="table",
                        help="table (default), legacy (the seed's sentences) or markdown")
    parser.add_argument("--cells", choices=run_report.MATRIX_CELLS, default=None,
                        help="what a cell of the cases x ops matrix (several --op) shows: full (default: "
                             "per call ns, overhead ns and ratio), overhead (overhead ns alone) or ratio")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument(RANDOM_LAYOUT_FLAG, action="store_true",
                        help="keep address-space and hash randomisation on (default: off, so two "
                             "runs of one build lay out alike; see overrides/clock/layout.py)")
    counts = parser.add_argument_group("instruction counts (Callgrind)")
    counts.add_argument("--instructions", action="store_true",
                        help="count instructions per call with Callgrind instead of timing "
                             "(--compare counts as well as timing whenever valgrind is installed; "
                             "this flag makes a missing valgrind an error)")
    counts.add_argument("--no-instructions", action="store_true",
                        help="--compare: wall clock only, no counts")
    counts.add_argument("--seeds", nargs="+", type=positive_int, metavar="SEED",
                        help="hash seeds, one valgrind process (one memory layout) each "
                             "(default: 1; with --compare: drawn afresh each time, counted in rounds "
                             "that fill the CPUs, up to six for cases the counts leave undecided)")
    counts.add_argument("--fresh", action="store_true", help=kept.FRESH_HELP)
    budget = parser.add_argument_group("an overhead budget for CI (instruction counts)")
    budget.add_argument("--write-budget", metavar="FILE",
                        help="count the cases (default: the seed cases, or the budget's own) under "
                             "fixed seeds and write each one's instructions per call and margin to FILE, "
                             "for git; over an existing budget, rows that barely moved are kept")
    budget.add_argument("--check-budget", metavar="FILE",
                        help="count the budget's cases under its seeds and check each row: exit 1 over "
                             "or under its margin (with the command that rewrites it), 2 where the "
                             "budget holds for another torch, Python or valgrind")
    ab = parser.add_argument_group("paired A/B between two environments")
    ab.add_argument("--compare", nargs=2, metavar=("BASE", "BRANCH"),
                    help="measure two interpreters or virtualenvs side by side and judge each case; "
                         f"or two versions of your own case ({casenames.SPEC_FORM}), both run in this "
                         "Python (its row named by BASE; --cases adds cases run alike on both sides)")
    add_ab_arguments(ab)
    from overrides.compiled import command as compiled
    from overrides.history import command as history
    from overrides.step import command as step

    compiled.add_arguments(parser)
    history.add_arguments(parser)
    step.add_arguments(parser)
    return parser


def instruction_head_start(argv: list[str]) -> tuple[list[tuple[str, str]], list[int]] | None:
    """What `bench.py --instructions` will count, when `argv` asks for just that: (the (case,
    op) names, the seeds), read by this parser before torch is imported, so that
    counts.callgrind.head_start may start valgrind's slow import of torch meanwhile. None for
    anything else: other commands, your own cases or `all` (their targets are settled after
    torch is imported), and command lines the real parse will refuse, loudly, later."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the refusal is said once, later
            args = build_parser().parse_args(argv)
            args.cases = casenames.with_shapes(args.cases, args.shape, args.dtype, args.device)
        names = [case.name for case in casenames.resolve(args.cases)]
        op_names = [op.name for op in ops_mod.resolve_ops(args.op)]
    except (SystemExit, UsageError):
        return None
    elsewhere = (args.compare or args.load or args.list or args.list_ops or args.history or args.nreps
                 or args.nrepreps or args.min_time or args.no_instructions or args.step)
    if (not args.instructions or elsewhere or casenames.ALL in (args.cases or []) + (args.op or [])
            or any(casenames.is_user_spec(name) for name in names)
            or importlib.util.find_spec("torch") is None):
        return None
    from overrides.counts.callgrind import DEFAULT_SEEDS

    return [(case, op) for op in op_names for case in names], list(args.seeds or DEFAULT_SEEDS)


def with_twins(cases: list[str] | None) -> list[str] | None:
    """The --cases names with each of your own cases' plain twin (`units:pair@plain`: its own
    operands as plain tensors) just before it, unless named already: a run's overhead column
    is then each case's against plain tensors like its own, never a 1-element Tensor against
    your 64x64 operands."""
    if not cases:
        return cases
    out: list[str] = []
    for name in cases:
        if casenames.is_user_spec(name) and not casenames.twinned(name):
            twin = casenames.twin_of(name)
            if twin not in cases and twin not in out:
                out.append(twin)
        out.append(name)
    return out


def list_cases() -> str:
    """`--list`: one aligned line per case, name first, so `cut -d' ' -f1` gives the names."""
    return "\n".join(align([[case.name, case.description] for case in casenames.all_described()], right=()))


def list_ops() -> str:
    """`--list-ops`: one aligned line per op for `--op`, name first, then the statement timed."""
    return "\n".join(align([[op.name, f"{op.stmt}: {op.description}"] for op in ops_mod.all_ops()], right=()))


def require_torch(what: str) -> None:
    """One line, not a traceback, when `what` must run in this interpreter and it has no torch."""
    if importlib.util.find_spec("torch") is None:
        made = os.path.join(ROOT, ".venv", "bin", "python")  # by `make bench` (install_deps.sh)
        instead = (f"run it with this checkout's virtualenv ({os.path.relpath(made)} bench.py ...)"
                   if os.path.exists(made) and os.path.realpath(made) != os.path.realpath(sys.executable)
                   else "run bench.py with an interpreter that has torch (`make bench` makes one)")
        raise UsageError(f"{what} needs torch in this interpreter, and {sys.executable} has none; "
                         f"{instead}, or use --compare BASE_PY BRANCH_PY (only its two sides need torch)")


def _cases_and_ops(args, what: str) -> tuple[tuple, tuple]:
    """The cases and ops to run here: names checked first (no torch: a typo is refused at once),
    then torch is required and the cases are built."""
    casenames.resolve(args.cases)
    selected_ops = ops_mod.resolve_ops(args.op)
    require_torch(what)
    from overrides.cases import registry

    return registry.resolve_cases(args.cases), selected_ops


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not args.step:  # a step's --device is its factory's (step/command.py), no case's
        args.cases = casenames.with_shapes(args.cases, args.shape, args.dtype, args.device)
    if args.list or args.list_ops:
        print("\n".join(text() for wanted, text in ((args.list, list_cases), (args.list_ops, list_ops)) if wanted))
        return 0
    refused = modes.refusal(args)
    if refused:
        raise UsageError(refused)
    if args.fresh:
        kept.count_anew()
    from overrides.history import command as history

    device_report.check_plot(args.plot, args.device)
    for asked, what in ((args.instructions, "--instructions"), (args.write_budget, "--write-budget"),
                        (args.check_budget, "--check-budget"), (args.history, "--history")):
        if asked:
            casenames.refuse_counting_on_cuda(args.cases, what)
    if args.write_budget or args.check_budget:
        return run_budget(args)
    if args.history:
        return history.run_history(args, stderr_progress(args.quiet))
    history.refuse_stray_flags(args)
    if args.step:
        require_torch("--step")
        from overrides.step import command as step

        say = stderr_progress(args.quiet)
        if args.compare:
            return step.run_step_compare(args, say)
        if args.instructions:
            return step.run_step_counts(args, say)
        return step.run_step_compiled(args, say) if args.compiled else step.run_step(args, say)
    if args.compiled:
        from overrides.compiled import command as compiled

        return compiled.run(args, *_cases_and_ops(args, "--compiled"), stderr_progress(args.quiet))
    if args.compare:
        return run_compare(args)
    if args.cells and (args.format == "legacy" or (not args.load and len(ops_mod.resolve_ops(args.op)) < 2)):
        raise UsageError(f"--cells {args.cells} chooses the cells of the cases x ops matrix; it needs two "
                         "--op or more (and not --format legacy): the one-op table shows every figure, drop --cells")
    run_result = _loaded_counted_or_timed(args)
    for warning in run_notes.spread_warnings(run_result):
        print(warning, file=sys.stderr)
    print(run_report.render(run_result, args.format, args.cells), flush=True)  # shown even if --json cannot be written
    on_device = device_report.render(run_result, args.format)
    if on_device:
        print("\n" + on_device, flush=True)
    if args.plot:
        print(f"--plot: {device_report.plot(run_result, args.plot)} drawn in {args.plot}", file=sys.stderr)
    if args.json and not args.load:
        results.save(run_result, args.json, what="--json")
        print(f"results written to {args.json}", file=sys.stderr)
    if run_result.interrupted:
        return INTERRUPTED_EXIT_STATUS  # what was measured is printed (and saved) above
    died = records.deaths(run_result.instructions or ())
    if died:
        return incomplete("; ".join(died), args.json if not args.load else None)
    failed = [r for r in run_result.results if r.error and not r.ok]
    ran_nowhere = ran_on_no_op(run_result.results)
    for name in ran_nowhere:
        print(f"bench.py: {name} ran on none of the ops asked (n/a on each: see the table)", file=sys.stderr)
    return 1 if failed or ran_nowhere else 0


def ran_on_no_op(results_) -> list[str]:
    """The cases nothing was measured of: every one when no (case, op) ran at all, else your own
    (`pkg.module:factory`) cases that were n/a on every op asked. A built-in case n/a on the one
    op asked (WithTorchFunction on x.shape) is the catalog's answer, not a failure."""
    by_case: dict[str, list] = {}
    for result in results_:
        by_case.setdefault(result.case, []).append(result)
    nowhere = [case for case, rows in by_case.items() if all(r.not_applicable for r in rows)]
    if len(nowhere) == len(by_case):
        return nowhere
    # A plain twin that could not be built costs its case's overhead cell, said in the notes;
    # the case's own figure stands.
    return [case for case in nowhere if ":" in case and not casenames.twinned(case)]


def _loaded_counted_or_timed(args) -> results.RunResult:
    """One run's results: read back with --load, counted with --instructions, else timed."""
    if args.load:
        return results.load(args.load)
    not_applied = applied_to_yours(args.cases) if args.shape or args.dtype or args.device else ()
    args.cases = with_twins(args.cases)
    if args.instructions:
        from overrides.counts.callgrind import DEFAULT_SEEDS
        from overrides.single_run import count_benchmark

        selected, selected_ops = _cases_and_ops(args, "--instructions")
        run_result = count_benchmark(selected, selected_ops, args.seeds or DEFAULT_SEEDS,
                                     progress=stderr_progress(args.quiet))
    else:
        from overrides.single_run import run_benchmark

        selected, selected_ops = _cases_and_ops(args, "timing")
        config = TimerConfig(min_time_s=args.min_time or STOP_FLOOR_S,
                             calls_per_sample=args.nreps, samples=args.nrepreps,
                             threads=args.threads, precision=DEFAULT_PRECISION,
                             max_time_s=DEFAULT_MAX_TIME_S)  # cap_s(): never below --min-time
        # Without --min-time, many targets share one run budget (see single_run.DEFAULT_RUN_BUDGET_S).
        budget = None if args.min_time else DEFAULT_RUN_BUDGET_S
        from overrides.clock import speed

        run_result = run_benchmark(selected, selected_ops, config, stderr_progress(args.quiet),
                                   run_budget_s=budget, speed_cache=speed.cache_path())
    if not_applied:  # what your factories were asked and have no parameter for: in the notes and JSON
        run_result = dataclasses.replace(run_result, settings=dataclasses.replace(
            run_result.settings, not_applied=tuple(entry.to_dict() for entry in not_applied)))
    return run_result


def applied_to_yours(names: list[str] | None) -> tuple:
    """args.cases with what each of your factories takes of --shape/--dtype/--device (in place),
    and what it does not take (usercases.applied): imports your modules, so torch, only where
    something was asked of one. A name you wrote yourself (`units:pair@64x64`) is not softened:
    asking what the factory cannot take is an error there (usercases.case_from_spec)."""
    if not any(casenames.is_user_spec(n) and not casenames.twinned(n) and casenames.SHAPE_MARK in n
               for n in names or ()):
        return ()
    require_torch("your case with --shape, --dtype or --device")
    from overrides.cases import usercases

    names[:], not_applied = usercases.applied(names)
    return not_applied


def run_budget(args) -> int:
    """`--write-budget FILE` and `--check-budget FILE` (overrides/budget.py)."""
    from overrides import budget, environment as env_mod
    from overrides.counts import callgrind, pycalls
    from overrides.single_run import count_with_variants
    from overrides.step import budget as step_budget

    path = args.write_budget or args.check_budget
    if args.step:  # a step's budget, a file of its own kind
        require_torch("--step with a budget")
        request = step_budget.BudgetRequest(args.step, path, bool(args.write_budget), tuple(args.seeds or ()),
                                            args.threads, args.format == "markdown", args.json)
        return step_budget.run(request, stderr_progress(args.quiet))
    step_budget.refuse_as_op_budget(path)
    old = budget.load(path) if args.check_budget or os.path.exists(path) else None
    seeds = tuple(args.seeds or (old.seeds if old else budget.BUDGET_SEEDS))
    if args.write_budget and len(seeds) < 2:
        raise UsageError("a budget's margins come from its spread over seeds: give --seeds two or more")
    if old is not None and not args.cases and not args.op:
        args.cases = list(dict.fromkeys(row.case for row in old.rows))
        args.op = list(dict.fromkeys(row.op for row in old.rows))
    valgrind, _ = callgrind.find_valgrind()
    selected, selected_ops = _cases_and_ops(args, "--write-budget" if args.write_budget else "--check-budget")
    here = env_mod.collect(args.threads).fingerprint(callgrind.valgrind_version(valgrind))
    if args.check_budget:
        why = budget.refusal(old, here)
        if why:
            raise UsageError(f"{path}: {why}")
    # A write counts your cases again under layout variants (budget.LAYOUT_VARIANTS, one a seed), by
    # the same servers: one import of torch a seed.
    variants = [budget.LAYOUT_VARIANTS[i % len(budget.LAYOUT_VARIANTS)] for i in range(len(seeds))] \
        if args.write_budget else ()
    run_result, variant_runs = count_with_variants(selected, selected_ops, seeds, variants,
                                                   progress=stderr_progress(args.quiet))
    died = records.deaths(run_result.instructions)
    if died:  # a budget is judged seed by seed: without one of its seeds there is nothing to judge
        print(f"bench.py: incomplete: {'; '.join(died)}; "
              + (f"{path} was not written" if args.write_budget else "nothing was checked"), file=sys.stderr)
        return INCOMPLETE_EXIT_STATUS
    if args.write_budget:
        rows = budget.rows_from(run_result.instructions, seeds, variant_runs)
        rows = budget.with_python_calls(rows, pycalls.count_build(sys.executable, [(r.case, r.op) for r in rows]))
        final, changed = budget.rewritten(old, budget.Budget(here, seeds, tuple(rows)))
        write_text_atomic(path, budget.dumps(final))
        print(budget.written(final))
        print(f"budget written to {path}: {len(final.rows)} rows, "
              + (f"changed: {', '.join(changed)}" if changed else "none changed (each moved by less than a "
                 "third of its margin)"), file=sys.stderr)
        return 0
    rows = budget.rows_from(run_result.instructions, seeds)
    checked = budget.check(old, rows, budget.asked(run_result.results))
    # Every row's Python calls against its budget's, by name (a few seconds): a row off names what
    # it runs more of, and a row within its margin whose calls changed is off all the same.
    looked = [c for c in checked if c.verdict in (budget.OVER, budget.UNDER)
              or (c.verdict == budget.WITHIN and old.get(c.case, c.op).python_calls)]
    if looked:
        now = pycalls.count_build(sys.executable, [(c.case, c.op) for c in looked])
        checked = budget.with_calls(checked, old, lambda c: pycalls.find(now, c.case, c.op))
    markdown = budget.markdown(checked, path, old)
    print(markdown if args.format == "markdown" else budget.text(checked, path, old))
    summary = budget.github_summary_path()
    if summary:
        with open(summary, "a", encoding="utf-8") as out:
            out.write(markdown)
    if args.json:
        write_json_atomic(args.json, budget.payload(checked, path, old), what="--json")
    return 1 if budget.failed(checked) else 0


def compared_code(compare: list[str]) -> tuple[str, str] | None:
    """(base spec, branch spec) where `--compare` names two versions of your own code
    (`units:pair units_fast:pair`), to run in this interpreter; None where it names two
    interpreters. One of each is refused: a side is an interpreter or your case, not both."""
    def is_spec(name: str) -> bool:
        return casenames.is_user_spec(name) and not os.path.exists(name) and shutil.which(name) is None

    specs = [is_spec(name) for name in compare]
    if not any(specs):
        return None
    if not all(specs):
        interpreter, spec = (compare[1], compare[0]) if specs[0] else compare
        raise UsageError(f"--compare {' '.join(compare)}: {spec!r} is your case and {interpreter!r} an "
                         "interpreter; give two interpreters (--compare BASE_PY BRANCH_PY --cases ...) or two "
                         f"versions of your case ({casenames.SPEC_FORM}), run in this Python")
    for spec in compare:
        module = casenames.split_user_spec(spec)[0]
        if os.getcwd() not in sys.path:  # where the sides look for it too (usercases._import)
            sys.path.append(os.getcwd())
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:  # a parent package that is not there
            found = False
        if not found:
            raise UsageError(f"case {spec!r}: no module named {module!r}; the module must be importable "
                             "from the current directory or PYTHONPATH")
        if casenames.SHAPE_MARK in spec:
            raise UsageError(f"--compare {spec}: your case keeps the operands its factory makes; "
                             f"compare the factories themselves ({casenames.SPEC_FORM})")
    return compare[0], compare[1]


def compared_names(your_code: tuple[str, str], args) -> tuple[list[str], tuple]:
    """Your compared case's names, one per --shape, with what the base's factory takes of
    --shape/--dtype/--device, and what it does not (usercases.applied); one line where the
    branch's factory takes other parameters than the base's (the two rows would differ)."""
    if not (args.shape or args.dtype or args.device):
        return [your_code[0]], ()
    from overrides.cases import usercases

    asked = casenames.with_shapes([your_code[0]], args.shape, args.dtype, args.device)
    base, not_applied = usercases.applied(list(asked))
    branch, _ = usercases.applied([your_code[1] + name[len(your_code[0]):] for name in asked])
    if [name[len(your_code[0]):] for name in base] != [name[len(your_code[1]):] for name in branch]:
        raise UsageError(f"--compare {' '.join(your_code)}: the two factories take different parameters of "
                         f"--shape/--dtype/--device ({', '.join(base)} against {', '.join(branch)}); give "
                         "both the same, or drop those flags")
    return base, not_applied


def run_compare(args) -> int:
    """`--compare BASE_PY BRANCH_PY`: paired A/B, table on stdout, exit 1 on a regression.
    This process never imports torch: the cases are passed on by name, and each side's worker
    builds them (a user's `pkg.module:factory` is checked there)."""
    from overrides import case_comparison
    from overrides.ab.config import config_from_arguments
    from overrides.ab.paired import run_ab

    your_code = compared_code(args.compare)
    if your_code:
        require_torch("--compare of two versions of your case")
    selected = casenames.resolve(args.cases)
    not_applied = ()
    if your_code:  # your case, named by the base's spec, and any other cases asked beside it
        yours, not_applied = compared_names(your_code, args)
        selected = casenames.resolve(yours) + tuple(c for c in (selected if args.cases else ())
                                                    if casenames.split_asked(c.name)[0] != your_code[0])
    selected_ops = ops_mod.resolve_ops(args.op)
    config, skipped = config_from_arguments(args, threads=args.threads)
    config = dataclasses.replace(config, your_code=your_code, name_functions=True)
    if any(casenames.on_cuda(case.name) for case in selected):
        # asked for (--instructions): refused above; by default: the clock judges alone. Said as
        # CUDA's reason even where valgrind is missing too: installing it would not count these.
        config = dataclasses.replace(config, instruction_seeds=())
        skipped = ("the cases run on CUDA, which valgrind cannot run; the clock judges the host's cost "
                   "a call (count the same cases with --device meta)")
    sides = (sys.executable, sys.executable) if your_code else args.compare
    outcome = run_ab(sides[0], sides[1], selected, selected_ops, config, stderr_progress(args.quiet))
    if skipped or not_applied:
        outcome = dataclasses.replace(outcome, settings=dataclasses.replace(
            outcome.settings, instructions_skipped=skipped or outcome.settings.instructions_skipped,
            not_applied=tuple(entry.to_dict() for entry in not_applied)))
    environments = Sides(outcome.base_run.environment, outcome.branch_run.environment)
    render = comparison_report.comparison_markdown if args.format == "markdown" else comparison_report.comparison_table
    print(render(outcome.comparisons, outcome.settings))
    for (side, env), named in zip(environments.roles(), args.compare):
        print(f"{side}: {named}{' in ' + sys.executable if your_code else ''}: {environment.one_line(env)}")
    pythons = environment.interpreters_differ(*environments)
    if pythons:
        print(pythons)
    print(f"wall time {outcome.wall_s:.0f} s" + (" (incomplete)" if outcome.failure
                                                  else " (interrupted)" if outcome.interrupted else ""),
          flush=True)  # shown even if --json cannot be written
    if args.json:
        write_json_atomic(args.json, case_comparison.comparison_payload(
            outcome.comparisons, outcome.settings, environments), what="--json")
    if outcome.failure:
        return incomplete(outcome.failure, args.json)  # nor does a verdict on the pairs before a death
    if outcome.interrupted:
        return INTERRUPTED_EXIT_STATUS  # a verdict on part of the pairs gates nothing
    return 1 if case_comparison.any_regression(outcome.comparisons) else 0


# Said where Ctrl-C or SIGTERM stops a mode that keeps nothing of a run before its end (the timing
# of cases keeps what it measured, and says so itself): one line, exit 130 or 143, no traceback.
NOTHING_KEPT = "this mode keeps nothing of a run stopped before its end: nothing was printed or written"


def main(argv: list[str] | None = None) -> int:
    return run_command("bench.py", lambda: run(sys.argv[1:] if argv is None else argv), interrupted=NOTHING_KEPT)
