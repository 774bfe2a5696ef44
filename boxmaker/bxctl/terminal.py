"""The parts of `bxctl chat` that exist only on a terminal (issue 30): its first lines, the
history file's place, what Ctrl-C does during a turn, the quit line and the local /help; and
the line for an approval that this chat cannot answer (in every mode: it goes to stderr).
"""

from __future__ import annotations

import contextlib
import difflib
import os
import signal
import termios
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from boxmaker._cli import Environment
from boxmaker._client.channel import Canceller, Show
from boxmaker.proto import ApprovalNeededEvent, ChannelBody
from boxmaker.proto.frame import Frame
from boxmaker.session.errors import SessionError

from .escape import continued, one_line
from .history import CONTINUED, Entry, describe, last_exchange, read_entries, turns_and_last
from .lineinput import history_file
from .stack import OWNER_SOCKET_ENV, Stack, tools_line

HISTORY_ENV = "BOXMAKER_CHAT_HISTORY"
HISTORY_NAME = "chat_history"
TYPING = (
    'Enter sends; Esc Enter, or a message in """ ... """, for several lines; Ctrl-C stops an '
    "answer, and at an empty prompt quits; /help lists the commands"
)
LOCAL_HELP = """commands (answered here, never sent to the model):
  /help, /?            this list
  /compact             fold the conversation so far into a new epoch now
  /quit, /exit, /bye   end the chat (Ctrl-D or Ctrl-C at an empty prompt too)
typing:
  Enter                send the message
  Esc Enter, Alt-Enter a new line in the message
  \"\"\" ... \"\"\"          several lines: Enter goes on until a line ends in \"\"\"
  Up, Down, Ctrl-R     the messages of earlier chats (kept in the history file, 0600)
  Ctrl-R               search them; Enter takes the match, Ctrl-C ends the search
  Ctrl-C               stop the answer being written (at an approval: no, and stop);
                       with text typed, clear it; at an empty prompt, or twice in an
                       answer, quit
"""
STOPPING = "\n[stopping the answer; Ctrl-C again quits]\n"


