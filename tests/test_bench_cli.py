"""bench.py as a user runs it: flags, formats, the JSON round trip, errors."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from overrides import results

QUICK = ["-n", "100", "-m", "25"]  # fixed, tiny: these tests check behaviour, not speed


def test_list_names_every_seed_case(bench):
    out = bench("--list")
    assert out.returncode == 0
    for name in ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction"):
        assert re.search(rf"^{name}\s+\S", out.stdout, re.M)
    names = [line.split()[0] for line in out.stdout.splitlines()]
    assert "x.add" not in names and len(names) == len(set(names))  # cases only, one line each


def test_list_ops_names_every_op(bench):
    out = bench("--list-ops")
    assert out.returncode == 0
    names = [line.split()[0] for line in out.stdout.splitlines()]
    assert {"torch.add", "x.add", "x+y", "x.shape"} <= set(names) and "Tensor" not in names


@pytest.mark.slow
def test_table_has_every_case_overhead_and_environment(bench):
    out = bench(*QUICK)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:3] == ["case", "per", "call"]
    rows = {line.split()[0]: line for line in lines[2:6]}
    assert set(rows) == {"Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction"}
    assert "25x100" in rows["SubTensor"]
    assert "empty-loop cost" in out.stdout and "removed" in out.stdout
    assert re.search(r"torch \S+ \(\w+.*Python 3\.\d+.*1 torch thread", out.stdout)
    assert "timing" in out.stderr  # progress goes to stderr
    assert "add it: --cases" not in out.stdout  # Tensor ran: every overhead has its baseline
    progress = _round_robin_lines(out.stderr)
    assert progress[-1].endswith("timing 4 cases round-robin: 100% (round 25)"), out.stderr


def _round_robin_lines(stderr: str) -> list[str]:
    lines = [line for line in stderr.splitlines() if "round-robin" in line]
    assert lines, stderr
    return lines


def test_a_case_alone_says_its_overhead_needs_tensor_and_how_to_get_it(bench):
    out = bench(*QUICK, "--cases", "SubTensor")
    assert out.returncode == 0, out.stderr
    header, rule, row = out.stdout.splitlines()[:3]
    for column in ("overhead ns", "vs Tensor"):  # '-' right under each header, as a number would be
        right_edge = header.index(column) + len(column)
        assert row[right_edge - 1] == "-" and row[right_edge - 2] == " ", (header, row)
    assert len(row) == len(header) == len(rule)
    note = next(line for line in out.stdout.splitlines() if "overhead ns and vs Tensor" in line)
    assert note.startswith("SubTensor:") and note.endswith("add it: --cases Tensor SubTensor")
    # One case, said as one: "timing 1 case", not "1 cases".
    assert _round_robin_lines(out.stderr)[-1].endswith("timing 1 case round-robin: 100% (round 25)")
    assert "1 cases" not in out.stderr


@pytest.mark.slow
def test_progress_reaches_100_percent_when_the_time_budget_is_spent(bench):
    # Without -m the run stops on its time budget, between two progress lines (one a second):
    # the last one printed said 92% in a user's run.
    out = bench("--cases", "Tensor", "--min-time", "0.3")
    assert out.returncode == 0, out.stderr
    assert re.search(r"timing 1 case round-robin: 100% \(round \d+\)$", _round_robin_lines(out.stderr)[-1])


def test_json_round_trip_prints_the_same_table(bench, tmp_path):
    path = tmp_path / "run.json"
    measured = bench(*QUICK, "--cases", "Tensor", "SubTensor", "--json", str(path))
    assert measured.returncode == 0, measured.stderr
    data = json.loads(path.read_text())
    assert data["schema"] == results.SCHEMA
    for key in ("python", "torch_version", "torch_git_hash", "torch_debug_build", "platform",
                "cpu", "threads", "hostname"):
        assert key in data["environment"]
    first = data["results"][0]
    for key in ("case", "op", "unit", "per_call_ns", "samples_ns", "calls_per_sample",
                "median_ns", "min_ns", "iqr_ns", "overhead_ns"):
        assert key in first
    assert first["unit"] == "ns" and len(first["samples_ns"]) == 25
    assert data["settings"]["stopped"] == "samples given"  # why sampling stopped: -m
    assert data["results"][1]["overhead_ns"] > 0  # SubTensor costs more than Tensor
    loaded = bench("--load", str(path))
    assert loaded.returncode == 0
    assert loaded.stdout == measured.stdout


def test_results_convert_to_torch_measurements(tmp_path, bench):
    import pickle

    from torch.utils.benchmark import Compare

    path = tmp_path / "run.json"
    assert bench(*QUICK, "--cases", "Tensor", "--json", str(path)).returncode == 0
    run = results.load(str(path))
    (measurement,) = results.to_measurements(run)
    assert measurement.number_per_run == 100
    # Measurement reports per-run (here per-call) times in seconds, from the same samples.
    assert abs(measurement.median * 1e9 - run.results[0].median_ns) < 1e-3 * run.results[0].median_ns
    assert pickle.loads(pickle.dumps(measurement)).median == measurement.median
    assert "Tensor" in str(Compare([measurement]))


def test_legacy_format_is_the_seed_sentence(bench):
    out = bench(*QUICK, "--format", "legacy")
    assert out.returncode == 0
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 4
    for line, name in zip(lines, ["Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction"]):
        assert re.fullmatch(rf"Type {name} had a minimum time of \d+\.\d+ us and a standard "
                            r"deviation of \d+\.\d+ us\.", line)


def test_markdown_format_is_a_pipe_table(bench):
    out = bench(*QUICK, "--cases", "Tensor", "--format", "markdown")
    assert out.returncode == 0
    assert out.stdout.startswith("| case |") and "|---|" in out.stdout


def test_bad_input_exits_2_with_one_clear_line(bench, tmp_path):
    cases = {
        ("--cases", "Nope"): "unknown case 'Nope'; valid cases: Tensor",
        ("-n", "0"): "-n/--nreps: 0 must be 1 or more",
        ("-n", "many"): "'many' is not a whole number",
        ("--min-time", "-1"): "must be above 0",
        ("--threads", "0"): "must be 1 or more",
        ("--load", str(tmp_path / "missing.json")): "no results file at",
        ("--format", "html"): "invalid choice",
        ("--instructions", "--seeds", "x"): "'x' is not a whole number",  # guessed ahead, silently
        ("--random-layout=3",): "ignored explicit argument",
    }
    for args, message in cases.items():
        out = bench(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert message in out.stderr, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "Traceback" not in out.stderr


def test_load_rejects_a_file_that_is_not_ours(bench, tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"schema": "something/else", "results": []}))
    out = bench("--load", str(path))
    assert out.returncode == 2 and "not a results file of this tool" in out.stderr


def _interrupt_once(args: list[str], ready: str, timeout_s: float = 180) -> tuple[int, str, str]:
    """Run bench.py with `args`, press Ctrl-C as soon as a progress line matches `ready` (a regex;
    its group `n`, where it has one, at least MIN_ROUNDS), and return (exit status, stdout,
    stderr). The run itself says on stderr that it is where the test needs it: nothing is timed
    by sleeping, so a loaded machine makes the wait longer, never the interrupt early or late.
    Ctrl-C as at a terminal: a suite started in the background by a non-interactive shell
    inherits SIGINT ignored, and Python then keeps ignoring it (the whole run went on)."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "bench.py", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + timeout_s  # a busy machine: imports and calibration take longer
    seen, there = "", None
    while there is None and time.monotonic() < deadline and proc.poll() is None:
        line = proc.stderr.readline()
        seen += line
        match = re.search(ready, line)
        if match and int(match.groupdict().get("n") or MIN_ROUNDS) >= MIN_ROUNDS:
            there = match
    if there is None:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"no progress line matching {ready!r} in {timeout_s} s:\n{seen[-3000:]}")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=timeout_s)  # an ignored Ctrl-C fails below, not here
    return proc.returncode, out, seen + err


