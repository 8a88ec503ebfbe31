"""Python calls per call: which Python functions a case's call runs, counted, not sampled.

Most changes in `torch/overrides.py` and `torch/_tensor.py` are Python: a helper added, a check
moved, a generator where a loop was. Callgrind sees those only as the interpreter's own work
(`_PyEval_EvalFrameDefault`), and py-spy's few hundred samples per function move by chance from
one process to the next, so a 100 ns helper can sit below both. The interpreter itself can
count what runs as exactly as Callgrind counts instructions: in a separate process per side
(never the timed one), the case's call is run CALLS times under the profiler hook
(`sys.setprofile`: every Python function entered, every C function called from Python) and a
bytecode counter (bytecodes executed per function). The same build gives the same counts, so a
function the branch calls and the base does not is a fact, however little time it takes.

How each interpreter counts (the hooks differ from 3.12 on) is `counts/pyhook.py`.

Each call of a Python function is also counted at its call site (the calling function and its
line then), and the source of every function that ran is kept: `counts/callsites.py` matches a
new call's line against the base's code, so py-spy's time at that line (the call itself, with
everything it runs) can be set beside the function the counts name.

A function is named `qualified name (file)`, the file relative to the `sys.path` entry it was
imported from (site-packages, a kept copy's folder, this checkout), so two installs of one build
at different paths give identical keys. Line numbers are shown but are not part of the key: a
helper added above a class moves every line below it. Two code objects with one name in one file
(two generator expressions in one function) are counted together. A generator's resumptions
count as calls, as the hooks see them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from typing import Mapping, Sequence

from overrides import ROOT, entry, workers
from overrides.errors import UsageError
from overrides.counts.pyhook import C_SUFFIX, CALLS, SCHEMA, WARMUP_CALLS, Spec
from overrides.figures import COUNT_PLACES, json_figure
from overrides.files import schema_of

# How each side's process counts (the hook, the calls, the schema of what it prints) is pyhook's.
HASH_SEED = "0"  # set iteration order decides some loops' lengths: one seed for both sides
RUN_TIMEOUT_S = 600  # importing torch on a cold disk beside other work, then the counting


# ---------------------------------------------------------------------------------------------
# Running it in a side's interpreter

@dataclasses.dataclass(frozen=True)
class CaseCalls:
    """One case's counts on one side: per function, calls and own bytecodes in total over
    `calls` calls of the case."""

    case: str
    op: str
    calls: int
    functions: Mapping[str, tuple[int, int, int | None]]  # key -> (calls, bytecodes, line)
    error: str | None = None
    # (callee, caller, the caller's line, calls) of Python functions called from Python lines
    sites: tuple[tuple[str, str, int, int], ...] = ()
    sources: Mapping[str, tuple[int, tuple[str, ...]]] = dataclasses.field(default_factory=dict)
    # what counted the bytecodes (bytecode_counter()); None: not counted by this interpreter, and
    # every bytecode figure is 0, which is no evidence
    bytecode_counter: str | None = "sys.settrace opcodes"
    python: str = ""  # the side's Python version
    module_file: str | None = None  # a user case's: the file its module came from on this side

    @property
    def bytecodes_counted(self) -> bool:
        return self.bytecode_counter is not None

    def per_call(self, key: str) -> tuple[float, float]:
        calls, bytecodes, _ = self.functions.get(key, (0, 0, None))
        return calls / self.calls, bytecodes / self.calls

    def totals(self) -> tuple[float, float]:
        """(Python function calls, bytecodes) per call of the case; C functions not counted."""
        python = [v for k, v in self.functions.items() if not k.endswith(C_SUFFIX)]
        return (sum(v[0] for v in python) / self.calls, sum(v[1] for v in python) / self.calls)


def from_dict(payload: Mapping) -> list[CaseCalls]:
    if schema_of(payload) != SCHEMA:
        raise ValueError(f"not a Python-calls count ({schema_of(payload)!r})")
    counter = payload.get("bytecode_counter", "sys.settrace opcodes")  # older files: 3.11's hook
    return [CaseCalls(c["case"], c["op"], c.get("calls", 0),
                      {k: tuple(v) for k, v in c.get("functions", {}).items()}, c.get("error"),
                      tuple(tuple(site) for site in c.get("sites", ())),
                      {k: (first, tuple(lines)) for k, (first, lines) in c.get("sources", {}).items()},
                      counter, payload.get("python", ""), c.get("module_file"))
            for c in payload["cases"]]


def count_build(python: str, targets: Sequence[tuple[str, str]], *, import_path: str | None = None,
                calls: int = CALLS, warmup_calls: int = WARMUP_CALLS,
                own_env: Sequence[tuple[str, str]] = ()) -> list[CaseCalls]:
    """Count every (case, op) in one process of `python` (with `import_path` first on its
    path: a kept copy of a build), this checkout on PYTHONPATH. A user case is found as every
    other process of a side finds it (the timing workers, valgrind, py-spy): the side's own
    path first, the caller's directory last (USER_DIR_VARIABLE), never the working directory
    ahead of the side's own copy, which made two sides count one file of yours while their
    clocks each ran its own. `own_env`: the side's own variables (`ab.config.side_env`: which
    version of your code it builds). A process that fails is a UsageError with its last line."""
    from overrides.builds.interpreters import with_import_path
    from overrides.cases.casenames import USER_DIR_VARIABLE

    env = with_import_path(dict(os.environ, PYTHONHASHSEED=HASH_SEED, PYTHONDONTWRITEBYTECODE="1",
                                **{USER_DIR_VARIABLE: os.getcwd()}, **dict(own_env)), ROOT, import_path)
    spec = json.dumps(Spec(tuple(tuple(t) for t in targets), calls, warmup_calls).to_dict())
    try:
        done = subprocess.run(entry.command(python, "pycalls", spec), capture_output=True, text=True,
                              env=env, timeout=RUN_TIMEOUT_S, cwd=ROOT)
    except subprocess.TimeoutExpired:
        raise UsageError(f"counting Python calls under {python} took over {RUN_TIMEOUT_S} s") from None
    return from_dict(workers.answer(done, "cases", failed=f"counting Python calls under {python} failed"))


# ---------------------------------------------------------------------------------------------
# Base against branch

@dataclasses.dataclass(frozen=True)
class CallDelta:
    """One function's calls and own bytecodes per call of the case, base and branch."""

    function: str
    line: int | None  # where it is defined: in the branch, or in base when the branch has none
    base_calls: float
    branch_calls: float
    base_bytecodes: float
    branch_bytecodes: float
    bytecodes_counted: bool = True  # False: both bytecode figures are 0 and mean nothing

    @property
    def delta_calls(self) -> float:
        return self.branch_calls - self.base_calls

    @property
    def delta_bytecodes(self) -> float:
        return self.branch_bytecodes - self.base_bytecodes

    @property
    def is_c(self) -> bool:
        return self.function.endswith(C_SUFFIX)

    @property
    def has_bytecodes(self) -> bool:
        return self.bytecodes_counted and not self.is_c

    @property
    def new(self) -> bool:
        return self.base_calls == 0 and self.branch_calls > 0

    @property
    def gone(self) -> bool:
        return self.branch_calls == 0 and self.base_calls > 0

    @property
    def weight(self) -> float:
        """How much interpreter work the change is, for the order: the change of calls times
        the function's own bytecodes per call of it (a C function: its calls alone, its cost is
        not in bytecodes), or the change of its bytecodes where that is larger (a function that
        runs more of its own code, called as often)."""
        if self.is_c:
            return abs(self.delta_calls)
        per_call = max(self.base_bytecodes / self.base_calls if self.base_calls else 0.0,
                       self.branch_bytecodes / self.branch_calls if self.branch_calls else 0.0, 1.0)
        return max(abs(self.delta_calls) * per_call, abs(self.delta_bytecodes))

    @property
    def tag(self) -> str:
        if self.new:
            return "new"
        if self.gone:
            return "gone"
        if self.delta_calls:
            return "more calls" if self.delta_calls > 0 else "fewer calls"
        return "more bytecodes" if self.delta_bytecodes > 0 else "fewer bytecodes"

    def to_dict(self) -> dict:
        return {"function": self.function, "line": self.line, "change": self.tag,
                "base_calls": json_figure(self.base_calls, COUNT_PLACES), "branch_calls": json_figure(self.branch_calls, COUNT_PLACES),
                "delta_calls": json_figure(self.delta_calls, COUNT_PLACES),
                "base_bytecodes": json_figure(self.base_bytecodes, COUNT_PLACES) if self.has_bytecodes else None,
                "branch_bytecodes": json_figure(self.branch_bytecodes, COUNT_PLACES) if self.has_bytecodes else None,
                "delta_bytecodes": json_figure(self.delta_bytecodes, COUNT_PLACES) if self.has_bytecodes else None}



