"""The nudge rule (issue 40.2): one more completion when a turn's answer is advice, an
unsupported claim, or given without reading what it is about. [core]

A small tool model often answers an owner's request with instructions ("you can use the
`read_file` function..."), says a file was written when no call wrote it, or answers "which
letter is from the bank?" from the folder's names. With `[loop] nudge` on, a turn whose
completion has no tool call is judged here before it ends; the first rule that fits gives the
nudge:

- with no call at all this turn, **the call it wants** (wanted()): the owner asked to remember
  something (note), or named a web page (fetch), a folder (`reports/`: list_dir) or a file
  (`config.ini`: read_file); the answer cannot have come from it. Else, when the answer is
  advice or says it cannot (NUDGE_ADVICE);
- **claim**: the owner asked for a change (write, copy, save, note...; CHANGE_ASKED), the
  answer says something was written, saved, edited or noted, and no result of this turn supports
  it (write_file's `wrote `, edit_file's `edited `, note's `noted in `, or a shell run that did
  not fail) (NUDGE_CLAIM). Asked only to look ("List the files in box."), an answer such as
  "the files saved in box are..." is a description, not a claim: nudged, the model wrote files to
  make it true (verify-device's list_dir check, issue 40);
- **listed, not read**: the owner asked what files say ("which letter in letters/ is from the
  bank?": CONTENT_ASKED), the turn listed a folder of a few files and has not read them all (it
  answered from the names, or from the first file it read: "bakery.txt" for the receipt over
  100 euros);
- **intent**: the answer says it will make a call ("I'll call the `fetch` function on ...")
  and makes none (NUDGE_INTENT).

The nudge is an ordinary `user` record, known by its opening (_NUDGE_OPENING, with no marker
the model would read: a prefix cost the call): replay turns it into a user message like any
other, so a resumed session's request holds it byte for byte and the
prompt cache keeps hitting. At most NUDGES_PER_TURN a turn, never the same text twice, and each
spends one of the turn's tool rounds (`tool_iterations`): a turn that has used them all ends as
it would have. What is held before a call runs is turn.hold's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Final

from boxmaker.proto import Assistant, ToolCall, ToolResult, User
from boxmaker.proto.log import LogRecord
from boxmaker.proto.tool import call_tool_target, tool_and_arguments

# Before 2026-12-03 every nudge began "[loopd] "; on Qwen2.5-Coder any such prefix ("[loopd] ",
# "(loopd) ", "Reminder: ", "Owner: ") made the model repeat its advice where the bare instruction
# got the call (docs/decisions/agent-tasks.md, the probe). So a nudge is known by its opening.
# Two: told once, Qwen2.5-Coder often answered "I'll call the `fetch` function on ..." and
# stopped; a second, different text is one more round, and the same text twice never helps.
NUDGES_PER_TURN: Final = 2
NUDGE_ADVICE: Final = (
    "Do it yourself now with your tools instead of telling me how: call the tool "
    "(read or list first when it is about a file or folder), then answer from its result."
)
NUDGE_CLAIM: Final = (
    "No tool result in this turn shows that: nothing was written or noted. Call "
    "the tool now (read the file first if you need its text), or say plainly it was not done."
)
NUDGE_INTENT: Final = (
    "You said what you would call but sent no call. Send the tool call itself "
    "now, then answer from its result."
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
_INTENT = re.compile(
    r"\b(?:i'?ll|i will|i am going to|i'm going to|let me|i need to|i'll need to)\s+(?:now\s+)?"
    r"(?:call|use|fetch|run|read|list|open|check|look|write|edit|save|create|note)\b",
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
# The owner's message asks for something to be kept in memory (the note tool).
REMEMBER_ASKED: Final = re.compile(
    r"\b(?:remember|note|jot|memo|remind|forget|keep in mind|keep track)\b", re.I
)
# The owner asks what files say, which their names cannot tell ("which letter is from the bank",
# "which receipt was over 100 euros", "which note mentions the dentist", "which log in logs/ has
# an error in it?", "one of my recipes uses coconut milk. Which one?"): a question word and a
# word about content, in either order.
CONTENT_ASKED: Final = re.compile(
    r"(?=.*\b(?:which|what|who|where|when)\b)"
    r".*\b(?:mentions?|says?|said|contains?|talks?|about|from|over|under|more than|less than|"
    r"costs?|written|wrote|is in it|inside|has|uses?|used|includes?|holds?|in it|"
    r"in them|refers?)\b",
    re.I | re.S,
)
_NEGATED = re.compile(
    r"\b(?:not|no|never|denied|refused|declined|unable|cannot|failed)\b|n't\b", re.I
)
# How brokerd's result says a tool changed a file or a note (what supports a claim of it).
CHANGED_BY: Final = {"write_file": "wrote ", "edit_file": "edited ", "note": "noted in "}
_SUPPORTS = tuple(CHANGED_BY.values())
_MOST_TO_READ: Final = 10  # files of a listing the unread-files nudge asks to be read
# "remember that my code is 4471" -> note's text "my code is 4471"
_REMEMBER_LEAD = re.compile(
    r"^(?:please\s+)?(?:remember|make a note|note down|note|jot down|don'?t forget|keep in mind)"
    r"(?:\s+that\b|\s+of\b|\s*:)?\s*",
    re.I,
)
# How each nudge text opens (and the legacy prefix): how a replayed log tells loopd's user
# records from the owner's. Long, exact phrases an owner does not type.
_NUDGE_OPENING = re.compile(
    r"\[loopd\] |Do it yourself now with your tools instead of telling me how: "
    r"|No tool result in this turn shows that: |You said what you would call but sent no call\. "
    r"|Call (?:read_file|list_dir|fetch|note|edit_file) with \{.*\}\.\Z"
    r"|Now call write_file on .{1,4000} with its whole new text\.\Z"
    r"|Answer my question now, in words, from the text above\.\Z"
    r"|You have not read .{1,4000}? yet, and the answer may be in (?:it|them): ",
    re.S,
)
_URL = re.compile(r"\bhttps?://[^\s<>\"'`]+", re.I)
# a path the owner names: a name with a lettered extension (config.ini, notes/todo.txt) or a
# folder ending in a slash (reports/); not inside a URL, a version (1.5) or an e-mail address
_PATH = re.compile(
    r"(?<![\w@/.:-])((?:\./)?(?:[\w-]+/)*[\w-]+\.[A-Za-z][A-Za-z0-9]{0,5}|(?:[\w-]+/)+)(?![\w/@-])"
)
NOT_PATHS: Final = frozenset({"e.g", "i.e", "etc", "vs", "a.m", "p.m"})


def is_nudge(record: LogRecord) -> bool:
    """A user record loopd wrote (a nudge), not the owner's message."""
    return type(record) is User and _NUDGE_OPENING.match(record.content) is not None


