"""The "always" amendment: the one exact rule an "always" answer adds, and its merge into the
grants file as it is on disk now.

The rule is the tool row's `always` (that file, that host, that note file; never a prefix nor a
wildcard, which only the owner types), written as TOML and read back by the very parser brokerd
starts with; what it cannot express adds nothing, and the owner is told so before answering.
The merge takes the grants folder's lock, reads the file as it is NOW (the owner may have edited
it since brokerd started) by the home-file rules (no link followed, a FIFO never waited on,
bounded), checks it is whole-looking (`_base`: an editor's rewrite caught half way is never a
base, docs/decisions/always-during-an-edit.md) and still parses, appends the rule, writes a
temporary file (the owner's mode kept), fsyncs it, checks the file did not change meanwhile,
renames it over the file and fsyncs the folder. A merge killed half way leaves its temporary
file; brokerd's start removes those (`clean_leftovers`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import stat
import time
from pathlib import Path

from boxmaker._toml import toml_array_item
from boxmaker.brokerd.grants import GrantsError, Lookup, Mode, Rule, parse_grants
from boxmaker.brokerd.tools.kind import Args, Target, Tool
from boxmaker.session.errors import SessionError
from boxmaker.session.files import open_regular, read_bounded

MAX_GRANTS_BYTES = 1 << 20
MARK = b"# added by brokerd: the owner answered always\n"


def always_rule(table: Lookup, tool: Tool, target: Target, args: Args) -> Rule | str:
    """The exact allow rule "always" would add for this call of `tool` on `target`, or why
    there is none."""
    got = tool.always_for(target, args)
    if isinstance(got, str):
        return got
    key, value = got
    try:
        text = toml_array_item("grant", {"tool": tool.name, "mode": "allow", key: [value]})
        (rule,) = parse_grants(text.encode(), table)
    except TypeError as exc:  # a lone surrogate: no TOML (nor UTF-8) form
        return f"nothing: {value!r} cannot be written as a grant ({exc})"
    except GrantsError as exc:
        return f"nothing: {value!r} cannot be written as a grant ({exc})"
    if rule.mode is not Mode.ALLOW or rule.covers(tool.name, target) < 0:
        return f"nothing: no grant the parser reads back covers {value!r} exactly"
    return rule


SETTLE_S = 2.0  # a grants file changed this recently may be mid-write: never a merge's base
LEFTOVER = re.compile(r"\.[0-9a-f]{8}\.tmp")  # after the grants file's name: merge's temp file


def _base(fd: int, path: str, table: Lookup, rules_in_force: int, own: tuple[int, int]) -> bytes:
    """The file's bytes, if they can be the base of a merge; else GrantsError saying why.

    An editor that truncates and rewrites in place (nano, `cat >`, open('w')) shows, for a
    moment, an empty file, then a prefix of the new one: read then, it would be taken as the
    owner's rules and every rule not yet written back would be lost by the rename. So the base
    must be whole-looking: not empty, ending in a newline, parsing, holding a rule when brokerd
    holds some, and unchanged for SETTLE_S (unless the change was brokerd's own merge: `own`,
    the inode and mtime it left)."""
    data = read_bounded(fd, MAX_GRANTS_BYTES, path)
    if not data.strip():
        raise GrantsError(f"{path} is empty (being rewritten?)")
    if not data.endswith(b"\n"):
        raise GrantsError(f"{path} does not end in a newline: it looks cut short (being written?)")
    if not parse_grants(data, table) and rules_in_force:
        raise GrantsError(f"{path} holds no rule (being rewritten?)")
    st = os.fstat(fd)
    age = time.time() - st.st_mtime
    if age < SETTLE_S and (st.st_ino, st.st_mtime_ns) != own:
        raise GrantsError(f"{path} changed {max(age, 0):.1f} s ago (being edited?)")
    return data


class GrantsFile:
    """The grants file "always" amends; remembers what brokerd itself last wrote there."""

    def __init__(self, path: str, table: Lookup) -> None:
        self.path, self.table = path, table
        self._own = (-1, -1)  # the inode and mtime of brokerd's last merge

    def merge(self, rule: Rule, rules_in_force: int = 1) -> str | None:
        """Appends `rule` to the file as it is now. None when done, else why not (the file is
        then left as it was). `rules_in_force`: how many rules brokerd holds."""
        path = self.path
        folder = os.path.dirname(os.path.abspath(path))
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        tmp = ""
        fd = -1
        try:
            fcntl.flock(dfd, fcntl.LOCK_EX)  # brokerd's other "always" answers wait here
            try:
                fd = open_regular(Path(path))  # no link followed, a FIFO never blocks
                before = os.fstat(fd)
                now = _base(fd, path, self.table, rules_in_force, self._own)
            except (OSError, GrantsError, SessionError) as exc:
                return (
                    f"the grants file cannot be amended as it is now: {exc}; no rule was added "
                    "(add it yourself, or answer always again)"
                )
            text = now + b"\n" + MARK + rule.to_toml().encode()
            parse_grants(text, self.table)  # what brokerd's next start reads
            tmp = f"{path}.{secrets.token_hex(4)}.tmp"
            out = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                stat.S_IMODE(before.st_mode),
            )  # the owner's mode, kept
            with os.fdopen(out, "wb") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
                written = os.fstat(f.fileno())
            if _changed(fd, before, path):  # an edit began meanwhile: the rename would lose it
                return f"the grants file {path} changed while the rule was added; no rule was added"
            os.replace(tmp, path)
            tmp = ""
            os.fsync(dfd)
            self._own = (written.st_ino, written.st_mtime_ns)
            return None
        except (OSError, GrantsError) as exc:
            return f"the grants file {path}: {exc}; no rule was added"
        finally:
            if tmp:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            if fd >= 0:
                os.close(fd)
            os.close(dfd)  # and the lock with it


def _changed(fd: int, before: os.stat_result, path: str) -> bool:
    """The file read (or the name) is no longer the one read: written to, or replaced."""
    now = os.fstat(fd)
    try:
        named = os.stat(path, follow_symlinks=False)
    except OSError:
        return True
    return (now.st_size, now.st_mtime_ns) != (before.st_size, before.st_mtime_ns) or (
        named.st_ino,
        named.st_dev,
    ) != (before.st_ino, before.st_dev)


def clean_leftovers(path: str) -> list[str]:
    """Removes the temporary files a merge killed half way left (`<grants>.<hex>.tmp`), under
    the merge's lock; the names removed."""
    folder, name = os.path.split(os.path.abspath(path))
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    removed = []
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)
        for entry in os.listdir(dfd):
            if entry.startswith(name) and LEFTOVER.fullmatch(entry[len(name) :]):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry, dir_fd=dfd)
                    removed.append(entry)
        if removed:
            os.fsync(dfd)
    finally:
        os.close(dfd)
    return removed