def _split(function: str) -> tuple[str, str]:
    """(qualified name, file) of a Python function's key."""
    name, _, location = function.rpartition(" (")
    return name, location[:-1]


def _enclosing_new(row: CallDelta, new: Sequence[CallDelta]) -> CallDelta:
    """The outermost new function `row` is defined in (a comprehension, a closure: its own
    code object, `_audit.<locals>.<listcomp>`), or `row` itself."""
    name, file = _split(row.function)
    outer = [other for other in new if _split(other.function)[1] == file
             and name.startswith(_split(other.function)[0] + ".<locals>.")]
    return min(outer, key=lambda other: len(other.function), default=row)


def order(rows: Sequence[CallDelta]) -> list[CallDelta]:
    """New functions first, each followed by the code objects defined in it (its comprehensions
    and closures, which up to 3.11 run as functions of their own: `_audit`'s list comprehension
    runs more bytecodes than `_audit` and was named before it), the new function with the most
    weight with what it holds first; then by weight (change of calls x own bytecodes per call),
    largest first; ties by name: the same rows in the same order on every run."""
    new = [row for row in rows if row.new]
    root = {row.function: _enclosing_new(row, new).function for row in new}
    held: dict[str, float] = {}
    for row in new:
        held[root[row.function]] = held.get(root[row.function], 0.0) + row.weight

    def key(row: CallDelta) -> tuple:
        if not row.new:
            return (1, -round(row.weight, 6), row.function, False, 0.0, "")
        outer = root[row.function]
        return (0, -round(held[outer], 6), outer, row.function != outer, -round(row.weight, 6), row.function)

    return sorted(rows, key=key)


