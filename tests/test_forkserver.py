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
    assert SEED_CASES.spec("/u")["user_dir"] is None
    assert USERLIB.spec("/u")["user_dir"] == "/u"
    assert callgrind.Job((("steps:mlp", "plain"),), role="count-step").spec("/u")["user_dir"] == "/u"
