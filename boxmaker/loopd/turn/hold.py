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
  folder (`cat`, `head`, `tail`, `less`, `more`, `grep`, `ls`, piped at most through `grep`,
  `head` or `tail`; no redirect, glob or substitution) when the owner did not ask for the shell
  or a command.
- **a note not asked for** (unasked_note()): note when the owner's message asks nothing be
  remembered (REMEMBER_ASKED).
- **a write not asked for** (unasked_write()): write_file or edit_file when the owner's
  message only asks to look (a question, or "read", "show", "tell me"...) and names no change
  (asked "Please read contacts.txt.", the model read it and wrote it back; the owner's answer
  is asked for a write no one wanted).
- **nothing lost** (lossy_write()): a write_file of a file this turn read, which keeps fewer than
  all but one of its lines, when the owner asked for a change and for nothing to go (asked to
  "put 'buy stamps' at the end of todo.md", the model wrote "mow lawn\nfix tap\nbuy stamps"
  over "- mow lawn\n- fix tap"; before a read, "port = 9090\nother_config = value" over a
  file of three lines).
- **after a repeat** (after_repeat()): a repeated call's answer (turn.limits) also says what to
  do next: that a call which failed or was held fails again; when the owner asked for a named
  file to be changed and nothing is written yet, to write it now.
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
    calls_with_records,
    calls_with_results,
    failed,
    named_paths,
    plain_path,
    shows_write,
    this_turn,
)
from boxmaker.proto.log import LogRecord
from boxmaker.proto.tool import tool_and_arguments

WRITERS: Final = frozenset({"write_file", "edit_file"})
_TOUCHERS: Final = frozenset({"read_file", "list_dir", "write_file", "edit_file"})
_SHOWS: Final = {"cat": "read_file", "head": "read_file", "tail": "read_file", "less": "read_file",
                 "more": "read_file", "grep": "read_file", "ls": "list_dir"}  # fmt: skip
_FILTERS: Final = frozenset({"grep", "head", "tail"})  # after a `|`: still only showing lines
_SHELL_ASKED = re.compile(
    r"\b(?:shell|command|terminal|console|bash|run|cat|head|tail|less|more|ls)\b", re.I
)
# "what did I write on the last line of journal.md?" asks nothing to be written
QUESTION: Final = re.compile(
    r"\s*(?:what|which|who|whose|where|when|why|how|is|are|did|does|do)\b.*\?\s*$", re.I | re.S
)
_MORE_THAN_A_READ = re.compile(r"[;&<>`$*?(){}\[\]~\n]")
# The owner's message opens by asking to look ("Please read contacts.txt.", "could you tell me
# what's on line 2 of list.txt?"); QUESTION is the other way to ask only that.
LOOK_ASKED: Final = re.compile(
    r"\s*(?:please\s+|can you\s+|could you\s+|would you\s+)?(?:read|show|tell|list|open|look|"
    r"check|find|count|summari[sz]e|describe|print|display|see|search|give me)\b",
    re.I,
)
# Verbs beyond CHANGE_ASKED's that still ask for a file to change ("check todo.md and tick off
# the milk", "read names.txt and sort it").
WRITE_HINTED: Final = re.compile(
    r"\b(?:sort|tidy|clean|capitali[sz]e|format|convert|turn|empty|clear|wipe|translate|move|"
    r"merge|fill|tick|mark|cross|strike|number|indent|reorder|reverse|upper-?case|lower-?case|"
    r"complete|finish|draft|compose|prepare|generate|produce|log|keep|mend|repair|amend|"
    r"overwrite)\b",
    re.I,
)
# The owner's message lets lines of a file go (or asks for the whole of it changed).
DROP_ASKED: Final = re.compile(
    r"\b(?:remove|delete|drop|clear|empty|wipe|erase|rewrite|overwrite|replace|cut|trim|shorten|"
    r"sort|reorder|reverse|translate|reformat|format|summari[sz]e|instead|only|all|every|each|"
    r"whole|entire)\b",
    re.I,
)


