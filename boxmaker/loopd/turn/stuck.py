"""The next step after a round in which no call ran (issue 40.2, `[loop] nudge`). [core]

Once Qwen2.5-Coder has made a call in a turn it tends to keep calling: asked for a locker code,
it read notes.txt and then sent a note of the code three times over every `not run:` answer
(verify-device's read_file check, 8 codes of 8); told its edit of server.conf missed, it read
the file again and again; asked to count guests, it wrote their names and then noted the count.
Text in a tool's result did not move it (on the probe, six wordings of the held answer got the
same call, or a read); the same words as a user message did ("Answer my question now, in
words, from the text above.": 4 of 4 answered). So when every call of a round was answered
`not run:` (held by turn.hold, or a repeat), the turn gets one more user record naming the next
step, the first of:

- **the change owed**: the owner asked for a named file to be changed (not a question): read
  the file it comes from if this turn has not (`Call read_file with {...}.`); if the owner
  quoted the old text and its replacement ("'recieve' should be 'receive'") and the file read
  holds the old text once, that edit spelled out (`Call edit_file with {...}.`); else `Now call
  write_file on server.conf with its whole new text.` (a whole text after a read: on the probe
  the edits it tried instead were of text the file does not hold);
- **nothing read yet**: the call turn.nudge's wanted() names, or a listing of the workspace for
  a question about what files say;
- **the answer**: `Answer my question now, in words, from the text above.`

Nudges are turn.nudge's: known by their opening, NUDGES_PER_TURN a turn between both modules,
never the same text twice, each spending a round.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from boxmaker.loopd.turn.hold import QUESTION
from boxmaker.loopd.turn.nudge import (
    CHANGE_ASKED,
    CONTENT_ASKED,
    MODIFY_ASKED,
    NUDGES_PER_TURN,
    calls_with_results,
    failed,
    is_nudge,
    json_args,
    named_paths,
    plain_path,
    this_turn,
    unread_listed,
    wanted,
)
from boxmaker.proto import Assistant, User
from boxmaker.proto.log import LogRecord
from boxmaker.proto.tool import tool_and_arguments

NUDGE_ANSWER: Final = "Answer my question now, in words, from the text above."
WRITE_OPENING: Final = "Now call write_file on "
# 'recieve' should be 'receive'; replace "flour" with "sugar" (not the ' of "there's")
_QUOTED = re.compile(r"(?<!\w)(['\"])(.+?)\1(?!\w)")


def stuck(records: Sequence[LogRecord]) -> str | None:
    """The nudge after a round whose calls were all answered `not run:`; None: no nudge (a call
    ran, or the turn has had its nudges)."""
    turn, owner = this_turn(records)
    if not _ran_nothing(turn):
        return None
    given = [r.content for r in turn if isinstance(r, User) and is_nudge(r)]
    if len(given) >= NUDGES_PER_TURN:
        return None
    answered = [(tool_and_arguments(c.name, c.arguments), r) for c, r in calls_with_results(turn)]
    read = {
        plain_path(args["path"]): result
        for (tool, args), result in answered
        if tool == "read_file" and isinstance(args.get("path"), str) and not _held(result)
    }
    candidates = [_owed(owner, read)]
    if all(failed(result) for _, result in answered):
        candidates.append(wanted(owner))
    if CONTENT_ASKED.search(owner):
        candidates += [_search(owner, answered), unread_listed(turn)]
    candidates.append(NUDGE_ANSWER)
    return next((c for c in candidates if c is not None and c not in given), None)


def _owed(owner: str, read: dict[str, str]) -> str | None:
    """The step toward the change the owner asked of a named file; None: none is asked."""
    files = [p for p in named_paths(owner) if not p.endswith("/")]
    if not files or not CHANGE_ASKED.search(owner) or QUESTION.match(owner):
        return None
    *sources, target = files
    # the file changed must be read first too (port-change: told to write server.conf whole
    # before reading it, the model wrote "port = 9090\nother_config = value")
    unread = [*sources, target] if MODIFY_ASKED.search(owner) else sources
    for path in unread:
        if plain_path(path) not in read:
            return f"Call read_file with {json_args({'path': path})}."
    quoted = [m.group(2) for m in _QUOTED.finditer(owner)]
    text = read.get(plain_path(target))
    if text is not None and failed(text):
        text = None  # a new file
    if len(quoted) == 2 and text is not None and text.count(quoted[0]) == 1:
        old, new = quoted
        return f"Call edit_file with {json_args({'path': target, 'old': old, 'new': new})}."
    return f"{WRITE_OPENING}{target} with its whole new text."


def _search(owner: str, answered: list[tuple[tuple[str, dict[str, object]], str]]) -> str | None:
    """For a question about what files say: list the workspace, then the folder a listing
    showed that the question names ("which of my notes..." -> notes/), or the only one, then
    the listed files not yet read (turn.nudge's rule)."""
    listed: dict[str, str] = {}
    for (tool, args), result in answered:
        path = args.get("path")
        if tool == "list_dir" and isinstance(path, str) and not failed(result):
            listed[plain_path(path).rstrip("/") or "."] = result
    if not listed:
        return f"Call list_dir with {json_args({'path': '.'})}."
    folders = [
        f"{base}/{line}" if base != "." else line
        for base, result in listed.items()
        for line in result.splitlines()[1:]
        if line.endswith("/") and plain_path(f"{base}/{line}").rstrip("/") not in listed
    ]
    words = set(re.findall(r"\w+", owner.lower()))
    named = [f for f in folders if f.rstrip("/").rsplit("/", 1)[-1].lower() in words]
    if named or len(folders) == 1:
        return f"Call list_dir with {json_args({'path': (named or folders)[0]})}."
    return None


def _ran_nothing(turn: Sequence[LogRecord]) -> bool:
    """Whether every call of the turn's last completion was answered `not run:`."""
    last = next((r for r in reversed(turn) if isinstance(r, Assistant)), None)
    if last is None or not last.tool_calls:
        return False
    results = {c.id: r for c, r in calls_with_results(turn)}
    return all(results.get(c.id, "").startswith("not run:") for c in last.tool_calls)


def _held(content: str) -> bool:
    return content.startswith("not run:")
