"""Enter a private mount namespace, mount a side's folders at one fixed path, exec the command.

Run as `python -I samepath_enter.py SPEC_JSON COMMAND...` by `overrides/builds/samepath.py`; standalone
(no imports from this package: it runs isolated, before anything of the side is on a path).
SPEC_JSON: {"root": FIXED_ROOT, "binds": [[source folder, name under root], ...], "cwd": folder
or null} (the working directory to change to once the mounts are made): a `Spec`, which
samepath.py writes and this reads.

The command is exec'd with the environment block exactly as this process was given it (read
back from /proc/self/environ): the launcher's own interpreter may add to `os.environ` (locale
coercion), and one byte more in the environment moves every later address.
Exit status 125 with one line on stderr when the namespace or a mount cannot be made.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
FAILED = 125  # as env(1) and unshare(1) do for a failure of their own, not the command's


@dataclasses.dataclass(frozen=True)
class Spec:
    """Where the side's folders are mounted: under `root`, each of `binds` (source folder, name
    under root); then `cwd`, the working directory to change to (None: the one given)."""

    root: str
    binds: tuple[tuple[str, str], ...]
    cwd: str | None = None

    def to_dict(self) -> dict:
        return {"root": self.root, "binds": [list(bind) for bind in self.binds], "cwd": self.cwd}

    @classmethod
    def from_dict(cls, data: dict) -> "Spec":
        return cls(data["root"], tuple(tuple(bind) for bind in data["binds"]), data.get("cwd"))


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as out:
        out.write(text)


def enter(libc) -> None:
    """A mount namespace of our own: directly when privileged, else inside a user namespace
    that maps our own uid and gid to themselves (the command sees the same user as outside)."""
    uid, gid = os.geteuid(), os.getegid()
    if uid == 0 and libc.unshare(CLONE_NEWNS) == 0:
        return
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(user+mount namespaces)")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def mount_all(libc, spec: Spec) -> None:
    root = spec.root
    # Nothing mounted here may leak back to the parent's namespace.
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    _check(libc.mount(b"tmpfs", root.encode(), b"tmpfs", 0, b"mode=0755,size=1m"), f"tmpfs on {root}")
    for source, name in spec.binds:
        target = os.path.join(root, name)
        if not os.path.exists(target):  # a file mounted over one in a mounted folder needs none
            os.mkdir(target)
        _check(libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None),
               f"bind {source} on {target}")


def original_environment() -> dict:
    with open("/proc/self/environ", "rb") as raw:
        entries = [entry for entry in raw.read().split(b"\0") if entry]
    env = {}
    for entry in entries:
        key, _, value = entry.partition(b"=")
        env[key] = value
    return env


def main(argv: list) -> None:
    spec, command = Spec.from_dict(json.loads(argv[1])), argv[2:]
    env = original_environment()
    try:
        libc = _libc()
        enter(libc)
        mount_all(libc, spec)
        if spec.cwd:
            os.chdir(spec.cwd)
    except OSError as error:
        print(f"samepath: {error}", file=sys.stderr)
        sys.exit(FAILED)
    os.execve(command[0], command, env)


if __name__ == "__main__":
    main(sys.argv)
