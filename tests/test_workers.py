"""The one client of entry.py's protocol (overrides/workers.py), against real processes: each
child below is a Python process that answers, says why it cannot go on, dies by a signal, exits
with a line on stderr, or leaves a forked child holding its pipes, and each is told by the
exception's type and its one line. Nothing waits on a clock: a child ends itself (a signal to
itself, an exit), and the parent reads until it sees the end."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from overrides import children, workers
from overrides.counts import forkserver, valgrind
from overrides.errors import UsageError

WHO = "the test worker"
# A process that said why: what entry.py's processes do when they cannot go on.
FATAL = """
    import json, sys
    print(json.dumps({"fatal": "ValueError: no case named Nope"}), flush=True)
    print("Traceback (most recent call last):\\nValueError: no case named Nope", file=sys.stderr)
    sys.exit(1)
"""
# A process that imports nothing it needs and exits with its reason on stderr, valgrind's own
# lines (its summary) after it.
EXITED_UNDER_VALGRIND = """
    import sys
    sys.stderr.write("Traceback (most recent call last):\\nModuleNotFoundError: No module named 'torch'\\n"
                     "==4242== \\n==4242== HEAP SUMMARY:\\n==4242==     in use at exit: 0 bytes\\n\\n")
    sys.exit(1)
"""


@pytest.fixture
def start():
    """Start `python -c CODE` with its three streams piped; every one is killed after the test."""
    started = []

    def run(code: str, **popen) -> subprocess.Popen:
        process = (popen.pop("launch", subprocess.Popen))(
            [sys.executable, "-c", textwrap.dedent(code)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, bufsize=1, **popen)
        started.append(process)
        return process

    yield run
    for process in started:
        children.reap(process)
        for stream in (process.stdin, process.stdout, process.stderr):
            try:
                stream.close()
            except OSError:
                pass


def _finished(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)


def test_messages_are_read_in_order_by_key_past_lines_that_are_not_messages(start):
    process = start("""
        import json, sys
        print(json.dumps({"imported": 1}))
        print("a library's own line on the stdout it inherited")
        print("[1, 2]")
        print(json.dumps({"progress": 1}))
        print(json.dumps({"ready": 42}), flush=True)
        print(json.dumps({"echo": json.loads(sys.stdin.readline())}), flush=True)
    """)
    client = workers.Client(process, WHO)
    assert client.read() == {"imported": 1}
    assert client.read("ready", doing="building its cases") == {"ready": 42}
    assert client.ask({"cmd": "sample", "target": 3}, "echo") == {"echo": {"cmd": "sample", "target": 3}}
    with pytest.raises(workers.WorkerDied) as died:  # it ended having said nothing more
        client.read(doing="timing")
    assert str(died.value) == f"{WHO} exited with status 0 while timing"


def test_a_fatal_message_is_the_users_to_fix_in_one_line(start):
    client = workers.Client(start(FATAL), WHO)
    with pytest.raises(workers.WorkerSaid) as said:
        client.read("ready", doing="building its cases")
    assert isinstance(said.value, UsageError)
    assert str(said.value) == f"{WHO} ended early while building its cases: ValueError: no case named Nope"


def test_a_usage_error_is_said_in_its_own_words_without_its_type_name(start):
    """A UsageError raised in the process (a case of yours that raised) is already worded for the
    user; its type name is not repeated, as any other type's is (FATAL above keeps ValueError)."""
    said_usage = """
        import json, sys
        print(json.dumps({"fatal": "UsageError: case 'bad:pair': pair() raised RuntimeError: moved"}), flush=True)
        sys.exit(1)
    """
    with pytest.raises(workers.WorkerSaid) as said:
        workers.Client(start(said_usage), WHO).read("ready", doing="preparing the cases")
    assert str(said.value) == f"{WHO} ended early while preparing the cases: case 'bad:pair': pair() raised RuntimeError: moved"
    with pytest.raises(workers.WorkerSaid) as finished:
        workers.answer(_finished(said_usage), "ready", failed="counting Python calls failed")
    assert str(finished.value) == "counting Python calls failed: case 'bad:pair': pair() raised RuntimeError: moved"


