"""History: what each case costs across an ordered list of builds, and which step changed it.

`--compare` answers "did my branch make it slower than its base". History answers the question
after it: how the overhead moved over releases, nightlies or a run of commits, and which step
moved it. Each build is an interpreter, a virtualenv, a label kept by `record.sh`, or a pip
requirement (`torch==2.14.1`) installed once into a cached virtualenv of its own (the user's
environments are never touched).

The method is the comparison's, applied to every neighbouring pair:
- Every build is counted with Callgrind under the same hash seeds, so layouts are matched
  build to build, each from the one fixed start-up path (overrides/builds/samepath.py): two installs
  of one wheel count alike to the instruction, so a step's delta is the code's.
- Seeds are counted in rounds, like `--compare`'s (counts/rounds.py, count_until_decided): the first
  round counts every build; each later one only the builds of steps whose cases the counts
  leave undecided, and only those cases, up to six seeds (counts/rounds.py).
- Each step is judged by counts/judge.py's compare_counts, the rule `--compare` uses, so a step's
  verdict is the one `--compare` of that pair would give on its counts. `--clock` adds the
  paired clock per step (a whole comparison each, without counts) and the verdict is then the
  two views' together (case_comparison.with_counts).
- The step that changed most (largest share of its case's count among the steps judged a
  change) gets the counts' call-tree diff: "which release" comes with "where".

What it writes (`--out`, default `history/`): `history.json` (schema HISTORY_SCHEMA, rewritten
after every round, `complete: false` until the end), `history.md`, `history.png` and `history.svg`
(drawn by matplotlib, no browser needed: history/plot.py), and the changed step's
differential call tree as `where-CASE.svg`/`.png`.

Modules: `lineup.py` (each build resolved: an interpreter, a virtualenv, a record.sh label, or
a requirement installed into the cache), `steps.py` (every build counted under matched seeds in
rounds, each step judged), `output.py` (the table, markdown, `history/2` JSON and the largest
step's call tree), `plot.py` (the picture), `command.py` (`bench.py --history`).
"""

HISTORY_SCHEMA = "torch-function-overhead/history/2"  # 2: a timed step's "wall_verdict" is "clock_verdict"
