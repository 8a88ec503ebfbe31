"""Eager against compiled: what `torch.compile` removes of a subclass's cost, and what stays.

`dynamo.py` compiles a function and reads what compile did from Dynamo's own records (a frozen
`CompileRecord`: seconds, graph breaks with their place in your code, recompiles, a failure in
one line), for any caller (`bench.py --compiled` on ops, a training step); `measure.py` times an
op's four figures (eager and compiled, each plain and with the subclass) in the Timer core;
`report.py` prints them; `command.py` is `bench.py --compiled` itself.
"""
