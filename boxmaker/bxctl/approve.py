"""The owner's side of an approval: the question in `bxctl chat` (issue 22) and `bxctl approve`
(issue 36 item 6), both on brokerd's owner.sock (`_client/owner.py`), never through loopd.

In a chat, when loopd relays brokerd's `approval_needed`, the chat reads the call from brokerd
(`pending`: the tool as brokerd parsed it, the whole call, why it asks, the grant "always" would
add, the call's hash, how long brokerd waits), lays it out (prompt.py) and, when it fits the
terminal, claims it, asks on stderr, reads lines of stdin and answers brokerd directly. A call too
long to be seen whole on this terminal is not asked here: one line says its size and to answer it
with `bxctl approve <id>`, which pages it (issue 37 item 6).

`bxctl approve [--owner-socket <path>]` lists the held calls; `bxctl approve <id>` shows one whole
(through $PAGER, else `less`, when it is longer than the terminal), escaped as the chat shows it,
and asks; `--show <id>` prints it whole without claiming it (to read it in a file); `--yes` /
`--no` answer without asking, for scripts.

Answers: y, n or a (or yes, no, always); anything else asks again, naming the answers (no
`[a]lways` where it adds no grant). EOF, or a chat that closes, leaves the claim unanswered,
which brokerd takes as a denial. Ctrl-C at the question (on a terminal) denies the call and, in a
chat, stops the answer, as Esc does at Codex's and Claude Code's: the Canceller is told a question
is open, so the first Ctrl-C interrupts the read instead of leaving it waiting. When brokerd's wait
ends while the question is open, the question ends with a line saying the call was denied, and an
answer brokerd refuses (too late, already answered) is printed with brokerd's reason.
"""

from __future__ import annotations

import argparse
import os
import select
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from boxmaker._cli import Environment, ExitStatus, isatty
from boxmaker._client.channel import Canceller
from boxmaker._client.owner import OwnerClient, OwnerRefused
from boxmaker.proto import ApprovalNeededEvent, ChannelBody
from boxmaker.proto.broker import HeldCall
from boxmaker.proto.errors import ProtocolError
from boxmaker.proto.frame import Frame

from .escape import one_line
from .prompt import MARK, choices, layout, layout_lines, question, rows, size_note, wait_note
from .stack import OWNER_SOCKET_ENV, find_stack
from .terminal import echo

WORDS = {"y": "yes", "yes": "yes", "a": "always", "always": "always", "n": "no", "no": "no"}
MAX_LINES_ENV = "BOXMAKER_APPROVAL_MAX_LINES"
MAX_LINES = 1_000  # a question longer than this is never asked in one go, terminal or not
HELP = "list the calls brokerd holds for the owner's answer, show one whole and answer it"
PROG = "bxctl approve"

Show = Callable[[Frame, ChannelBody], None]


class _Timeout:
    """brokerd's wait ended while the question was open."""


TIMEOUT = _Timeout()


