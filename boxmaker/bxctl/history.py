"""`bxctl history <session> [--home <path>] [--json]`: a session's conversation, from its log.

Read-only and lock-free, beside a running loopd, like `bxctl verify`: every epoch is checked
(the chain and the links between epochs) and then shown in order, each record once (the turns an
epoch keeps verbatim from the one before are shown where they first happened). A line per
record: the owner's messages, the answers (and their reasoning's size), each tool call with its
arguments, each result with its class and whether it was untrusted or cut, a turn the owner
stopped, the cache's saves and losses, and each compaction with its summary. Text from the log
is shown with its control and format characters escaped (escape.py). `--json` prints one object
per entry instead, `{"epoch", "seq", "type", "time", ...}`, the record's own fields.

Approvals are not in the session's log: brokerd's decision log holds them. When bxctl can read
it (decisions.py says which file), each tool call brokerd decided is followed by a line saying
who decided what: `approval: asked (...); the owner answered yes: approved`, `... no answer
before brokerd's approval wait ended: denied`, `denied by the grants: ...` (a call the grants
allowed has no line), and `--json` by an `{"type": "approval", "call": <n>, "decision", "answer",
"by", "approved", ...}` object after its assistant record. When it cannot, stderr says why.

`last_exchange` is what `bxctl chat` shows when it resumes a session: the owner's last message
and what came after it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from boxmaker._cli import Environment, ExitStatus
from boxmaker.proto import (
    Assistant,
    CacheLoss,
    CacheRestored,
    CacheSaved,
    EpochEnd,
    SessionStart,
    Stopped,
    ToolResult,
    Usage,
    User,
    is_session_id,
)
from boxmaker.proto.log import LogRecord, encode_line
from boxmaker.session.epoch_files import check_chain
from boxmaker.session.epochs import kept_records
from boxmaker.session.errors import SessionError
from boxmaker.session.paths import session_dir

from . import decisions
from .decisions import Asked, Matcher
from .escape import continued, one_line, visible
from .stack import add_home_argument, home_for

HELP = (
    "print a session's conversation from its log: turns, tool calls and results, approvals, epochs"
)
PROG = "bxctl history"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the session's id")
    add_home_argument(parser)
    parser.add_argument(
        "--broker-log",
        type=Path,
        metavar="LOG",
        help=f"brokerd's decision log, for the approvals (default: ${decisions.BROKER_LOG_ENV}, "
        "else make run's)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per entry")


@dataclass(frozen=True, slots=True)
class Entry:
    epoch: int
    seq: int
    record: LogRecord


def read_entries(home: Path, session: str) -> list[Entry]:
    """Every record of every epoch, once, in order.

    Raises:
        SessionError: the session is missing or its log does not verify (the message names the
            file and the line).
    """
    path = session_dir(home, session)
    if not path.is_dir():
        raise SessionError(f"no such session ({path} does not exist)")
    epochs = check_chain(session, path)
    out: list[Entry] = []
    copied = 0  # records at the head of this epoch's log (after its start) shown in the last
    for epoch in epochs:
        records = epoch.checked.records
        out.extend(Entry(epoch.n, seq, records[seq]) for seq in range(1 + copied, len(records)))
        end = records[-1]
        if isinstance(end, EpochEnd):  # the next epoch's log starts with these, verbatim
            copied = len(kept_records(records))
    return out


def _text(text: str | None) -> str:
    return "" if text is None else visible(text).text


def describe(record: LogRecord) -> Iterator[str]:
    """The lines of one record for a person (no newlines at their ends)."""
    match record:
        case User(content=content):
            yield f"you: {_text(content)}"
        case Assistant(content=content, reasoning_content=reasoning, tool_calls=calls):
            if reasoning:
                yield f"(reasoning: {len(reasoning)} characters)"
            if content:
                yield f"assistant: {_text(content)}"
            for call in calls:
                yield f"tool call {one_line(call.name)} {one_line(call.arguments)}"
        case ToolResult(call=call, content=content, class_=cls, untrusted=untrusted):
            flags = [cls.value] + (["untrusted"] if untrusted else [])
            flags += ["truncated"] if record.truncated else []
            yield f"tool result #{call} ({', '.join(flags)}): {_text(content)}"
        case Stopped(shown=shown):
            yield "[stopped by the owner" + (f" after: {_text(shown)}]" if shown else "]")
        case Usage(cache_n=cache_n, prompt_n=prompt_n, predicted_n=predicted_n):
            yield f"[usage: {cache_n} cached, {prompt_n} read, {predicted_n} generated tokens]"
        case CacheLoss(expected=expected, got=got):
            yield f"[cache loss: expected {expected} cached tokens, got {got}]"
        case CacheSaved(tokens=tokens) | CacheRestored(tokens=tokens):
            yield f"[{record.TAG.replace('_', ' ')}: {tokens} tokens]"
        case EpochEnd(epoch=epoch, summary=summary):
            yield f"[compacted: epoch {epoch} ended, epoch {epoch + 1} began; the summary:]"
            yield from (f"  {line}" for line in _text(summary).split("\n"))
        case SessionStart(slot=slot):
            yield f"[session started on slot {slot}]"


CONTINUED = "| "  # before each further line of one record's text


def record_line(time: str, line: str) -> str:
    """`  <time>  <line>`; a line of several (a message with newlines) goes on under the text,
    each further line marked, so text from the model or a tool can never print as a record line
    of its own, a forged `approval of shell: ... approved` included (issue 37 item 5)."""
    return continued(line, f"  {time}  ", " " * (len(time) + 4) + CONTINUED)


def entry_json(entry: Entry) -> dict[str, Any]:
    line = orjson.loads(encode_line(entry.record, entry.seq, "0" * 64))
    line.pop("prev", None)
    return {"epoch": entry.epoch, **line}


def last_exchange(entries: Sequence[Entry]) -> list[LogRecord]:
    """The owner's last message and what the turn kept after it (answers, calls, results)."""
    starts = [i for i, e in enumerate(entries) if isinstance(e.record, User)]
    if not starts:
        return []
    shown = (User, Assistant, ToolResult, Stopped)
    return [e.record for e in entries[starts[-1] :] if isinstance(e.record, shown)]