def _aliases(base: CaseCalls, branch: CaseCalls) -> dict[str, str]:
    """{the branch's file: the base's} where the two sides ran your case from files of different
    names (`--compare units:pair units_tiny:pair`): its functions are then one function in two
    files, `UnitTensor.__torch_function__ (units_tiny.py)` the same as `(units.py)`."""
    def own_file(calls: CaseCalls) -> str | None:
        if not calls.module_file:
            return None
        files = {_split(key)[1] for key in calls.functions if not key.endswith(C_SUFFIX)}
        found = [f for f in files if calls.module_file == f or calls.module_file.endswith(os.sep + f)]
        return max(found, key=len, default=None)

    base_file, branch_file = own_file(base), own_file(branch)
    return {branch_file: base_file} if base_file and branch_file and base_file != branch_file else {}


def compare(base: CaseCalls, branch: CaseCalls) -> list[CallDelta]:
    """Every function whose calls or own bytecodes per call of the case differ, in `order`.
    Where either side did not count bytecodes, calls alone. Where the sides ran your case from
    files of different names (`_aliases`), its functions are matched by name across the two,
    and named as the branch names them (a function the branch no longer calls: as the base)."""
    both = base.bytecodes_counted and branch.bytecodes_counted
    aliases = _aliases(base, branch)
    branch_key = {}  # the base's name of each of the branch's functions -> the branch's
    for key in branch.functions:
        name, file = _split(key)
        branch_key[f"{name} ({aliases[file]})" if file in aliases and not key.endswith(C_SUFFIX) else key] = key
    rows = []
    for key in set(base.functions) | set(branch_key):
        shown = branch_key.get(key, key)
        b_calls, b_codes = base.per_call(key)
        r_calls, r_codes = branch.per_call(shown)
        if not both:
            b_codes = r_codes = 0.0
        if (b_calls, b_codes) == (r_calls, r_codes):
            continue
        line = (branch.functions.get(shown) or base.functions[key])[2]
        rows.append(CallDelta(shown, line, b_calls, r_calls, b_codes, r_codes, both))
    return order(rows)


def not_counted_note(base: CaseCalls, branch: CaseCalls) -> str:
    """'' where both sides counted bytecodes, else the sentence that says which did not."""
    missing = [f"{role} (Python {calls.python or '?'})" for role, calls in
               (("base", base), ("branch", branch)) if not calls.bytecodes_counted]
    if not missing:
        return ""
    return (f"Bytecodes were not counted on {' and '.join(missing)}: this interpreter's bytecode "
            "counter read a known function wrong, so only calls are compared.")


def find(runs: Sequence[CaseCalls], case: str, op: str) -> CaseCalls | None:
    return next((r for r in runs if r.case == case and r.op == op and not r.error), None)


def pyspy_frame(function: str) -> str | None:
    """The name py-spy gives the same Python function (`flame.stacks.clean_frame`: qualified name,
    the file's last two path parts); None for a C function, which py-spy names by its symbol."""
    if function.endswith(C_SUFFIX):
        return None
    name, _, location = function.rpartition(" (")
    return f"{name} ({'/'.join(location.rstrip(')').split('/')[-2:])})"



# ---------------------------------------------------------------------------------------------
# A compared case's change, by name

@dataclasses.dataclass(frozen=True)
class NamedChanges:
    """What changed in one compared case's Python code, by name (`--compare`'s row of a case
    that moved): the functions added, removed or called differently (`compare`'s rows), or,
    where they were not counted, why not."""

    functions: tuple[CallDelta, ...] = ()
    not_looked_for: str = ""  # why the Python calls were not counted; '' where they were
    bytecodes_note: str = ""  # `not_counted_note`: a side whose bytecodes were not counted

    @property
    def looked_for(self) -> bool:
        return not self.not_looked_for

    @classmethod
    def of(cls, base: CaseCalls, branch: CaseCalls) -> "NamedChanges":
        return cls(tuple(compare(base, branch)), bytecodes_note=not_counted_note(base, branch))

    def to_dict(self) -> dict:
        if not self.looked_for:
            return {"looked_for": False, "why": self.not_looked_for}
        return {"looked_for": True, "calls_counted": CALLS, "bytecodes_note": self.bytecodes_note or None,
                "functions": [row.to_dict() for row in self.functions]}
