"""The registry of cases: every tool finds a case by its name here.

Every tool (bench.py, pyspybench.py, record.sh, report.sh, the A/B and counting workers)
resolves names through `get_case` / `resolve_cases`, so a name means the same thing everywhere:
one of the seed cases (`overrides/cases/seedcases.py`), one of the rest of the catalog
(`overrides/cases/catalog.py`), or a user's own class or factory named `pkg.module:factory`
(`overrides/cases/usercases.py`). The names and descriptions are checked without torch first
(`overrides/cases/casenames.py`).

The registry imports the modules that build the cases; none of them imports the registry. The
catalog joins the seed cases the first time a name is looked up (`python bench.py` with no
flags times the seed cases without ever importing it).
"""

from __future__ import annotations

import dataclasses

from overrides.cases import casenames
from overrides.cases.casenames import Case
from overrides.cases.seedcases import SEED_CASES

_REGISTRY: dict[str, Case] = {case.name: case for case in SEED_CASES}


def _load_catalog() -> None:
    """The catalog's cases, after the seed cases, once."""
    from overrides.cases.catalog import CATALOG_CASES

    for case in CATALOG_CASES:
        if _REGISTRY.setdefault(case.name, case) is not case:
            raise ValueError(f"case {case.name!r} is registered twice")


def all_cases() -> tuple[Case, ...]:
    _load_catalog()
    return tuple(_REGISTRY.values())


def case_names() -> list[str]:
    _load_catalog()
    return list(_REGISTRY)


def get_case(name: str) -> Case:
    """The case called `name`, or a user case `pkg.module:factory`; a UsageError if neither."""
    spec = casenames.twinned(name) or (name if casenames.is_user_spec(name) else None)
    if spec is not None:
        from overrides.cases.twins import plain_twin
        from overrides.cases.usercases import case_from_spec

        built = casenames.side_spec(spec)  # this side's own code, where two versions are compared
        case = plain_twin(built) if casenames.twinned(name) else case_from_spec(built)
        return case if built == spec else dataclasses.replace(
            case, name=name, file_stem=casenames.user_stem(spec) + ("-plain" if casenames.twinned(name) else ""),
            baseline=casenames.twin_of(spec) if case.baseline != case.name else name)
    shaped = casenames.described(name)  # an unknown name: the same message, with or without torch
    base, operands = casenames.split_shaped(name)
    _load_catalog()
    if base == name:
        return _REGISTRY[name]
    from overrides.cases.seedcases import with_operands_of

    return with_operands_of(_REGISTRY[base], shaped, operands)


def resolve_cases(names: list[str] | None) -> tuple[Case, ...]:
    """Cases for a `--cases` list: None means the seed cases, `all` the whole catalog (and may
    sit beside user cases: `all mypkg.mod:MyTensor`); checked by name first (casenames.resolve)."""
    if not names:
        return SEED_CASES
    return tuple(get_case(case.name) for case in casenames.resolve(names))