def turns_and_last(entries: Sequence[Entry]) -> tuple[int, str | None]:
    """How many turns (owner messages) the session has, and its last record's time."""
    turns = sum(isinstance(e.record, User) for e in entries)
    return turns, (entries[-1].record.time if entries else None)


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    if not is_session_id(args.session):
        env.stderr.write(f"{PROG}: {args.session!r} is not a session id\n")
        return ExitStatus.USAGE
    home = home_for(args.home, env.environ)
    try:
        entries = read_entries(home, args.session)
    except (SessionError, OSError) as e:
        env.stderr.write(f"{PROG}: session {args.session}: {e}\n")
        return ExitStatus.ERROR
    asks = _asks(args, env, entries)
    matcher = Matcher(asks or [])
    out = env.stdout
    epoch = -1
    for entry in entries:
        calls = entry.record.tool_calls if isinstance(entry.record, Assistant) else ()
        approvals = [(i, matcher.take(entry.epoch, call)) for i, call in enumerate(calls)]
        if args.json:
            out.write(orjson.dumps(entry_json(entry)).decode() + "\n")
            for i, asked in approvals:
                if asked is not None:
                    out.write(orjson.dumps(approval_json(entry, i, asked)).decode() + "\n")
            continue
        if entry.epoch != epoch:
            epoch = entry.epoch
            out.write(f"epoch {epoch}\n")
        for line in describe(entry.record):
            out.write(record_line(entry.record.time, line) + "\n")
        for i, asked in approvals:
            if asked is not None and (asked.mode != "allow" or asked.answer is not None):
                tool = one_line(calls[i].name if asked.tool == calls[i].name else asked.tool)
                line = f"approval of {tool}: {visible(decisions.describe(asked)).text}"
                out.write(record_line(one_line(asked.time), line) + "\n")
    out.flush()
    return ExitStatus.OK


def approval_json(entry: Entry, call: int, asked: Asked) -> dict[str, Any]:
    return {"epoch": entry.epoch, "seq": entry.seq, "type": "approval", "call": call,
            **asked.to_json()}  # fmt: skip


def _asks(args: argparse.Namespace, env: Environment, entries: Sequence[Entry]) -> list[Asked]:
    """brokerd's decisions on the session's calls; [] (and why, on stderr) when they cannot be
    read. Nothing is said for a session with no tool call."""
    if not any(isinstance(e.record, Assistant) and e.record.tool_calls for e in entries):
        return []
    path = decisions.broker_log_for(args.broker_log, args.home, env.environ)
    why = None
    if path is None:
        why = "brokerd's decision log is not known here (--broker-log <brokerd's [broker] log>)"
    else:
        try:
            return decisions.read_asks(path, args.session)
        except OSError as e:
            why = f"{path}: {e.strerror or e}"
        except decisions.ChainError as e:
            why = f"{path} does not verify: {e}"
    env.stderr.write(f"{PROG}: approvals are not shown: {why}\n")
    return []