def real_terminal(env: Environment) -> bool:
    """stdin and stdout are the process's own terminal (not a test's in-memory streams)."""
    try:
        return os.isatty(env.stdin.fileno()) and os.isatty(env.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        return False


def history_path(arg: Path | None, stack: Stack, env: Environment) -> Path:
    """--history, else $BOXMAKER_CHAT_HISTORY, else `chat_history` in the home this chat's
    stack uses (when bxctl can write there), else ~/.local/state/boxmaker/chat_history; made
    0600 (lineinput.history_file)."""
    if arg is not None:
        return history_file(arg)
    if env.environ.get(HISTORY_ENV):
        return history_file(Path(env.environ[HISTORY_ENV]))
    if stack.home is not None and os.access(stack.home, os.W_OK):
        return history_file(stack.home / HISTORY_NAME)
    state = Path(env.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return history_file(state / "boxmaker" / HISTORY_NAME)


def greeting(session: str, new: bool, stack: Stack, width: int | None = None) -> str:
    """A terminal chat's first lines: new or resumed (with the last exchange), where approvals
    are answered, and how to type; wrapped at spaces to `width` when given."""
    lines: list[str] = []
    entries: list[Entry] = []
    known = False
    if not new and stack.home is not None:
        try:
            entries = read_entries(stack.home, session)
            known = True
        except (SessionError, OSError):
            pass  # no such session (it is made by the first turn), or one loopd will refuse
    if new:
        lines.append(f"new session {session}")
    elif stack.home is not None and not known:
        lines.append(f"new session {session}{_did_you_mean(stack.home, session)}")
    elif not known:
        lines.append(f"session {session} (resumed if it exists; no home known to read it from)")
    else:
        turns, last = turns_and_last(entries)
        lines.append(f"resumed {session}: {turns} turn{'s' if turns != 1 else ''}, last at {last}")
        for record in last_exchange(entries):
            lines += [
                continued(_shortened(line, session), "  ", "  " + CONTINUED)
                for line in describe(record)
            ]
    if stack.run is not None:
        lines.append(one_line(tools_line(stack.run)))  # from a log file
    if stack.owner_socket is not None:
        lines.append(f"[approvals: asked here, answered on brokerd's {stack.owner_socket}]")
    else:
        lines.append(f"[approvals: cannot be answered in this chat; use {stack.owner_hint()}]")
    lines.append(TYPING)
    return "".join(f"{line}\n" for line in fitted(lines, width))


def fitted(lines: list[str], width: int | None) -> list[str]:
    """`lines` wrapped at spaces to `width` columns (issue 39 item 7: at 40 columns every line
    broke mid-word), each further piece indented; a word longer than the width (a path) stays
    whole. None: as they are."""
    if width is None:
        return lines
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        lead = " " * (len(line) - len(line.lstrip(" ")))
        out += textwrap.wrap(
            line,
            width,
            subsequent_indent=lead + "  ",
            break_long_words=False,
            break_on_hyphens=False,
        ) or [line]
    return out


def columns(stream: TextIO) -> int | None:
    """The width of the terminal `stream` writes to; None when it is not one."""
    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else None
    except (AttributeError, OSError, ValueError):
        return None


RESUME_LINE_CHARS = 400  # a line of the last exchange on resume; `bxctl history` has it whole


def _shortened(line: str, session: str) -> str:
    if len(line) <= RESUME_LINE_CHARS:
        return line
    more = len(line) - RESUME_LINE_CHARS
    return f"{line[:RESUME_LINE_CHARS]}... ({more} more characters: bxctl history {session})"


def _did_you_mean(home: Path, session: str) -> str:
    """For a --session that does not exist: there is none, and the closest id when one is
    close (a mistyped id starts a new session, which the owner may not want)."""
    try:
        names = [p.name for p in (home / "sessions").iterdir() if p.is_dir()]
    except OSError:
        return ""
    close = difflib.get_close_matches(session, names, n=1, cutoff=0.8)
    if not close:
        return ""
    return f" (no session of that id in {home}; did you mean {one_line(close[0])}?)"


def unanswerable(show: Show, err: TextIO, stack: Stack) -> Show:
    """`show`, then for each approval this chat cannot answer, a line saying so at once."""

    def wrapped(frame: Frame, body: ChannelBody) -> None:
        show(frame, body)
        if isinstance(body, ApprovalNeededEvent):
            err.write(
                "[approval: this chat cannot answer it (no brokerd owner.sock known: "
                f"--owner-socket or ${OWNER_SOCKET_ENV}); answer it with {stack.owner_hint()}, "
                "or brokerd denies it when its approval wait ends]\n"
            )
            err.flush()

    return wrapped


def quit_line(session: str, stack: Stack) -> str:
    how = (
        f"make chat SESSION={session}"
        if stack.run is not None
        else f"bxctl chat --session {session}"
    )
    return f"session {session}: to go on with it, run `{how}`\n"


def drop_typeahead(fd: int) -> None:
    """Discards what was typed on the terminal and not read yet (issue 39 item 1: what the
    owner typed as the chat quit ran as shell commands)."""
    with contextlib.suppress(termios.error, OSError):
        termios.tcflush(fd, termios.TCIFLUSH)


@contextlib.contextmanager
def echo(fd: int | None, on: bool) -> Iterator[None]:
    """The terminal's echo turned on or off for a while, then put back (no terminal: nothing)."""
    try:
        old = termios.tcgetattr(fd) if fd is not None else None
    except (termios.error, OSError):
        old = None
    if fd is None or old is None:
        yield
        return
    new = list(old)
    new[3] = old[3] | termios.ECHO if on else old[3] & ~termios.ECHO
    with contextlib.suppress(termios.error, OSError):
        termios.tcsetattr(fd, termios.TCSANOW, new)
    try:
        yield
    finally:
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSANOW, old)


class StopOnInterrupt:
    """While a turn runs on a terminal: the first Ctrl-C stops the answer (a `cancel` on the
    turn's connection), the second quits. The handler writes straight to the terminal's fd, so it
    never re-enters a buffered stream the main thread is writing. With `tty` (the terminal's fd)
    what the owner types meanwhile is not echoed into the answer: the next prompt shows it."""

    def __init__(self, canceller: Canceller | None, err: TextIO, tty: int | None = None) -> None:
        self._canceller = canceller
        self._err = err
        self._old: Any = None
        self._quiet = echo(tty, False)

    def _handler(self, signum: int, frame: object) -> None:
        canceller = self._canceller
        if canceller is not None and canceller.asking:  # at an approval: no, and stop
            raise KeyboardInterrupt  # ends the question's read: approve.py answers no, then cancels
        if canceller is not None and canceller.cancel():
            with contextlib.suppress(OSError, ValueError):
                os.write(self._err.fileno(), STOPPING.encode())
            return
        raise KeyboardInterrupt

    def __enter__(self) -> None:
        self._quiet.__enter__()
        if self._canceller is not None:
            self._old = signal.signal(signal.SIGINT, self._handler)

    def __exit__(self, *exc: object) -> None:
        if self._canceller is not None:
            signal.signal(signal.SIGINT, self._old)
        self._quiet.__exit__(None, None, None)
