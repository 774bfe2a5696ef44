"""Calls held before they run (issue 40.2, `[loop] nudge`): a write made before what it is
written from was read, a file read through the shell, a note no one asked for; and the next
step added to a repeated call's answer. [core]

A small model otherwise writes invented text ("Copy of todo.txt") and says it is done, runs
`cat config.ini` through shell (which asks the owner, who may well say no) when read_file reads
it unasked, or answers "which of my notes mentions the dentist?" by writing a note. A held call
is answered `not run: ...` here with the call to make instead: it never reaches brokerd or the
owner, and it spends its round like any call. The rules assume the profile that turns the nudge
on offers the file tools (the qwen-coder profile's core).

- **read first** (read_first()): a write_file or edit_file whose owner's message names another
  file before the one written ("copy todo.txt to todo-backup.txt"), which no call of this turn
  has read or written; or one of a file the owner asked to change ("change the port in
  server.conf", "add milk to shopping.md": MODIFY_ASKED) before this turn read it, unless it is
  an edit_file whose old text the owner wrote out ('replace "flour" with "sugar"'): nothing in
  it is guessed, and brokerd refuses an old text the file does not hold.
- **read, not shell** (shell_read()): a shell command that only shows one file or lists one
  folder (`cat`, `head`, `tail`, `less`, `more`, `ls`; no pipe, redirect or glob) when the
  owner did not ask for the shell or a command.
- **a note not asked for** (unasked_note()): note when the owner's message asks nothing be
  remembered (REMEMBER_ASKED).
- **after a repeat** (after_repeat()): a repeated call's answer (turn.limits) also says, when the
  owner asked a named file to be changed and nothing is written yet, to write it now.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import Final

from boxmaker.loopd.turn.limits import REPEATED_NOTE
from boxmaker.loopd.turn.nudge import (
    CHANGE_ASKED,
    MODIFY_ASKED,
    NOT_PATHS,
    REMEMBER_ASKED,
    answered_calls,
    named_paths,
    shows_write,
    this_turn,
)
from boxmaker.proto import Assistant, ToolResult
from boxmaker.proto.log import LogRecord
from boxmaker.proto.tool import tool_and_arguments

WRITERS: Final = frozenset({"write_file", "edit_file"})
_TOUCHERS: Final = frozenset({"read_file", "list_dir", "write_file", "edit_file"})
_SHOWS: Final = {"cat": "read_file", "head": "read_file", "tail": "read_file",
                 "less": "read_file", "more": "read_file", "ls": "list_dir"}  # fmt: skip
_SHELL_ASKED = re.compile(
    r"\b(?:shell|command|terminal|console|bash|run|cat|head|tail|less|more|ls)\b", re.I
)
_MORE_THAN_A_READ = re.compile(r"[|;&<>`$*?(){}\[\]~\n]")


def hold(records: Sequence[LogRecord], name: str, arguments: str) -> str | None:
    """The `not run:` answer for a call held before it runs; None: the call runs."""
    return (
        read_first(records, name, arguments)
        or shell_read(records, name, arguments)
        or unasked_note(records, name, arguments)
    )


def read_first(records: Sequence[LogRecord], name: str, arguments: str) -> str | None:
    """The `not run:` result for a write that comes before the file the owner named as its
    source was read this turn; None: the call runs."""
    tool, args = tool_and_arguments(name, arguments)
    path = args.get("path") if tool in WRITERS else None
    if not isinstance(path, str) or not path:
        return None
    turn, owner = this_turn(records)
    named = named_paths(owner)
    target = _plain(path)
    if target not in map(_plain, named):
        return None  # the owner did not name this file: nothing says what it is copied from
    touched = {_plain(p) for p in _paths_touched(turn)}
    for source in named[: [_plain(n) for n in named].index(target)]:
        if source.endswith("/") or source.lower() in NOT_PATHS or _plain(source) in touched:
            continue
        return (
            f"not run: you have not read {source} in this turn. Call read_file on {source} "
            f"first, then {tool} {path} from what it holds."
        )
    old = args.get("old") if tool == "edit_file" else None
    given = isinstance(old, str) and old.strip() != "" and old in owner  # the owner's exact text
    if MODIFY_ASKED.search(owner) and target not in touched and not given:
        return (
            f"not run: you have not read {path} in this turn. You were asked to change it: call "
            f"read_file on {path} first, then {tool} it from what it holds, keeping the rest of "
            "its text."
        )
    return None


def shell_read(records: Sequence[LogRecord], name: str, arguments: str) -> str | None:
    """The `not run:` result for a shell command that only shows a file or lists a folder, which
    read_file or list_dir does without asking the owner; None: the call runs."""
    tool, args = tool_and_arguments(name, arguments)
    command = args.get("command") if tool == "shell" else None
    if not isinstance(command, str) or _MORE_THAN_A_READ.search(command):
        return None
    if _SHELL_ASKED.search(this_turn(records)[1]):
        return None  # the owner asked for the shell or a command: run what was asked
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    reader = _SHOWS.get(words[0]) if words else None
    paths = [w for w in words[1:] if not w.startswith("-")]
    if reader is None or len(paths) > 1 or (reader == "read_file" and not paths):
        return None
    path = paths[0] if paths else "."
    return (
        f"not run: {reader} shows {path} without asking the owner, and shell asks them. "
        f'Call {reader} with {{"path": "{path}"}} now.'
    )


def unasked_note(records: Sequence[LogRecord], name: str, arguments: str) -> str | None:
    """The `not run:` result for a note the owner's message did not ask for; None: it runs."""
    if tool_and_arguments(name, arguments)[0] != "note":
        return None
    owner = this_turn(records)[1]
    if REMEMBER_ASKED.search(owner):
        return None
    paths = named_paths(owner)
    where = (
        f"I asked about {', '.join(paths)}: use read_file, list_dir, write_file or edit_file on "
        f"{'it' if len(paths) == 1 else 'them'}."
        if paths
        else "To find something in my files, list_dir the folder that holds them and read_file "
        "the files."
    )
    return f"not run: note keeps what I ask you to remember, and I asked for nothing. {where}"


def after_repeat(records: Sequence[LogRecord]) -> str:
    """REPEATED_NOTE with the next step when the owner asked for a named file to be changed and
    this turn has written nothing: a small model that missed an edit reads the file again and
    again until the repeat rule ends the turn."""
    turn, owner = this_turn(records)
    if not (CHANGE_ASKED.search(owner) and named_paths(owner)):
        return REPEATED_NOTE
    if any(shows_write(tool, content) for tool, content in answered_calls(turn)):
        return REPEATED_NOTE
    return (
        f"{REPEATED_NOTE} Nothing is written yet: call edit_file now with old copied exactly "
        "from the file's text above, or write_file with the whole new text."
    )


def _plain(path: str) -> str:
    return path.strip().removeprefix("./").lower()


def _paths_touched(records: Sequence[LogRecord]) -> list[str]:
    """The paths the turn's answered calls read, listed or wrote (a failed read counts; a read
    asked in the same completion as the write does not: the write was made without its text)."""
    answered = {r.tool_call_id for r in records if isinstance(r, ToolResult)}
    out: list[str] = []
    for r in records:
        if isinstance(r, Assistant):
            for call in r.tool_calls:
                tool, args = tool_and_arguments(call.name, call.arguments)
                path = args.get("path")
                if call.id in answered and tool in _TOUCHERS and isinstance(path, str):
                    out.append(path)
    return out