def this_turn(records: Sequence[LogRecord]) -> tuple[Sequence[LogRecord], str]:
    """The records from the owner's message of this turn on (nudges are not the owner's), and
    that message."""
    for i in range(len(records) - 1, -1, -1):
        r = records[i]
        if isinstance(r, User) and not is_nudge(r):
            return records[i:], r.content
    return records, ""


def named_paths(message: str) -> list[str]:
    """The paths `message` names, in order (URLs, versions and addresses are not paths)."""
    found = (m.group(1).rstrip(".") for m in _PATH.finditer(_URL.sub(" ", message)))
    return [p for p in found if p.lower() not in NOT_PATHS]


def nudge(records: Sequence[LogRecord], answer: str) -> str | None:
    """The nudge for a completion with no tool call whose text is `answer`, with the turn's
    records so far (the owner's message last among the user records); None: the turn ends."""
    turn, owner = this_turn(records)
    given = [r.content for r in turn if isinstance(r, User) and is_nudge(r)]
    if len(given) >= NUDGES_PER_TURN:
        return None
    ran = answered_calls(turn)
    candidates: list[str | None] = []
    wrote = any(shows_write(name, content) for name, content in ran)
    if CHANGE_ASKED.search(owner) and _claims(answer) and not wrote:
        candidates.append(NUDGE_CLAIM)
    if not ran:
        candidates.append(wanted(owner))
        if _ADVICE.search(answer):
            candidates.append(NUDGE_ADVICE)
    if CONTENT_ASKED.search(owner):
        candidates.append(unread_listed(turn))
    if _INTENT.search(answer):
        candidates.append(NUDGE_INTENT)
    return next((c for c in candidates if c is not None and c not in given), None)


