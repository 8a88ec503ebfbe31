"""Run one case's hot loop for a profiler: py-spy record -o subtensor.svg --native -- python pyspybench.py SubTensor"""

if __name__ == "__main__":
    # No heap pinning re-exec here (bench.py has one): py-spy follows the process it started,
    # and an exec would swap the interpreter under it. Flamegraph shares do not need it.
    from overrides.flame.hotloop import from_command_line

    job = from_command_line()  # bad input: one line, exit 2
    with job.active():
        job.hand_to_recorder()  # --record: this process becomes py-spy; a child runs the loop
        # The loop runs right here, so the flamegraph shows `<module>`, then the hot loop.
        for turns in job.chunks():
            job.loop(job.operands, turns)
    job.done()