# Rounds of samples each case has before Ctrl-C: as many as a figure needs (timer.MIN_SAMPLES).
MIN_ROUNDS = 20


@pytest.mark.slow
def test_ctrl_c_keeps_what_was_measured_and_exits_130(tmp_path):
    path = tmp_path / "partial.json"
    status, out, err = _interrupt_once(["--min-time", "30", "--json", str(path)],
                                       r"round-robin: .*\(round (?P<n>\d+)\)")
    assert status == 130, err  # 128 + SIGINT, as a shell reports a command Ctrl-C stopped
    assert "interrupted" in out and "Traceback" not in err
    assert json.loads(path.read_text())["interrupted"] is True
    saved = results.load(str(path))
    assert saved.interrupted and all(len(r.samples_ns) >= 20 for r in saved.results)
    assert saved.settings.stopped == "interrupted"


@pytest.mark.slow
def test_ctrl_c_in_compare_prints_the_partial_table_and_exits_130(tmp_path, torch_python):
    path = tmp_path / "comparison.json"
    # One pair done and the second sampling (it says so after a second of it) before Ctrl-C, so
    # the table has figures to show and the interrupt lands in a pair.
    status, out, err = _interrupt_once(
        ["--compare", torch_python, torch_python, "--no-instructions", "--cases", "Tensor",
         "--pair-seconds", "2", "--json", str(path)], r"pair 2\b.*: sampling, round")
    assert status == 130, err
    assert "Traceback" not in err
    assert out.startswith("case ") and re.search(r"^Tensor\s+[\d,]+\s+[\d,]+", out, re.M), out
    assert "(interrupted)" in out
    assert json.loads(path.read_text())["settings"]["stopped"] == "interrupted"


