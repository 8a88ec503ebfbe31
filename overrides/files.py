"""Files written whole or not at all: a temp file beside the target, then a rename.

An interrupted run must never leave half a results file, SVG or ZIP that looks complete.
Everything this project writes for a user goes through here, and so does the one lock that keeps
two runs at once from filling a shared cache together. A JSON document is read back here too:
its schema checked (`versioned`), and a flat record's fields to and from its keys.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import tempfile
from typing import Iterator, Mapping

from overrides.errors import place_error

TEMP_PREFIX = ".tmp-"  # a file being written, beside its target until renamed onto it
_UMASK = os.umask(0)
os.umask(_UMASK)
_DEFAULT_MODE = 0o666 & ~_UMASK  # what open(path, "w") would have given


@contextlib.contextmanager
def one_process_at_a_time(lock_file: str) -> Iterator[None]:
    """Held by one process at a time: an advisory lock on `lock_file` (made if missing), for a
    cache that runs started at once would otherwise fill together. The kernel releases it when
    the block ends or the process dies, so a killed run never leaves it held."""
    with open(lock_file, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def atomic_path(path: str, suffix: str = "", what: str = "") -> Iterator[str]:
    """A temporary path beside `path`; renamed onto `path` if the block succeeds, else removed.
    A full or unwritable place is a UsageError saying so (`place_error`)."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=suffix, dir=directory)
        os.close(fd)
        yield tmp
        os.chmod(tmp, _DEFAULT_MODE)  # mkstemp makes it private; the result is an ordinary file
        os.replace(tmp, path)
    except OSError as exc:
        said = place_error(path, exc, what)
        if said is None:
            raise
        raise said from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def make_folder(path: str, what: str) -> str:
    """`path` made (with its parents) if missing, or a UsageError naming `what` (the flag) and
    why: a file in the way, no permission, a read-only file system."""
    from overrides.errors import UsageError

    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot make that folder ({exc.strerror or exc}); "
                         "pass a folder you can write") from None
    return path


def write_text_atomic(path: str, text: str, what: str = "") -> None:
    with atomic_path(path, what=what) as tmp:
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(text)


def read_json(path: str, what: str, make: str):
    """The JSON in `path`, `what` it should be (a results file, a budget); a UsageError of one
    line, naming the path, the cause and `make` (how to make one), where it is missing or is
    not JSON."""
    from overrides.errors import UsageError

    try:
        with open(path, encoding="utf-8") as src:
            return json.load(src)
    except FileNotFoundError:
        raise UsageError(f"no {what} at {path}; {make}") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path} as a {what} ({exc}); {make}") from None


def schema_of(data) -> str | None:
    """The "schema" a parsed JSON document says it follows; None for anything else (a list, a
    number, a dict without one). The one place that reads it: every versioned reader asks here."""
    return data.get("schema") if isinstance(data, dict) and isinstance(data.get("schema"), str) else None


def versioned(data, schemas: str | tuple[str, ...], source: str, what: str, make: str) -> dict:
    """`data` if it follows one of `schemas`, else a UsageError of one line: `source` (a path) is
    not `what` of this tool, the schema found and the one expected, and `make` (how to make one)."""
    from overrides.errors import UsageError

    accepted = (schemas,) if isinstance(schemas, str) else tuple(schemas)
    found = schema_of(data)
    if found not in accepted:
        said = repr(found) if found is not None else f"none: a JSON {type(data).__name__}"
        raise UsageError(f"{source} is not {what} of this tool (schema {said}, expected {accepted[0]!r}); {make}")
    return data


def write_json_atomic(path: str, payload, what: str = "") -> None:
    write_text_atomic(path, json.dumps(payload, indent=1) + "\n", what)


def fields_to_dict(record) -> dict:
    """A flat record's JSON: every field under its own name, in field order, tuples as lists."""
    return {f.name: list(value) if isinstance(value := getattr(record, f.name), tuple) else value
            for f in dataclasses.fields(record)}


def fields_from_dict(cls, data: Mapping):
    """A flat record `cls` from the keys of `data` it has a field for, lists as tuples; a key it
    lacks leaves its field to the default (a file written before the field)."""
    known = {f.name for f in dataclasses.fields(cls)}
    return cls(**{key: tuple(value) if isinstance(value, list) else value
                  for key, value in data.items() if key in known})