def hold(records: Sequence[LogRecord], name: str, arguments: str) -> str | None:
    """The `not run:` answer for a call held before it runs; None: the call runs."""
    return (
        unasked_write(records, name, arguments)
        or read_first(records, name, arguments)
        or lossy_write(records, name, arguments)
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
    target = plain_path(path)
    if target not in map(plain_path, named):
        return None  # the owner did not name this file: nothing says what it is copied from
    touched = {plain_path(p) for p in _paths_touched(turn)}
    for source in named[: [plain_path(n) for n in named].index(target)]:
        if source.endswith("/") or source.lower() in NOT_PATHS or plain_path(source) in touched:
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


def unasked_write(records: Sequence[LogRecord], name: str, arguments: str) -> str | None:
    """The `not run:` result for a write when the owner's message only asks to look; None: the
    call runs."""
    tool, args = tool_and_arguments(name, arguments)
    path = args.get("path")
    if tool not in WRITERS or not isinstance(path, str):
        return None
    owner = this_turn(records)[1]
    if not (QUESTION.match(owner) or LOOK_ASKED.match(owner)):
        return None
    if CHANGE_ASKED.search(owner) or WRITE_HINTED.search(owner):
        return None
    return (
        f"not run: I asked you to look, not to write: {path} stays as it is. Answer my "
        "question in words from what you have read."
    )


def lossy_write(records: Sequence[LogRecord], name: str, arguments: str) -> str | None:
    """The `not run:` result for a write_file that drops lines of a file this turn read, where
    the owner asked for a change that removes nothing; None: the call runs."""
    tool, args = tool_and_arguments(name, arguments)
    path, content = args.get("path"), args.get("content")
    if tool != "write_file" or not isinstance(path, str) or not isinstance(content, str):
        return None
    turn, owner = this_turn(records)
    if not CHANGE_ASKED.search(owner) or DROP_ASKED.search(owner):
        return None
    before = _known_text(turn, plain_path(path))
    lines = [x.rstrip() for x in (before or "").splitlines() if x.strip()]
    kept = {x.rstrip() for x in content.splitlines()}
    lost = [x for x in dict.fromkeys(lines) if x not in kept]
    if len(lines) < 2 or len(lost) <= 1:
        return None  # one line changed (a port, a typo) is what a change is
    shown = ", ".join(repr(x) for x in lost[:3]) + (", ..." if len(lost) > 3 else "")
    return (
        f"not run: this would lose {len(lost)} of the {len(lines)} lines {path} holds ({shown}), "
        f"and I asked for none to go. Call write_file on {path} with every line of its text "
        "above, exactly as written there, changed only where I asked."
    )


def _known_text(turn: Sequence[LogRecord], path: str) -> str | None:
    """What the owner's file at `path` holds as far as this turn's results show: its whole read
    (not a window or a cut one) with each edit of it applied; None: not known, or replaced by a
    write of this turn."""
    text: str | None = None
    for call, result in calls_with_records(turn):
        tool, args = tool_and_arguments(call.name, call.arguments)
        if not isinstance(args.get("path"), str) or plain_path(args["path"]) != path:
            continue
        if tool == "read_file":
            whole = not (result.truncated or args.get("offset") or args.get("limit"))
            text = result.content if whole and not failed(result.content) else None
        elif tool == "write_file" and result.content.startswith("wrote "):
            text = None  # its lines are the model's own, not the owner's (guest-count wrote
            # the names, then the count over them)
        elif tool == "edit_file" and result.content.startswith("edited "):
            old, new = args.get("old"), args.get("new")
            if text is not None and isinstance(old, str) and isinstance(new, str) and old in text:
                text = text.replace(old, new, 1)
            else:
                text = None
    return text


def shell_read(records: Sequence[LogRecord], name: str, arguments: str) -> str | None:
    """The `not run:` result for a shell command that only shows a file or lists a folder, which
    read_file or list_dir does without asking the owner; None: the call runs."""
    tool, args = tool_and_arguments(name, arguments)
    command = args.get("command") if tool == "shell" else None
    if not isinstance(command, str) or _MORE_THAN_A_READ.search(command) or "||" in command:
        return None
    if _SHELL_ASKED.search(this_turn(records)[1]):
        return None  # the owner asked for the shell or a command: run what was asked
    try:
        stages = [shlex.split(stage) for stage in command.split("|")]
    except ValueError:
        return None
    if not all(stages) or any(s[0] not in _FILTERS for s in stages[1:]):
        return None  # `cat a | wc -l` computes something: it runs, asking
    first = stages[0]
    reader = _SHOWS.get(first[0])
    operands = [w for w in first[1:] if not w.startswith("-")]
    if first[0] == "grep" and operands:
        operands = operands[1:]  # the pattern
    if reader is None or len(operands) > 1 or (reader == "read_file" and not operands):
        return None
    if reader == "list_dir" and len(stages) > 1:
        return None
    path = operands[0] if operands else "."
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
        else 'To find something in my files, call list_dir with {"path": "."} and read_file the '
        "files that could say it."
    )
    return f"not run: note keeps what I ask you to remember, and I asked for nothing. {where}"


def after_repeat(records: Sequence[LogRecord], name: str, arguments: str) -> str:
    """REPEATED_NOTE with the next step: when the call did not run or failed the first time
    (Qwen2.5-Coder sent read_file with offset -1 three times over the error), that it fails
    again; when the owner asked for a named file to be changed and this turn has written
    nothing, to write it now (a model that missed an edit read the file until the turn ended)."""
    turn, owner = this_turn(records)
    first = _first_result(turn, name, arguments)
    if first is not None and first.startswith(("error:", "not run:")):
        return (
            f"{REPEATED_NOTE} It did not run the first time and will not now: do what its "
            "answer says instead."
        )
    if not (CHANGE_ASKED.search(owner) and named_paths(owner)) or QUESTION.match(owner):
        return REPEATED_NOTE
    if any(shows_write(tool, content) for tool, content in answered_calls(turn)):
        return REPEATED_NOTE
    return (
        f"{REPEATED_NOTE} Nothing is written yet: call edit_file now with old copied exactly "
        "from the file's text above, or write_file with the whole new text."
    )


def _first_result(records: Sequence[LogRecord], name: str, arguments: str) -> str | None:
    """The result of the first call of `records` with this name and these arguments."""
    same = (r for c, r in calls_with_results(records) if (c.name, c.arguments) == (name, arguments))
    return next(same, None)


def _paths_touched(records: Sequence[LogRecord]) -> list[str]:
    """The paths the turn's answered calls read, listed or wrote (a failed read counts; a read
    asked in the same completion as the write does not: the write was made without its text)."""
    out: list[str] = []
    for call, _ in calls_with_results(records):
        tool, args = tool_and_arguments(call.name, call.arguments)
        path = args.get("path")
        if tool in _TOUCHERS and isinstance(path, str):
            out.append(path)
    return out