def test_a_process_killed_by_a_signal_is_a_death_saying_the_signal_and_what_it_was_doing(start):
    process = start("""
        import json, os, signal
        print(json.dumps({"imported": 1}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    client = workers.Client(process, WHO)
    assert client.read("imported", doing="importing torch") == {"imported": 1}
    with pytest.raises(workers.WorkerDied) as died:
        client.read("ready", doing="building its cases")
    assert not isinstance(died.value, UsageError)
    assert str(died.value) == f"{WHO} was killed by SIGKILL (out of memory?) while building its cases"


def test_a_death_says_the_last_line_on_stderr_beside_how_it_ended(start):
    process = start("""
        import os, signal, sys
        sys.stderr.write("a warning of its own\\n\\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGTERM)
    """)
    with pytest.raises(workers.WorkerDied) as died:
        workers.Client(process, WHO).read(doing="counting")
    assert str(died.value) == f"{WHO} was terminated (SIGTERM) while counting (a warning of its own)"


def test_an_exit_with_a_reason_on_stderr_is_said_and_valgrinds_lines_after_it_are_not(start):
    with pytest.raises(workers.WorkerSaid) as said:
        workers.Client(start(EXITED_UNDER_VALGRIND), WHO).read("imported", doing="importing torch")
    assert str(said.value) == f"{WHO} ended early while importing torch: ModuleNotFoundError: No module named 'torch'"


def test_a_forked_childs_end_while_waiting_for_something_else_is_a_death(start):
    process = start("""
        import json
        print(json.dumps({"ended": 0}))
        print(json.dumps({"ended": -9}), flush=True)
    """)
    client = workers.Client(process, WHO)
    assert client.read("ended", doing="leaving") == {"ended": 0}  # awaited: an answer
    with pytest.raises(workers.WorkerDied) as died:
        client.read("dumps", doing="counting")
    assert str(died.value) == f"{WHO} was killed by SIGKILL (out of memory?) while counting"


def test_writing_to_a_process_that_is_gone_says_how_it_ended(start):
    process = start("""
        import sys
        sys.stderr.write("OSError: the job's folder is gone\\n")
        sys.exit(3)
    """)
    process.wait()  # gone before anything is written to it
    with pytest.raises(workers.WorkerSaid) as said:
        workers.Client(process, WHO).write("fork\n", doing="being given a job")
    assert str(said.value) == f"{WHO} ended early while being given a job: OSError: the job's folder is gone"


# A process that closes its stdout and goes on, waiting for a stdin that never ends.
CLOSES_ITS_STDOUT = """
    import os, sys
    os.close(1)
    sys.stdin.read()
"""


def test_a_process_whose_output_ended_but_that_runs_on_stopped_answering(start):
    client = workers.Client(start(CLOSES_ITS_STDOUT), WHO, wait_s=0.5)
    with pytest.raises(workers.WorkerDied) as died:
        client.read(doing="timing")
    assert str(died.value) == f"{WHO} stopped answering while timing"


def test_what_a_subclass_does_before_waiting_comes_before_the_wait(start):
    class Stopping(workers.Client):
        def _stop(self) -> None:
            self.process.kill()

    client = Stopping(start(CLOSES_ITS_STDOUT), WHO, wait_s=60)  # 60 s only if _stop never ran
    with pytest.raises(workers.WorkerDied) as died:
        client.read(doing="timing")
    assert str(died.value) == f"{WHO} was killed by SIGKILL (out of memory?) while timing"


def _open_files(pid: int) -> list[str]:
    """The files a process holds open; none once it has exited (a zombie's, or gone)."""
    try:
        return os.listdir(f"/proc/{pid}/fd")
    except (FileNotFoundError, ProcessLookupError):
        return []


def test_a_fork_server_killed_while_its_child_holds_its_pipes_is_a_death_not_a_hang(start, tmp_path):
    """forkserver.Server reads by select and drains stderr: its forked child keeps both pipes
    open after the server is killed, so neither reaches its end until the group is killed."""
    process = start("""
        import json, os, select, signal, sys
        child = os.fork()
        if child == 0:
            select.select([], [], [])  # a forked child, holding stdout and stderr
        print(json.dumps({"imported": child}), flush=True)
        print("a warning of the server's own", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """, launch=children.start)
    launch = valgrind.Launch((), process, str(tmp_path / "out"), time.monotonic(), None)
    server = forkserver.Server(launch, "seed 1 (python)")
    try:
        child = server.read("imported", "importing torch")["imported"]
        with pytest.raises(workers.WorkerDied) as died:
            server.read("ended")
        # the child let go of the pipes (its stderr was read to its end): killed with the group
        assert not _open_files(child), f"the forked child {child} still holds its files"
    finally:
        server.close()
    assert str(died.value) == ("the counting process for seed 1 (python) was killed by SIGKILL (out of memory?) "
                               "while importing torch (a warning of the server's own)")


def test_a_finished_processs_answer_is_its_last_message_holding_a_key():
    done = _finished("""
        import json
        print(json.dumps({"progress": 1}))
        print(json.dumps({"reasons": [None]}))
        print(json.dumps({"progress": 2}))
    """)
    assert workers.answer(done, "reasons", "error", failed="x") == {"reasons": [None]}
    assert workers.answer(done, failed="x") == {"progress": 2}  # no key: its last message


def test_a_finished_process_without_an_answer_says_why_in_the_callers_words():
    fatal = _finished("""
        import json
        print(json.dumps({"reasons": [None]}))  # an answer, and then it could not go on
        exec(FATAL)
    """.replace("FATAL", repr(textwrap.dedent(FATAL))))
    with pytest.raises(workers.WorkerSaid) as said:
        workers.answer(fatal, "reasons", failed="python could not build the user cases")
    assert str(said.value) == "python could not build the user cases: ValueError: no case named Nope"
    with pytest.raises(workers.WorkerSaid) as said:
        workers.answer(_finished(EXITED_UNDER_VALGRIND), "loaded", failed="python could not import torch")
    assert str(said.value) == "python could not import torch: ModuleNotFoundError: No module named 'torch'"
    with pytest.raises(workers.WorkerSaid) as said:
        workers.answer(_finished("print('not a message')"), "prefix", failed="python did not answer")
    assert str(said.value) == "python did not answer: no message"
    assert workers.reason(_finished("import sys; print('=='); sys.stderr.write('  \\n==7== only valgrind\\n')")) \
        == workers.NO_MESSAGE
