"""Run one case's hot loop for a profiler: py-spy record -o subtensor.svg --native -- python pyspybench.py SubTensor
(or your training step's: python pyspybench.py --step steps:mlp)"""

if __name__ == "__main__":
    # No heap pinning re-exec here (bench.py has one): py-spy follows the process it started,
    # and an exec would swap the interpreter under it. Flamegraph shares do not need it.
    from overrides.flame.hotloop import from_command_line
    from overrides.step.flameloop import prepare as step_loop

    program = from_command_line(step_loop=step_loop)  # bad input: one line, exit 2
    program.hand_to_recorder()  # --record: this process becomes py-spy; a child runs the loops
    for job in program.loops:  # one after the other when several cases are named
        with job.active():
            # The loop runs right here, so the flamegraph shows `<module>`, then the hot loop.
            for turns in job.chunks():
                job.loop(job.operands, turns)
    program.done()
