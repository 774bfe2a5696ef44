"""The nudge rule (issue 40.2): one more completion when a turn's answer is advice or an
unsupported claim. [core]

A small tool model often answers an owner's request with instructions ("you can use the
`read_file` function..."), or says a file was written when no call wrote it. With `[loop] nudge`
on, a turn whose completion has no tool call is judged here before it ends:

- **advice**: the turn made no call at all, and the answer tells the owner how to do it or says
  it cannot (NUDGE_ADVICE);
- **claim**: the owner asked for a change (write, copy, save, note...; CHANGE_ASKED), the
  answer says something was written, saved, edited or noted, and no result of this turn supports
  it (write_file's `wrote `, edit_file's `edited `, note's `noted in `, or a shell run that did
  not fail) (NUDGE_CLAIM). Asked only to look ("List the files in box."), an answer such as
  "the files saved in box are..." is a description, not a claim: nudged, the model wrote files to
  make it true (verify-device's list_dir check, issue 40);
- **unread**: the turn made no call at all, and the owner's message names a file, a folder or a
  web page (`config.ini`, `reports/`, `http://...`): the answer cannot have come from it
  (unread(): the nudge names it and the tool that reads it).

And before a call runs, **read first** (read_first()): a write_file or edit_file whose owner's
message names another file before the one written ("copy todo.txt to todo-backup.txt"), which
no call of this turn has read or written, is not run: its result says to read that file first.
So is one of a file the owner named and asked to change ("change the port in server.conf",
"add milk to shopping.md": MODIFY_ASKED) before this turn has read it, unless it is an edit_file
whose old text the owner wrote out ('replace "flour" with "sugar"'): nothing in it is guessed,
and brokerd refuses an old text the file does not hold.
A small model otherwise writes invented text ("Copy of todo.txt") and says it is done. It asks
the owner nothing (the call never reaches brokerd) and spends the call's round.

The nudge is an ordinary `user` record whose text starts with NUDGE_PREFIX: replay turns it into
a user message like any other, so a resumed session's request holds it byte for byte and the
prompt cache keeps hitting. At most one per turn, and it spends one of the turn's tool rounds
(`tool_iterations`): a turn that has used them all ends as it would have.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from boxmaker.proto import Assistant, ToolResult, User
from boxmaker.proto.log import LogRecord
from boxmaker.proto.tool import call_tool_target, tool_and_arguments

NUDGE_PREFIX: Final = "[loopd] "
NUDGE_ADVICE: Final = (
    NUDGE_PREFIX + "Do it yourself now with your tools instead of telling me how: call the tool "
    "(read or list first when it is about a file or folder), then answer from its result."
)
NUDGE_CLAIM: Final = (
    NUDGE_PREFIX + "No tool result in this turn shows that: nothing was written or noted. Call "
    "the tool now (read the file first if you need its text), or say plainly it was not done."
)

_ADVICE = re.compile(
    r"you can use|you could use|you can run|you can (?:open|read|check|find|create|add|edit)|"
    r"here'?s how|here is how|to do this,|you (?:would|will) need|you'?ll need|follow these|"
    r"(?:the|this) (?:following )?(?:command|code|function|tool)s? (?:will|would|can)|"
    r"\bi (?:cannot|can't|can not|am unable to|am not able to|don't have|do not have)\b|"
    r"\bi'm (?:unable|not able)\b|as an ai|please (?:provide|share|paste)|"
    r"provide (?:me with )?the (?:content|contents|text)|```(?!json)",
    re.I,
)
_CLAIM = re.compile(
    r"\b(?:i have|i've|has been|have been|successfully|is now|are now)\b[^.\n]{0,60}?"
    r"\b(?:written|wrote|created|saved|updated|edited|added|copied|changed|noted|replaced|"
    r"stored|appended|recorded|fixed|corrected)\b"
    r"|\b(?:written|saved|created|copied|added|appended|noted) (?:to|in|into|as)\b",
    re.I,
)
# The owner's message asks to change a file that is there (not to make one): its text must be read
# first, or a small model writes the whole file anew from a guess ("port = 9090" for a file of
# three lines) and the rest is lost.
MODIFY_ASKED: Final = re.compile(
    r"\b(?:change|edit|update|fix|correct|add|append|insert|replace|remove|delete|rename|"
    r"modify|swap|set)\b",
    re.I,
)
# The owner's message asks for something to be written, changed or remembered.
CHANGE_ASKED: Final = re.compile(
    r"\b(?:write|rewrite|save|copy|duplicate|create|make|edit|change|update|add|append|put|"
    r"rename|replace|insert|fix|correct|set|store|note|remember|record|delete|remove)\b",
    re.I,
)
_NEGATED = re.compile(
    r"\b(?:not|no|never|denied|refused|declined|unable|cannot|failed)\b|n't\b", re.I
)
_SUPPORTS = ("wrote ", "edited ", "noted in ")
_URL = re.compile(r"\bhttps?://[^\s<>\"'`]+", re.I)
# a path the owner names: a name with a lettered extension (config.ini, notes/todo.txt) or a
# folder ending in a slash (reports/); not inside a URL, a version (1.5) or an e-mail address
_PATH = re.compile(
    r"(?<![\w@/.:-])((?:\./)?(?:[\w-]+/)*[\w-]+\.[A-Za-z][A-Za-z0-9]{0,5}|(?:[\w-]+/)+)(?![\w/@-])"
)
_NOT_PATHS = frozenset({"e.g", "i.e", "etc", "vs", "a.m", "p.m"})


def is_nudge(record: LogRecord) -> bool:
    """A user record loopd wrote (a nudge), not the owner's message."""
    return type(record) is User and record.content.startswith(NUDGE_PREFIX)


