"""What a newcomer met with record.sh and report.sh (issue 22): nothing recorded is lost or
overwritten without a word, nothing half-done passes for done, and Ctrl-C stops at once.

Most tests call the library on a hand-made runs/ folder with a real record.json; the few that
need the scripts use the smallest settings they offer (one case, short recordings)."""

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import zipfile

import pytest

from conftest import ROOT
from overrides import results
from overrides.environment import Environment
from overrides.review import pr_report, record
from overrides.review.runs import listing
from overrides.run_settings import RunSettings

# Generous: the machine is shared with heavy jobs; these bound a hang, they time nothing.
SCRIPT_TIMEOUT_S = 300
MB = 2**20
# record.json as record.sh writes it while a recording has not reached its copy yet
STOPPED_BEFORE_KEEP = "the recording stopped before a copy was kept"


def _results(per_call_ns: float) -> results.RunResult:
    samples = tuple(per_call_ns * (1 + 0.001 * (i % 7)) for i in range(40))
    case = results.CaseResult(case="Tensor", op="torch.add", stmt="torch.add(t, t)",
                              description="a plain Tensor", calls_per_sample=100,
                              samples_ns=samples, loop_overhead_ns=0.0)
    return results.RunResult(Environment(torch_version="2.13.0"), RunSettings(), (case,))


def _dead_pid() -> int:
    finished = subprocess.Popen(["true"])
    finished.wait()
    return finished.pid


def make_label(runs, label, *, complete=True, kept_mb=None, flamegraphs=("Tensor", "SubTensor"),
               recorder_pid=None, per_call_ns=1000.0) -> dict:
    """runs/LABEL as record.sh leaves it: record.json, LABEL.json, flamegraph files, and with
    `kept_mb` a kept copy (a torch package folder; the manifest says how big it was)."""
    folder = runs / label
    folder.mkdir(parents=True)
    results.save(_results(per_call_ns), str(folder / f"{label}.json"))
    entries = {}
    for case in flamegraphs:
        for suffix in ("svg", "folded"):
            (folder / f"{label}-{case.lower()}.{suffix}").write_text("x")
        entries[case] = {"svg": f"{label}-{case.lower()}.svg", "folded": f"{label}-{case.lower()}.folded",
                         "samples": 1000, "seconds": 6}
    if kept_mb:
        (folder / "kept" / "torch").mkdir(parents=True)
        (folder / "kept" / "torch" / "__init__.py").write_text("")
        kept = {"root": "kept", "packages": ["torch"], "bytes": kept_mb * MB, "seconds": 2.0,
                "source": "/somewhere/torch"}
    else:
        kept = {"skipped": "recorded with --no-keep" if complete else STOPPED_BEFORE_KEEP}
    manifest = {"schema": "torch-function-overhead/record/1", "label": label, "python": sys.executable,
                "created": "2026-01-02T03:04:05+00:00", "cases": ["Tensor", "SubTensor"], "op": None,
                "results": f"{label}.json", "text": None, "flamegraphs": entries, "instructions": None,
                "complete": complete, "steps": ["bench", "flamegraphs", "keep"],
                "recorder": {"pid": recorder_pid or _dead_pid(), "host": socket.gethostname()},
                "kept": kept}
    (folder / "record.json").write_text(json.dumps(manifest))
    return manifest


def one_line_error(capsys, status: int) -> str:
    err = capsys.readouterr().err
    assert status == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


# -- record.sh: a recorded label is not replaced without a word ---------------------------------

def test_recording_over_a_recorded_label_is_refused_unless_forced(tmp_path, capsys):
    runs = tmp_path / "runs"
    make_label(runs, "base", kept_mb=700)
    before = (runs / "base" / "record.json").read_text()
    missing = str(tmp_path / "nowhere" / "python")  # never reached: refused before it is run
    err = one_line_error(capsys, record.main(["--label", "base", "--python", missing,
                                              "--runs-dir", str(runs)]))
    assert "label 'base' is already recorded" in err and "--force" in err
    assert "its bench results, 2 flamegraphs and its kept copy of the build (700 MB)" in err
    # --force passes that check; what comes next (the interpreter) fails, and nothing is lost.
    err = one_line_error(capsys, record.main(["--label", "base", "--python", missing, "--force",
                                              "--runs-dir", str(runs)]))
    assert "no interpreter at" in err
    assert (runs / "base" / "record.json").read_text() == before
    assert (runs / "base" / "kept" / "torch").is_dir()


# -- incomplete recordings ----------------------------------------------------------------------