def max_lines(env: Environment) -> int:
    raw = env.environ.get(MAX_LINES_ENV, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else MAX_LINES


def screen(stream: TextIO, env: Environment) -> tuple[int, int]:
    """(rows, columns) a question may take on `stream`: the terminal's, less a row for the
    answer, and never more than $BOXMAKER_APPROVAL_MAX_LINES; not a terminal: that alone."""
    bound = max_lines(env)
    try:
        size = os.get_terminal_size(stream.fileno()) if isatty(stream) else None
    except (OSError, ValueError, AttributeError):
        size = None
    if size is None:
        return bound, 1 << 16
    return min(bound, max(1, size.lines - 1)), max(1, size.columns)


def fits(held: HeldCall, stream: TextIO, env: Environment) -> tuple[bool, int, int]:
    """Whether the question fits, its rows, and the rows there are."""
    limit, cols = screen(stream, env)
    need = rows(held, cols)
    return need <= limit, need, limit


def _find(owner: OwnerClient, call_id: str) -> HeldCall | None:
    return next((h for h in owner.pending() if h.id == call_id), None)


def _peek(path: Path, call_id: str) -> HeldCall | None:
    """The held call, read without claiming it (its own connection); None when brokerd cannot
    list it (a `pending` of many large calls may not fit a frame)."""
    try:
        with OwnerClient(path) as owner:
            return _find(owner, call_id)
    except (OSError, ProtocolError, OwnerRefused):
        return None


def ask_owner(
    path: Path, event: ApprovalNeededEvent, env: Environment, canceller: Canceller | None = None
) -> str:
    """The chat's question: reads the call, claims it when it fits, asks, answers brokerd.
    Returns what was answered ("" for nothing)."""
    err = env.stderr
    try:
        seen = _peek(path, event.id)
        if seen is not None:
            ok, need, limit = fits(seen, err, env)
            if not ok:  # not claimed: it stays held for `bxctl approve`
                err.write(_too_long(seen, need, limit))
                err.flush()
                return ""
        with OwnerClient(path) as owner:
            try:
                held = owner.claim(event.id)
            except OwnerRefused as refused:
                err.write(f"[approval: brokerd says {one_line(str(refused))}]\n")
                return ""
            if seen is None and not (found := fits(held, err, env))[0]:
                # brokerd could not list it unclaimed: claimed now, so denied when this closes
                err.write(_too_long(held, found[1], found[2], claimed=True))
                return ""
            return ask(owner, held, env, err, canceller)
    except (OSError, ProtocolError) as exc:
        err.write(f"[approval: cannot reach brokerd's owner.sock at {path}: {exc}; denied]\n")
        return ""


def _too_long(held: HeldCall, need: int, limit: int, *, claimed: bool = False) -> str:
    size = f"({size_note(held.summary)}) takes {need:,} rows, more than the {limit:,}"
    then = (
        "denied (brokerd could not list it unclaimed for `bxctl approve`)"
        if claimed
        else f"see it whole and answer it with `bxctl approve {held.id}`{wait_note(held.wait_ms)}"
    )
    return (
        f"[approval: the call of {one_line(held.tool)} {size} this terminal shows at once, so "
        f"it is not asked here: {then}]\n"
    )


def ask(
    owner: OwnerClient,
    held: HeldCall,
    env: Environment,
    out: TextIO,
    canceller: Canceller | None = None,
    *,
    paged: bool = False,
) -> str:
    """Shows a claimed call (or, `paged`, its size and question alone) and asks until the owner
    gives an answer; answers brokerd. Returns the answer ("" for none)."""
    until = None if held.wait_ms is None else time.monotonic() + held.wait_ms / 1000
    marked = isatty(out)
    if paged:  # the call itself is in the pager: here, its size and the question
        mark = MARK if marked else ""
        out.write(f"{mark}[approval] the call of {one_line(held.tool)} ({size_note(held.summary)})")
        out.write(f" was shown in the pager\n{mark}{question(held, held.wait_ms)}")
    else:
        out.write(layout(held, marked=marked, wait_ms=held.wait_ms))
    out.flush()
    while True:
        line = _read_answer(env, canceller, until)
        if isinstance(line, _Timeout):
            out.write("\n[approval: no answer before brokerd's wait ended: it denied the call]\n")
            out.flush()
            return ""
        if line is None:  # Ctrl-C: no (in a chat, the cancel goes out once brokerd has it)
            stop = "; stopping the answer" if canceller is not None else ""
            out.write(f"\n[approval: Ctrl-C: denied{stop}]\n")
            answer = "no"
            break
        if not line:  # EOF: no answer; brokerd denies when this connection closes
            out.write("\n[approval: no answer (end of input): denied]\n")
            out.flush()
            return ""
        answer = WORDS.get(line.strip().lower(), "")
        if answer == "always" and not held.always:
            answer = ""
        if answer:
            break
        left = None if until is None else round((until - time.monotonic()) * 1000)
        out.write(f"please answer {choices(held)}{wait_note(left)}: ")
        out.flush()
    try:
        why = owner.answered(held.id, held.hash, answer)
    finally:
        if line is None and canceller is not None:
            # the owner's no is brokerd's record; the cancel after it stops the turn
            canceller.cancel()
    late = until is not None and time.monotonic() >= until
    if why is not None:
        reason = "too late: brokerd's wait had ended and it denied the call" if late else why
        out.write(f"[approval: {answer}: not taken: {one_line(reason)}]\n")
    else:
        granted = answer in ("yes", "always")
        out.write(f"[approval: {answer}: {'approved' if granted else 'denied'}]\n")
    out.flush()
    return answer if why is None else ""


def _read_answer(
    env: Environment, canceller: Canceller | None, until: float | None
) -> str | _Timeout | None:
    """A line of stdin ("" at EOF), None when Ctrl-C interrupted it, TIMEOUT past `until`."""
    if canceller is not None:
        canceller.asking = True
    try:
        with echo(_fd(env), True):  # the chat turns echo off while a turn runs
            fd = _fd(env)
            if fd is not None and until is not None:  # a terminal gives one line per read
                left = until - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    return TIMEOUT
            return env.stdin.readline()
    except KeyboardInterrupt:
        return None
    finally:
        if canceller is not None:
            canceller.asking = False


def _fd(env: Environment) -> int | None:
    try:
        return env.stdin.fileno() if env.stdin.isatty() else None
    except (AttributeError, OSError, ValueError):
        return None


def approving(show: Show, path: Path, env: Environment, canceller: Canceller | None = None) -> Show:
    """`show`, then the owner's question for each approval_needed event."""

    def wrapped(frame: Frame, body: ChannelBody) -> None:
        show(frame, body)
        if isinstance(body, ApprovalNeededEvent):
            ask_owner(path, body, env, canceller)

    return wrapped


# `bxctl approve`


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", nargs="?", help="the held call to show and answer (default: list)")
    parser.add_argument(
        "--owner-socket",
        type=Path,
        help=f"brokerd's owner.sock (default: ${OWNER_SOCKET_ENV}, else make run's)",
    )
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--show", action="store_true", help="print the call whole; answer nothing")
    how.add_argument("--yes", action="store_true", help="approve the call without asking")
    how.add_argument("--no", action="store_true", help="deny the call without asking")


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    path = find_stack(None, args.owner_socket, env.environ).owner_socket
    if path is None:
        env.stderr.write(
            f"{PROG}: brokerd's owner.sock is not known here: give --owner-socket <path> (or "
            f"${OWNER_SOCKET_ENV}), or run it from the checkout whose `make run` started brokerd\n"
        )
        return ExitStatus.USAGE
    if args.id is None and (args.show or args.yes or args.no):
        env.stderr.write(f"{PROG}: --show, --yes and --no need the call's id (`{PROG}` lists)\n")
        return ExitStatus.USAGE
    try:
        with OwnerClient(path) as owner:
            if args.id is None:
                return _list(owner, env)
            if args.show:
                return _show(owner, args.id, env)
            return _answer(owner, args, env)
    except OwnerRefused as refused:
        env.stderr.write(f"{PROG}: brokerd says {one_line(str(refused))}\n")
        return ExitStatus.ERROR
    except (OSError, ProtocolError) as exc:
        env.stderr.write(f"{PROG}: cannot reach brokerd's owner.sock at {path}: {exc}\n")
        return ExitStatus.ERROR


PREVIEW_CHARS = 60


def _list(owner: OwnerClient, env: Environment) -> ExitStatus:
    held = owner.pending()
    out = env.stdout
    if not held:
        out.write("no call is waiting for an answer\n")
    for h in held:
        first = one_line(h.summary.split("\n", 1)[0])
        first = first if len(first) <= PREVIEW_CHARS else first[: PREVIEW_CHARS - 3] + "..."
        out.write(f"{h.id}  {one_line(h.tool)}  ({size_note(h.summary)}){wait_note(h.wait_ms)}\n")
        out.write(f"    {first}\n")
    if held:
        out.write(f"see one whole and answer it: {PROG} <id>\n")
    out.flush()
    return ExitStatus.OK


def _show(owner: OwnerClient, call_id: str, env: Environment) -> ExitStatus:
    held = _find(owner, call_id)
    if held is None:
        env.stderr.write(f"{PROG}: no call {call_id!r} is waiting for an answer\n")
        return ExitStatus.ERROR
    env.stdout.write("".join(f"{line}\n" for line in layout_lines(held)))
    env.stdout.flush()
    return ExitStatus.OK


def _answer(owner: OwnerClient, args: argparse.Namespace, env: Environment) -> ExitStatus:
    out = env.stdout
    if args.yes or args.no:
        held = owner.claim(args.id)
        answer = "yes" if args.yes else "no"
        why = owner.answered(held.id, held.hash, answer)
        tool = one_line(held.tool)
        if why is not None:
            env.stderr.write(f"{PROG}: {answer} for {tool} not taken: {one_line(why)}\n")
            return ExitStatus.ERROR
        out.write(f"[approval: {answer} for {tool}: {'approved' if args.yes else 'denied'}]\n")
        return ExitStatus.OK
    seen = _find(owner, args.id)
    paged = False
    if seen is not None and not (found := fits(seen, out, env))[0]:
        # seen whole first, or not claimed at all: the call stays held for another way
        if not isatty(out) or not _page(seen, env):
            env.stderr.write(
                f"{PROG}: the call takes {found[1]:,} rows, more than the {found[2]:,} shown at "
                f"once, and no pager could show it: read it with `{PROG} --show {seen.id} > "
                "file`; it is still waiting for an answer\n"
            )
            return ExitStatus.ERROR
        paged = True
    held = owner.claim(args.id)
    if seen is not None and held.hash != seen.hash:  # never: brokerd's ids are unique
        owner.answered(held.id, held.hash, "no")
        env.stderr.write(f"{PROG}: the call changed while it was shown: denied\n")
        return ExitStatus.ERROR
    answer = ask(owner, held, env, out, paged=paged)
    return ExitStatus.OK if answer else ExitStatus.ERROR


def _page(held: HeldCall, env: Environment) -> bool:
    """The call through $PAGER (else `less`); False when there is none to run."""
    argv = shlex.split(env.environ.get("PAGER", "") or "less")
    if not argv or shutil.which(argv[0]) is None:
        return False
    text = "".join(f"{line}\n" for line in layout_lines(held))
    try:
        subprocess.run(argv, input=text.encode(), check=False)
    except OSError:
        return False
    return True