def test_compare_refuses_a_program_that_is_not_python_in_one_line(bench):
    not_python = shutil.which("ls") or "/bin/ls"
    out = bench("--compare", sys.executable, not_python)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == (
        f"bench.py: error: {not_python} is not a Python interpreter (it printed nothing a Python "
        "would): pass a Python executable or a virtualenv directory")


@pytest.mark.slow
def test_layout_is_pinned_unless_asked(bench, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    for extra, aslr_off, hash_seed in (((), True, "0"), (("--random-layout",), False, None)):
        path = tmp_path / "r.json"
        out = bench(*QUICK, "--cases", "Tensor", "--json", str(path), *extra, env=env)
        assert out.returncode == 0, out.stderr
        environment = json.loads(path.read_text())["environment"]
        assert (environment["aslr_off"], environment["python_hash_seed"]) == (aslr_off, hash_seed)


def test_a_pinned_process_lays_out_alike_every_time(tmp_path):
    script = tmp_path / "where.py"
    script.write_text(f"import sys; sys.path.insert(0, {ROOT!r})\n"
                      "from overrides.clock.layout import reexec_pinned\n"
                      "reexec_pinned()\n"
                      "print(hex(id(object())), hash('layout'))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}

    def where(*args):
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                              env=env, check=True).stdout

    assert where() == where()  # same addresses, same string hashes
    assert where("--random-layout") != where("--random-layout")


def test_every_entry_point_prints_its_help():
    # argparse expands %-formats in help texts: one stray "%" made `bench.py --help` crash.
    for command in ([sys.executable, "bench.py", "--help"], [sys.executable, "pyspybench.py", "--help"],
                    ["bash", "scripts/record.sh", "--help"], ["bash", "scripts/report.sh", "--help"]):
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (command, done.stderr[-2000:])
        assert "usage" in done.stdout.lower(), command