def _turn_start(records: Sequence[LogRecord]) -> int:
    """The index of the owner's message of this turn (nudges are skipped)."""
    for i in range(len(records) - 1, -1, -1):
        if type(records[i]) is User and not is_nudge(records[i]):
            return i
    return 0


def nudge(records: Sequence[LogRecord], answer: str) -> str | None:
    """The nudge for a completion with no tool call whose text is `answer`, with the turn's
    records so far (the owner's message last among the user records); None: the turn ends."""
    turn = records[_turn_start(records) :]
    if any(is_nudge(r) for r in turn):
        return None  # one per turn
    ran = _calls(turn)
    if not ran and _ADVICE.search(answer):
        return NUDGE_ADVICE
    owner = turn[0].content if turn and type(turn[0]) is User else ""
    if (
        CHANGE_ASKED.search(owner)
        and _claims(answer)
        and not any(_supports(name, content) for name, content in ran)
    ):
        return NUDGE_CLAIM
    return unread(owner) if not ran else None


def unread(message: str) -> str | None:
    """The nudge for an answer given with no call to a message that names something to read:
    its first URL (fetch), else its first path (list_dir for a folder, read_file for a file)."""
    url = _URL.search(message)
    if url is not None:
        name, tool = url.group(0).rstrip(".,;:!?)"), "fetch"
    else:
        paths = (m.group(1).rstrip(".") for m in _PATH.finditer(_URL.sub(" ", message)))
        name = next((p for p in paths if p.lower() not in _NOT_PATHS), "")
        if not name:
            return None
        tool = "list_dir" if name.endswith("/") else "read_file"
    return (
        f"{NUDGE_PREFIX}You answered without reading {name}. Call {tool} on it now, then "
        "answer from what it holds."
    )


WRITERS: Final = frozenset({"write_file", "edit_file"})
_TOUCHERS: Final = frozenset({"read_file", "list_dir", "write_file", "edit_file"})


def read_first(records: Sequence[LogRecord], name: str, arguments: str) -> str | None:
    """The `not run:` result for a write that comes before the file the owner named as its
    source was read this turn; None: the call runs."""
    tool, args = tool_and_arguments(name, arguments)
    path = args.get("path") if tool in WRITERS else None
    if not isinstance(path, str) or not path:
        return None
    turn = records[_turn_start(records) :]
    owner = turn[0].content if turn and type(turn[0]) is User else ""
    named = [m.group(1).rstrip(".") for m in _PATH.finditer(_URL.sub(" ", owner))]
    target = _plain(path)
    if target not in map(_plain, named):
        return None  # the owner did not name this file: nothing says what it is copied from
    touched = {_plain(p) for p in _paths_touched(turn)}
    for source in named[: [_plain(n) for n in named].index(target)]:
        if source.endswith("/") or source.lower() in _NOT_PATHS or _plain(source) in touched:
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


def _claims(answer: str) -> bool:
    """A sentence of `answer` says something was written, with no negation in it."""
    sentences = re.split(r"(?<=[.!?])\s+|\n+", answer)
    return any(_CLAIM.search(s) and not _NEGATED.search(s) for s in sentences)


def _calls(records: Sequence[LogRecord]) -> list[tuple[str, str]]:
    """(the tool run, its result's content) for each answered call of `records`."""
    names: dict[str, str] = {}
    for r in records:
        if isinstance(r, Assistant):
            names.update((c.id, _target(c.name, c.arguments)) for c in r.tool_calls)
    results = [r for r in records if isinstance(r, ToolResult)]
    return [(names.get(r.tool_call_id, ""), r.content) for r in results]


def _target(name: str, arguments: str) -> str:
    """call_tool's target, or the name."""
    target = call_tool_target(name, arguments)
    return name if target is None else target


def _supports(tool: str, content: str) -> bool:
    """Whether a result shows something was written. A shell run that did not fail may have
    written anything: a claim after one is not second-guessed."""
    if tool == "shell":
        return not content.startswith(("error:", "not run:"))
    return content.startswith(_SUPPORTS)