def test_list_marks_an_interrupted_label_incomplete_and_says_what_it_misses(tmp_path):
    runs = tmp_path / "runs"
    make_label(runs, "base", kept_mb=700)
    make_label(runs, "half", complete=False, flamegraphs=("Tensor",))
    lines = listing(str(runs)).splitlines()
    row = next(line for line in lines if line.startswith("half "))
    assert row.split()[4] == "incomplete", row  # the kept copy column: not "none (not kept)"
    assert "half: incomplete (interrupted): missing flamegraphs (SubTensor) and the kept copy; " \
           "record it again with `scripts/record.sh --label half --force`" in lines
    assert "incomplete" not in next(line for line in lines if line.startswith("base "))


def test_list_removes_what_an_interrupted_recording_half_wrote_but_not_a_running_ones(tmp_path):
    runs = tmp_path / "runs"
    make_label(runs, "half", complete=False, flamegraphs=("Tensor",))
    make_label(runs, "busy", complete=False, flamegraphs=("Tensor",), recorder_pid=os.getpid())
    for label in ("half", "busy"):
        (runs / label / f"{label}-subtensor.folded.partial").write_text("half a profile")
        (runs / label / "kept.partial" / "torch").mkdir(parents=True)
        (runs / label / ".tmp-k2j4.json").write_text("{")  # files.py's file being written
    listed = listing(str(runs))
    assert sorted(os.listdir(runs / "half")) == ["half-tensor.folded", "half-tensor.svg", "half.json",
                                                 "record.json"]
    assert "removed its half-written .tmp-k2j4.json, half-subtensor.folded.partial and kept.partial" in listed
    assert (runs / "busy" / "busy-subtensor.folded.partial").exists()  # still being written
    assert any(line.startswith("busy ") and "recording now" in line for line in listed.splitlines())


def _report(capsys, runs, tmp_path, *specs_and_flags):
    status = pr_report.main([*specs_and_flags, "-o", str(tmp_path / "report.zip"), "--runs-dir",
                             str(runs), "--no-flamegraphs", "--no-instructions", "-q"])
    return status


def test_report_refuses_an_incomplete_label_unless_allowed_and_then_says_how_it_ran(tmp_path, capsys):
    runs = tmp_path / "runs"
    make_label(runs, "base", kept_mb=700)
    make_label(runs, "half", complete=False, flamegraphs=("Tensor",), per_call_ns=1010.0)
    for specs, role in ((("base", "half"), "BRANCH"), (("half", "base"), "BASE")):
        err = one_line_error(capsys, _report(capsys, runs, tmp_path, *specs))
        assert f"{role}: label 'half' is an incomplete recording" in err
        assert "missing flamegraphs (SubTensor) and the kept copy" in err and "--allow-incomplete" in err
    assert not (tmp_path / "report.zip").exists()

    status = _report(capsys, runs, tmp_path, "base", "half", "--allow-incomplete")
    assert status in (0, 1), capsys.readouterr().err
    markdown = zipfile.ZipFile(tmp_path / "report.zip").read("report.md").decode()
    # base has a kept copy, but half has none: the comparison ran from the recorded runs.
    assert "UNPAIRED" in markdown
    assert "- **base** (label `base`, its recorded run)" in markdown
    assert "run from its kept copy" not in markdown
    assert "- **branch** (label `half`, its recorded run, an incomplete recording)" in markdown
    assert "Label `half` is an incomplete recording (interrupted; missing flamegraphs " \
           "(SubTensor) and the kept copy)" in markdown


def _session_processes(session: int) -> list[str]:
    """Processes still running (zombies aside) in the session a script was started in."""
    listed = subprocess.run(["ps", "-s", str(session), "-o", "stat=,args="], capture_output=True,
                            text=True).stdout
    return [line for line in listed.splitlines() if line.strip() and not line.lstrip().startswith("Z")]


