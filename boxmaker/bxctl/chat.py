"""`bxctl chat [--socket <path>] [--session <id>] [--thinking|--no-thinking] [--say <text>]
[--json]`.

A chat prints `session <id>` on stdout, then runs one turn per line of stdin until EOF or
`/quit`; blank lines are skipped; `/compact` folds the session's thread into a new epoch now
(issue 21) instead of sending a message. Content streams to stdout as it arrives, reasoning too
(dimmed on a terminal unless NO_COLOR is set), and tool calls and status events are one line each
(render.py has the table). A turn that ends in an `error` frame prints `error <code>: <message>`
on stderr and the chat goes on; the exit status is 0 at EOF or `/quit`.

`--say <text>` runs one turn: stdout carries exactly the answer (turn_done's content), and
`session <id>`, reasoning, tool and status lines go to stderr. Exit 0, or 1 with the error on
stderr.

`--json` prints, on stdout, first `{"session": "<id>"}`, then every frame body loopd sends, one
JSON object per line, so every line of stdout parses (`{"event": ...}`, then
`{"content": ..., "usage": ...}` or `{"code": ..., "message": ...}`). The refusal that bxctl
answers by retrying (no_such_session for a new --session id) is not printed. With `--say`, the
exit status says whether the turn succeeded.

In a chat, a message sent while the loopd that answered before is not running (a restart) waits
for it, saying so every few seconds, up to `--wait-loopd-ms` ($BOXMAKER_CHAT_WAIT_LOOPD_MS, 60 s),
and is sent when it is back; a connection nobody took is the only one tried again, so no turn
runs twice.

Whatever the mode, a loopd that is not running, a connection that closes before its final frame,
or a malformed frame is one line on stderr and exit 1; a bad --session id is exit 2. So is a
loopd that does not accept within `--connect-timeout-ms` ($BOXMAKER_CHAT_CONNECT_MS, 5 s) or
says nothing for `--silence-ms` ($BOXMAKER_CHAT_SILENCE_MS, 15 min) during a turn.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

import orjson

from boxmaker._cli import Environment, ExitStatus, isatty
from boxmaker._client.channel import (
    CONNECT_MS,
    SILENCE_MS,
    Canceller,
    ChatError,
    ChatSession,
    Show,
    bad_session_id,
    check_socket,
    new_session_id,
)
from boxmaker._defaults import DEFAULT_SOCKET, SOCKET_ENV
from boxmaker.proto import ChannelBody, Turn, TurnDone
from boxmaker.proto.frame import Frame
from boxmaker.proto.wire import WireError
from boxmaker.session.errors import SessionError

from .approve import approving
from .comeback import WAIT_ENV, WAIT_MS, turn_when_up
from .lineinput import Lines, PipeLines, TerminalLines
from .render import Piece, Renderer, Stream, use_color
from .stack import OWNER_SOCKET_ENV, Stack, find_stack
from .terminal import (
    HISTORY_ENV,
    HISTORY_NAME,
    LOCAL_HELP,
    StopOnInterrupt,
    columns,
    drop_typeahead,
    fitted,
    greeting,
    history_path,
    quit_line,
    real_terminal,
    unanswerable,
)

HELP = "talk to loopd: one turn per line of stdin, or one turn with --say"
PROG = "bxctl chat"
QUITS = ("/quit", "/exit", "/bye")
HELPS = ("/help", "/?")
COMPACT = "/compact"
CONNECT_ENV = "BOXMAKER_CHAT_CONNECT_MS"
SILENCE_ENV = "BOXMAKER_CHAT_SILENCE_MS"
MAX_MS = 86_400_000  # a day: any bound past it is a typo


def _ms(flag: str, arg: int | None, env_name: str, default: int, environ: Mapping[str, str]) -> int:
    """The flag, else the environment variable, else the default; 1 ms to a day.

    Raises:
        ValueError: naming the flag or variable and the allowed range.
    """
    where, raw = (flag, str(arg)) if arg is not None else (env_name, environ.get(env_name))
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_MS:
        raise ValueError(f"{where}: expected a whole number of ms from 1 to {MAX_MS}, got {raw!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--socket",
        type=Path,
        help=f"loopd's channel socket (default: ${SOCKET_ENV}, else make run's, else "
        f"{DEFAULT_SOCKET})",
    )
    parser.add_argument(
        "--session",
        metavar="ID",
        help="the session to talk in; created when it does not exist (default: a new random id)",
    )
    think = parser.add_mutually_exclusive_group()
    think.add_argument(
        "--thinking",
        dest="thinking",
        action="store_const",
        const=True,
        default=None,
        help="ask for reasoning on these turns (sends thinking: true; default: loopd's "
        "[loop] thinking)",
    )
    think.add_argument(
        "--no-thinking",
        dest="thinking",
        action="store_const",
        const=False,
        help="ask for no reasoning on these turns (sends thinking: false)",
    )
    parser.add_argument(
        "--say",
        metavar="TEXT",
        help="run one turn with TEXT: the answer on stdout, everything else on stderr",
    )
    parser.add_argument(
        "--json", action="store_true", help="print every frame body as one JSON line on stdout"
    )
    parser.add_argument(
        "--owner-socket",
        type=Path,
        help="brokerd's owner.sock: answer tool approvals here (a line of stdin each; default: "
        f"${OWNER_SOCKET_ENV}, else make run's)",
    )
    parser.add_argument(
        "--history",
        type=Path,
        metavar="FILE",
        help=f"the line editor's history file on a terminal (default: ${HISTORY_ENV}, else "
        f"{HISTORY_NAME} in the home, else ~/.local/state/boxmaker/{HISTORY_NAME})",
    )
    parser.add_argument(
        "--connect-timeout-ms",
        type=int,
        metavar="MS",
        help=f"give up when loopd does not accept within MS (default: ${CONNECT_ENV}, else "
        f"{CONNECT_MS})",
    )
    parser.add_argument(
        "--wait-loopd-ms",
        type=int,
        metavar="MS",
        help=f"in a chat, when loopd is not running as a message is sent (a restart), wait up to "
        f"MS for it to come back, then send (default: ${WAIT_ENV}, else {WAIT_MS})",
    )
    parser.add_argument(
        "--silence-ms",
        type=int,
        metavar="MS",
        help=f"give up when loopd sends nothing for MS during a turn (default: ${SILENCE_ENV}, "
        f"else {SILENCE_MS}; keep it above loopd's [inference] busy_wait_ms)",
    )


def _json_line(obj: object) -> str:
    return orjson.dumps(obj).decode() + "\n"


class _TextView:
    """Frames as text through a Renderer, each piece written and flushed as it comes."""

    def __init__(self, env: Environment, *, say: bool) -> None:
        events = env.stderr if say else env.stdout
        self._streams: dict[Stream, TextIO] = {
            Stream.ANSWER: env.stdout,
            Stream.EVENTS: events,
            Stream.ERRORS: env.stderr,
        }
        dim = use_color(isatty(events), env.environ)
        self._renderer = Renderer(
            dim=dim,
            split=say,
            stream_content=not say,
            live=isatty(events),
            width=lambda: columns(events),
        )

    def write(self, pieces: list[Piece]) -> None:
        touched: set[int] = set()
        for piece in pieces:
            stream = self._streams[piece.to]
            stream.write(piece.text)
            touched.add(id(stream))
        for stream in self._streams.values():
            if id(stream) in touched:
                stream.flush()

    def show(self, frame: Frame, body: ChannelBody) -> None:
        if isinstance(body, TurnDone):
            self.write(self._renderer.done(body))
        elif isinstance(body, WireError):
            self.write(self._renderer.error(body))
        else:
            assert not isinstance(body, Turn)  # exchange refuses a turn frame from loopd
            self.write(self._renderer.event(body))

    def cut(self) -> None:
        """A turn ended without its final frame: close the open lines before the reason."""
        self.write(self._renderer.close())


class _JsonView:
    def __init__(self, env: Environment) -> None:
        self._out = env.stdout

    def show(self, frame: Frame, body: ChannelBody) -> None:
        self._out.write(_json_line(frame.body))
        self._out.flush()

    def cut(self) -> None:
        pass


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    if args.session is not None and (why := bad_session_id(args.session)) is not None:
        env.stderr.write(f"{PROG}: {why}\n")
        return ExitStatus.USAGE
    if args.say is not None and not args.say.strip():
        env.stderr.write(f"{PROG}: --say needs some text to say\n")
        return ExitStatus.USAGE
    try:
        connect_ms = _ms(
            "--connect-timeout-ms", args.connect_timeout_ms, CONNECT_ENV, CONNECT_MS, env.environ
        )
        silence_ms = _ms("--silence-ms", args.silence_ms, SILENCE_ENV, SILENCE_MS, env.environ)
        wait_ms = _ms("--wait-loopd-ms", args.wait_loopd_ms, WAIT_ENV, WAIT_MS, env.environ)
    except ValueError as e:
        env.stderr.write(f"{PROG}: {e}\n")
        return ExitStatus.USAGE
    if args.say is None and not _readable(env.stdin):
        env.stderr.write(
            f"{PROG}: standard input is closed, so there is nothing to read; give the message "
            "with --say <text>, or run it on a terminal\n"
        )
        return ExitStatus.USAGE
    stack = find_stack(args.socket, args.owner_socket, env.environ)
    terminal = args.say is None and not args.json and real_terminal(env)
    # stdin typed on a terminal, stdout into a file or a pipe: the greeting and the prompt go to
    # the terminal on stderr (issue 39 item 7: they went into the file)
    redirected = (
        args.say is None
        and not args.json
        and not terminal
        and env.stdin_isatty
        and not isatty(env.stdout)
        and isatty(env.stderr)
    )
    new = args.session is None
    chat = ChatSession(
        path=stack.socket,
        session=new_session_id() if new else args.session,
        resume=not new,
        thinking=args.thinking,
        connect_ms=connect_ms,
        silence_ms=silence_ms,
        canceller=Canceller() if terminal else None,
        hint=stack.start_hint(),
    )
    view: _TextView | _JsonView = (
        _JsonView(env) if args.json else _TextView(env, say=args.say is not None)
    )
    header = env.stderr if args.say is not None and not args.json else env.stdout
    if terminal:  # no first lines for a chat that cannot start: the reason alone
        try:
            check_socket(chat.path, chat.hint)
        except ChatError as e:
            env.stderr.write(f"{PROG}: {e}\n")
            return ExitStatus.ERROR
        header.write(greeting(chat.session, new, stack, columns(header)))
    else:
        header.write(
            _json_line({"session": chat.session}) if args.json else f"session {chat.session}\n"
        )
        if redirected:  # `bxctl chat > file` typed on a terminal: greeted there, not in the file
            env.stderr.write(greeting(chat.session, new, stack, columns(env.stderr)))
            env.stderr.flush()
    header.flush()
    try:
        check_socket(chat.path, chat.hint)
        show: Callable[[Frame, ChannelBody], None] = view.show
        if stack.owner_socket is not None:  # approvals go straight to brokerd, never to loopd
            show = approving(show, stack.owner_socket, env, chat.canceller)
        else:
            show = unanswerable(show, env.stderr, stack)
        if args.say is not None:
            final = chat.turn(args.say, show)
            return ExitStatus.OK if isinstance(final, TurnDone) else ExitStatus.ERROR
        if terminal:
            try:
                lines: Lines = TerminalLines(history_path(args.history, stack, env), env.stderr)
            except (OSError, SessionError) as e:
                env.stderr.write(f"{PROG}: no history this time: {e}\n")
                lines = TerminalLines(None, env.stderr)
        else:
            prompt = "> " if env.stdin_isatty and not args.json else ""
            lines = PipeLines(env.stdin, env.stderr if redirected else env.stdout, prompt)
        return _loop(chat, env, show, lines, stack, terminal=terminal, wait_ms=wait_ms)
    except ChatError as e:
        view.cut()
        env.stderr.write(f"{PROG}: {e}\n")
        env.stderr.flush()
        return ExitStatus.ERROR


def _readable(stdin: TextIO | None) -> bool:
    """Whether stdin is there at all (`bxctl chat <&-` gives Python no sys.stdin)."""
    return stdin is not None and not getattr(stdin, "closed", False)


def _loop(
    chat: ChatSession,
    env: Environment,
    show: Show,
    lines: Lines,
    stack: Stack,
    *,
    terminal: bool,
    wait_ms: int = WAIT_MS,
) -> ExitStatus:
    """One turn per message, until the end of input, /quit, or Ctrl-C (on a terminal). A
    Ctrl-C anywhere (at the prompt, a second one in a turn, or one between a turn's end and the
    next prompt) quits with the line that names the session."""
    try:
        return _turns(chat, env, show, lines, stack, terminal=terminal, wait_ms=wait_ms)
    except KeyboardInterrupt:
        env.stdout.write("\n" + quit_line(chat.session, stack))
        env.stdout.flush()
        return ExitStatus.OK
    finally:
        if terminal:  # typed after the chat's last read: never the shell's next command
            drop_typeahead(env.stdin.fileno())


def _turns(
    chat: ChatSession,
    env: Environment,
    show: Show,
    lines: Lines,
    stack: Stack,
    *,
    terminal: bool,
    wait_ms: int = WAIT_MS,
) -> ExitStatus:
    reached = False  # some turn of this chat reached loopd
    while True:
        content = lines.read()  # KeyboardInterrupt: Ctrl-C at an empty prompt, or twice
        if content is None:
            if terminal:
                env.stdout.write(quit_line(chat.session, stack))
            env.stdout.flush()
            return ExitStatus.OK
        word = content.strip()
        if word in QUITS:
            if terminal:
                env.stdout.write(quit_line(chat.session, stack))
            return ExitStatus.OK
        if not word:
            continue
        if word in HELPS:
            help_lines = fitted(LOCAL_HELP.splitlines(), columns(env.stdout))
            env.stdout.write("".join(f"{line}\n" for line in help_lines))
            env.stdout.flush()
            continue
        tty = env.stdin.fileno() if terminal else None  # typed ahead: shown at the next prompt
        with StopOnInterrupt(chat.canceller, env.stderr, tty):  # a second Ctrl-C: KeyboardInterrupt
            # a loopd that answered before and is gone now is restarting: wait for it
            wait = wait_ms if reached else 0
            turn_when_up(chat, content, show, env.stderr, wait, compact=word == COMPACT)
            reached = True
