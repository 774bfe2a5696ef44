"""The "always" amendment: the one exact rule an "always" answer adds, and its merge into the
grants file as it is on disk now.

The rule is the tool row's `always` (that file, that host, that note file; never a prefix nor a
wildcard, which only the owner types), written as TOML and read back by the very parser brokerd
starts with; what it cannot express adds nothing, and the owner is told so before answering.
The merge takes the grants folder's lock, reads the file as it is NOW (the owner may have edited
it since brokerd started), checks it still parses, appends the rule, writes a temporary file
(the owner's mode kept), fsyncs it, renames it over the file and fsyncs the folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets

from boxmaker._toml import toml_array_item
from boxmaker.brokerd.grants import GrantsError, Lookup, Mode, Rule, parse_grants
from boxmaker.brokerd.tools.kind import Args, Target, Tool

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


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_GRANTS_BYTES + 1)
    if len(data) > MAX_GRANTS_BYTES:
        raise GrantsError(f"{path} is over {MAX_GRANTS_BYTES} bytes")
    return data


def merge(path: str, rule: Rule, table: Lookup) -> str | None:
    """Appends `rule` to the grants file at `path` as it is now. None when done, else why not
    (the file is then left as it was)."""
    folder = os.path.dirname(os.path.abspath(path))
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    tmp = ""
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)  # brokerd's other "always" answers wait here
        try:
            now = _read(path)
            parse_grants(now, table)
        except (OSError, GrantsError) as exc:
            return f"the grants file {path} cannot be amended as it is now: {exc}"
        text = now + (b"" if now.endswith(b"\n") or not now else b"\n")
        text += b"\n" + MARK + rule.to_toml().encode()
        parse_grants(text, table)  # what brokerd's next start reads
        tmp = f"{path}.{secrets.token_hex(4)}.tmp"
        mode = os.stat(path).st_mode & 0o777  # the owner's, kept
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = ""
        os.fsync(dfd)
        return None
    except (OSError, GrantsError) as exc:
        return f"the grants file {path}: {exc}"
    finally:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        os.close(dfd)  # and the lock with it