def wanted(message: str) -> str | None:
    """The nudge for an answer given with no call to a message that asks something be kept
    (note), or names something to read: its first URL (fetch), else its first path (list_dir
    for a folder, read_file for a file). Only the call, spelled out: on the probe the bare
    `Call list_dir with {"path": "scans/"}.` got the call 7 times of 7 where any sentence before
    it ("You answered without reading scans/.") or a prefix lost some."""
    if REMEMBER_ASKED.search(message):
        text = _REMEMBER_LEAD.sub("", message.strip(), count=1).rstrip(".!") or message
        return f"Call note with {json_args({'text': text})}."
    url = _URL.search(message)
    if url is not None:
        name, tool, arg = url.group(0).rstrip(".,;:!?)"), "fetch", "url"
    else:
        paths = named_paths(message)
        if not paths:
            return None
        name, arg = paths[0], "path"
        tool = "list_dir" if name.endswith("/") else "read_file"
    return f"Call {tool} with {json_args({arg: name})}."


def json_args(args: dict[str, str]) -> str:
    """The call's arguments as the model writes them: told the exact call, it makes it."""
    return json.dumps(args, ensure_ascii=False)


def unread_listed(turn: Sequence[LogRecord]) -> str | None:
    """The nudge for an answer about what files say given before every file of the folders
    the turn listed was read (a few files: a folder of many is a search, not a read)."""
    listed: list[str] = []
    read: set[str] = set()
    for call, result in calls_with_results(turn):
        tool, args = tool_and_arguments(call.name, call.arguments)
        path = args.get("path")
        if not isinstance(path, str) or failed(result):
            continue
        if tool == "read_file":
            read.add(plain_path(path))
        elif tool == "list_dir":
            folder = plain_path(path).rstrip("/")
            lines = result.splitlines()[1:]  # the first counts them (brokerd's list_dir)
            listed += [f"{folder}/{n}" if folder not in ("", ".") else n
                       for n in lines if n and not n.endswith("/")]  # fmt: skip
    unread = [p for p in dict.fromkeys(listed) if plain_path(p) not in read]
    if not unread or len(listed) > _MOST_TO_READ:
        return None
    return (
        f"You have not read {', '.join(unread)} yet, and the answer may be in "
        f"{'it' if len(unread) == 1 else 'them'}: file names do not say what a file holds. Call "
        "read_file on each, then answer from what they hold."
    )


def calls_with_records(records: Sequence[LogRecord]) -> list[tuple[ToolCall, ToolResult]]:
    """Each answered call of `records`, in call order, with its result record."""
    results = {r.tool_call_id: r for r in records if isinstance(r, ToolResult)}
    return [(c, results[c.id]) for r in records if isinstance(r, Assistant)
            for c in r.tool_calls if c.id in results]  # fmt: skip


def calls_with_results(records: Sequence[LogRecord]) -> list[tuple[ToolCall, str]]:
    """Each answered call of `records`, in call order, with its result's content."""
    return [(c, r.content) for c, r in calls_with_records(records)]


def plain_path(path: str) -> str:
    """A path as the owner and the model both may spell it (./A.TXT is a.txt)."""
    return path.strip().removeprefix("./").lower()


def _claims(answer: str) -> bool:
    """A sentence of `answer` says something was written, with no negation in it."""
    sentences = re.split(r"(?<=[.!?])\s+|\n+", answer)
    return any(_CLAIM.search(s) and not _NEGATED.search(s) for s in sentences)


def answered_calls(records: Sequence[LogRecord]) -> list[tuple[str, str]]:
    """(the tool run, its result's content) for each answered call of `records`."""
    return [(_target(c.name, c.arguments), result) for c, result in calls_with_results(records)]


def _target(name: str, arguments: str) -> str:
    """call_tool's target, or the name."""
    target = call_tool_target(name, arguments)
    return name if target is None else target


def failed(content: str) -> bool:
    """A result that says the call failed or did not run."""
    return content.startswith(("error:", "not run:"))


def shows_write(tool: str, content: str) -> bool:
    """Whether a result shows something was written. A shell run that did not fail may have
    written anything: a claim after one is not second-guessed."""
    return not failed(content) if tool == "shell" else content.startswith(_SUPPORTS)