def interrupt(script: str, args, wait_for: str, target: str,
              signum: int = signal.SIGINT) -> tuple[int, list[str], list[str]]:
    """Start scripts/SCRIPT in a session of its own, as a terminal would, send SIGINT (or
    `signum`) to its process (`target` "top") or its whole process group ("group", a terminal's
    Ctrl-C) a moment after a progress line matches `wait_for`; returns (exit status, the stderr
    lines after the signal, processes of its session left running)."""
    # SIGINT at its default in the script, as in a terminal: a test run started in the
    # background of a non-interactive shell inherits it ignored (bash ignores SIGINT for `&`
    # jobs without job control), and Python keeps a signal ignored at start-up ignored.
    process = subprocess.Popen(["bash", f"scripts/{script}", *args], cwd=ROOT, text=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    watchdog = threading.Timer(SCRIPT_TIMEOUT_S, lambda: os.killpg(process.pid, signal.SIGKILL))
    watchdog.start()
    try:
        before = []
        for line in process.stderr:
            before.append(line)
            if re.search(wait_for, line):
                break
        else:
            pytest.fail(f"{script} ended before {wait_for!r}: {''.join(before)}")
        threading.Event().wait(2)  # the children it starts there are running by now
        if target == "group":
            os.killpg(process.pid, signum)
        else:
            os.kill(process.pid, signum)
        after = process.stderr.read().splitlines()
        status = process.wait()
    finally:
        watchdog.cancel()
    threading.Event().wait(0.5)  # killed children are reaped by then
    return status, after, _session_processes(process.pid)


@pytest.mark.skipif(not shutil.which("valgrind"), reason="needs valgrind")
@pytest.mark.parametrize("signum, status, word", [(signal.SIGINT, 130, "interrupted"),
                                                  (signal.SIGTERM, 143, "terminated")])
@pytest.mark.slow
def test_ctrl_c_or_kill_stops_report_sh_while_valgrind_counts(tmp_path, torch_python, signum, status, word):
    """SIGINT to report.sh's own process while valgrind counts: the counts were waited for
    (~100 s, and queued seeds started); now they are killed and one line says so. SIGTERM (kill,
    a CI job's time limit) does the same: before, report.sh died at once and left its valgrind
    processes running, orphaned."""
    output = tmp_path / "report.zip"
    got, after, left = interrupt(
        "report.sh", [torch_python, torch_python, "-o", str(output), "--runs-dir",
                      str(tmp_path / "runs"), "--cases", "Tensor"],
        r"counting \d+ jobs in \d+ process", "top", signum)  # the last line before the imports under valgrind
    assert got == status, after
    assert after == [f"report.sh: {word}; no ZIP written (runs/ keeps what was recorded)"]
    assert not output.exists()
    assert not left, left


@pytest.mark.slow
@pytest.mark.parametrize("target", ["top", "group"])
def test_ctrl_c_stops_record_sh_while_py_spy_records(tmp_path, target):
    """Ctrl-C while py-spy records: py-spy and the loop it traces stop at once (the loop ran on
    for its --seconds), no half profile stays behind, and --list says the label is incomplete."""
    runs = tmp_path / "runs"
    status, after, left = interrupt(
        "record.sh", ["--label", "half", "--python", sys.executable, "--seconds", "30",
                      "--min-time", "0.1", "--no-keep", "--runs-dir", str(runs), "Tensor"],
        "py-spy on Tensor", target)
    assert status == 130, after
    assert after == ["record.sh: interrupted; what finished is kept and listed in record.json"]
    assert not left, left
    assert not [name for name in os.listdir(runs / "half") if name.endswith(".partial")]
    row = next(line for line in listing(str(runs)).splitlines() if line.startswith("half "))
    assert "incomplete" in row


# -- record.sh says what it measures ------------------------------------------------------------

def _torch_of_this_interpreter() -> tuple[str, str]:
    """(version, folder) of the torch this interpreter has: torch's own word for its version."""
    import torch

    return str(torch.__version__), importlib.util.find_spec("torch").submodule_search_locations[0]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One real record.sh run of one case, as small as record.sh allows: no py-spy, no copy."""
    runs = tmp_path_factory.mktemp("recorded") / "runs"
    out = subprocess.run(["bash", "scripts/record.sh", "--label", "base", "--python", sys.executable,
                          "--no-flamegraphs", "--no-keep", "--min-time", "0.1", "--runs-dir", str(runs),
                          "Tensor"], cwd=ROOT, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S)
    assert out.returncode == 0, out.stderr
    return runs, out


def test_record_says_first_which_interpreter_and_torch_it_measures(recorded):
    _, out = recorded
    first = out.stderr.splitlines()[0]
    version, folder = _torch_of_this_interpreter()
    assert f"with torch {version} from {folder}" in first, first
    assert "measuring " in first and "python" in first


def test_without_python_the_first_line_says_it_is_the_default_and_how_to_choose():
    from overrides.builds import interpreters

    version, folder = _torch_of_this_interpreter()
    line = record.interpreter_line(interpreters.probe_interpreter(sys.executable), "python3")
    assert line.startswith(sys.executable) and "the default: pass --python" in line
    assert line.endswith(f"with torch {version} from {folder}")


def test_force_replaces_a_recorded_label_whole(recorded):
    runs, _ = recorded
    first = json.loads((runs / "base" / "record.json").read_text())
    (runs / "base" / "base-stale.svg").write_text("from the earlier recording")
    refused = subprocess.run(["bash", "scripts/record.sh", "--label", "base", "--python", sys.executable,
                              "--runs-dir", str(runs), "Tensor"], cwd=ROOT, capture_output=True,
                             text=True, timeout=SCRIPT_TIMEOUT_S)
    assert refused.returncode == 2 and "--force" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    again = subprocess.run(["bash", "scripts/record.sh", "--label", "base", "--python", sys.executable,
                            "--no-flamegraphs", "--no-keep", "--min-time", "0.1", "--force",
                            "--runs-dir", str(runs), "Tensor"], cwd=ROOT, capture_output=True,
                           text=True, timeout=SCRIPT_TIMEOUT_S)
    assert again.returncode == 0, again.stderr
    assert "replacing the earlier recording of 'base' (--force)" in again.stderr
    assert not (runs / "base" / "base-stale.svg").exists()
    assert json.loads((runs / "base" / "record.json").read_text())["recorder"] != first.get("recorder")


# -- report.sh: its output, its inputs, its title -------------------------------------------------

def test_report_refuses_to_overwrite_a_zip_before_anything_runs(tmp_path, capsys):
    output = tmp_path / "report.zip"
    output.write_bytes(b"yesterday's report")
    empty = tmp_path / "runs"
    args = ["nolabel", "nolabel2", "-o", str(output), "--runs-dir", str(empty), "--no-instructions"]
    err = one_line_error(capsys, pr_report.main(args))
    assert f"{output} exists; pass --force to overwrite it" in err
    assert output.read_bytes() == b"yesterday's report"
    # With --force the ZIP is no obstacle: the next check (BASE) speaks.
    err = one_line_error(capsys, pr_report.main(args + ["--force"]))
    assert "BASE 'nolabel' is neither a label" in err


def test_a_case_of_yours_is_not_a_build_and_the_message_points_to_compare(tmp_path, capsys):
    # an author's first try at a report of two versions of their code: the case names as sides
    args = ["units:pair", "units_fast:pair", "-o", str(tmp_path / "r.zip"), "--runs-dir", str(tmp_path / "runs"),
            "--no-instructions"]
    err = one_line_error(capsys, pr_report.main(args))
    assert "BASE 'units:pair' is a case of yours (module:factory), not a build" in err
    assert "bench.py --compare BASE_SPEC BRANCH_SPEC" in err and "record.sh" not in err


def test_a_results_file_is_not_a_build_and_the_message_says_what_to_pass(tmp_path, capsys, monkeypatch):
    runs = tmp_path / "runs"
    make_label(runs, "base")
    monkeypatch.chdir(tmp_path)
    args = ["-o", str(tmp_path / "r.zip"), "--runs-dir", str(runs), "--no-instructions"]
    err = one_line_error(capsys, pr_report.main(["runs/base/base.json", "x.json", *args]))
    assert "BASE runs/base/base.json is a results file, not a build" in err
    assert "pass a label recorded with `scripts/record.sh --label NAME`" in err
    assert "(this file is label `base`'s results: pass `base`), an interpreter, or a virtualenv" in err
    err = one_line_error(capsys, pr_report.main(["base", "x.json", *args]))
    assert "BRANCH x.json is a results file, not a build" in err


def test_the_report_title_names_the_two_labels(tmp_path, capsys):
    runs = tmp_path / "runs"
    make_label(runs, "base")
    make_label(runs, "again", per_call_ns=1005.0)
    assert _report(capsys, runs, tmp_path, "base", "again") in (0, 1), capsys.readouterr().err
    markdown = zipfile.ZipFile(tmp_path / "report.zip").read("report.md").decode()
    assert markdown.startswith("# `__torch_function__` overhead: base vs again\n")


def test_the_report_title_names_environments_by_their_folder(tmp_path):
    from overrides.review.sides import Side, title

    for name in ("base-env", "branch-env"):
        (tmp_path / name / "bin").mkdir(parents=True)
        (tmp_path / name / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert title([Side("base", str(tmp_path / "base-env")),
                  Side("branch", str(tmp_path / "branch-env" / "bin" / "python"))]) == "base-env vs branch-env"
    assert title([Side("base", "/usr/bin/python3.11"), Side("branch", "python3.12")]) == \
        "python3.11 vs python3.12"
    assert title([Side("base", "python3"), Side("branch", "python3")]) == \
        "base (python3) vs branch (python3)"


# -- record.sh --list: what the copies take -------------------------------------------------------

def test_list_shows_each_copys_size_and_which_label_frees_most(tmp_path):
    runs = tmp_path / "runs"
    make_label(runs, "base", kept_mb=300)
    make_label(runs, "big", kept_mb=700)
    make_label(runs, "small")
    lines = listing(str(runs)).splitlines()
    assert next(line for line in lines if line.startswith("base ")).split()[4:6] == ["300", "MB"]
    assert next(line for line in lines if line.startswith("big ")).split()[4:6] == ["700", "MB"]
    assert lines[-1].endswith("kept copies: 1,000 MB; `scripts/record.sh --clean big` frees most, 700 MB")
    assert "frees most" in record.build_parser().format_help()
