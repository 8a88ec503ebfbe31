"""One import of torch under valgrind a build and seed, a forked child a job: each child counts
exactly what a server's only child counts, whichever child it is."""

import os
import sys

import pytest

from conftest import ROOT
from overrides.counts import callgrind, forkserver

SEED_CASES = callgrind.Job(tuple((case, "torch.add") for case in
                                 ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction")))
USERLIB = callgrind.Job((("units:pair@plain", "torch.add"), ("units:pair", "torch.add"),
                         ("units_fast:pair", "torch.add")))
SEEDS = (1, 2, 3)


def _by_case(run) -> dict:
    return {(c.case, c.op): (c.per_call, c.repeats, c.error) for c in run.cases}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Per seed, two servers: one counting the library and then the seed cases (each its second
    child), one the seed cases and then the library (each the server's first child, as a server
    that counts nothing else counts it)."""
    os.chdir(os.path.join(ROOT, "benchmarks", "userlib"))
    try:
        build = callgrind.Build(sys.executable)
        first = callgrind.count_served([build], SEEDS, [USERLIB, SEED_CASES])[0]
        second = callgrind.count_served([build], SEEDS, [SEED_CASES, USERLIB])[0]
    finally:
        os.chdir(ROOT)
    return first, second


@pytest.mark.slow
def test_a_forked_child_counts_to_the_instruction_as_a_servers_first_child(served):
    first, second = served
    for seed, a, b in zip(SEEDS, first, second):
        library_first, cases_second = a
        cases_first, library_second = b
        for one, other in ((cases_first, cases_second), (library_first, library_second)):
            assert not one.died and not other.died, (one.settings, other.settings)
            # every repeat's count, not only the figure: the same layout, to the instruction
            assert _by_case(one) == _by_case(other), (seed, _by_case(one), _by_case(other))
            assert all(c.per_call > 1000 for c in one.cases)
            assert one.settings["counted_by"] == forkserver.COUNTED_BY
    # three seeds are three layouts: SubTensor's count moves between them
    assert len({runs[0].get("SubTensor", "torch.add").per_call for runs in second}) > 1


def test_a_job_names_the_users_folder_only_when_it_builds_something_of_the_users():
    assert SEED_CASES.spec("/u").user_dir is None
    assert USERLIB.spec("/u").user_dir == "/u"
    assert callgrind.Job((("steps:mlp", "plain"),), role="count-step").spec("/u").user_dir == "/u"


@pytest.mark.slow
def test_a_server_killed_while_its_child_counts_is_started_again_and_the_run_ends(tmp_path):
    """The server killed (SIGKILL, as the OOM killer does) once its child is forked: the child
    still holds the server's pipes, so reading its end must not wait on them; it is counted
    again, and the run ends with the counts (before, it hung in the death's stderr read)."""
    import shutil
    import signal
    import subprocess
    import time

    shutil.copy(os.path.join(ROOT, "benchmarks", "userlib", "units.py"), tmp_path / "units.py")
    env = dict(os.environ, OVERRIDES_COUNTS_CACHE="off")
    process = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench.py"), "--instructions", "--cases",
                                "Tensor", "units:pair", "--seeds", "1"], cwd=tmp_path, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    said = []
    for line in process.stderr:  # handed off by the progress line, not by a sleep
        said.append(line)
        if "imports done" in line:
            break
    killed = None
    deadline = time.monotonic() + 60
    while killed is None and time.monotonic() < deadline:  # the server: its session's oldest of the fork role
        found = subprocess.run(["pgrep", "-o", "-s", str(process.pid), "-f", forkserver.ROLE], capture_output=True,
                               text=True)
        killed = int(found.stdout.split()[0]) if found.stdout.strip() else None
    assert killed is not None, "".join(said)
    os.kill(killed, signal.SIGKILL)
    out, rest = process.communicate(timeout=600)
    said += rest.splitlines(keepends=True)
    assert process.returncode == 0, "".join(said)
    assert "counting it again" in "".join(said) and "units:pair" in out
