"""The channel's client side for `bxctl chat`: one connection to loop.sock per turn.

Per M2b section 6: connect, send one `turn` frame `{session, content, resume, thinking}`, read
frames until one has `final: true`, close. Every way that can fail (no loopd, a connection closed
before the final frame, a malformed frame) is a ChatError whose message is one line for a person;
nothing here prints.

`ChatSession` holds what carries over between turns: whether the next turn resumes. A turn that
loopd refuses because the session's existence is not what `resume` said (`no_such_session` to
`resume: true`, `session_exists` to `resume: false`) is sent again once with `resume` flipped, so
`--session <id>` creates an unknown id and a first turn that failed after creating its session
does not strand the next one.

Two bounds, so a chat never hangs: `connect_ms` for the connection to be accepted, `silence_ms`
for the longest gap between two frames of a turn. loopd says nothing while a turn waits for a
busy slot (up to `[inference] busy_wait_ms`, 10 minutes by default) or while the server reads a
long prompt without progress events, so the default silence bound, 15 minutes, is above those.

A turn can be stopped while it runs (issue 30): `Canceller.cancel()` (the chat's Ctrl-C) sends a
`cancel` frame on the turn's connection; loopd stops the turn and its final frame is
`error{stopped}`, which the client reads as any other.

`thinking` is sent only when the owner said (`--thinking`, `--no-thinking`); left out, loopd uses
its `[loop] thinking`.
"""

from __future__ import annotations

import errno
import secrets
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from boxmaker._defaults import DEFAULT_SOCKET, SOCKET_ENV
from boxmaker.proto import (
    BodyError,
    ChannelBody,
    EncodeError,
    FrameError,
    Turn,
    TurnDone,
    channel_frame,
    decode_body,
)
from boxmaker.proto.channel import cancel_frame
from boxmaker.proto.frame import CLOSED, NEED_DATA, Frame, FrameDecoder
from boxmaker.proto.ids import SESSION_ID_RE, SESSION_ID_RULE
from boxmaker.proto.wire import ErrorCode, WireError

RECV_BYTES = 65536
CONNECT_MS = 5000  # a loopd accepts at once; only a wedged one (a full backlog) takes longer
CONNECT_RETRY_S = 0.05
SILENCE_MS = 900_000  # above loopd's own silent waits (busy_wait_ms 600 s by default)

START_HINT = (
    "start it with `supervisorctl -c <your supervisord.conf> start loopd`, "
    "or `loopd serve --config <path>`"
)

# The refusal that says `resume` was wrong for this session, and the value that fixes it.
_FLIP: dict[tuple[bool, ErrorCode], bool] = {
    (True, ErrorCode.NO_SUCH_SESSION): False,
    (False, ErrorCode.SESSION_EXISTS): True,
}


class ChatError(Exception):
    """A turn could not be run or finished; str() is one line for stderr."""


class NotRunning(ChatError):
    """No loopd took the connection (no socket file, nothing listening): the turn was never
    sent, so sending it again later is safe."""


def socket_from(arg: Path | None, environ: Mapping[str, str]) -> Path:
    """`--socket`, else $BOXMAKER_SOCKET when set and not empty, else /run/loop/loop.sock."""
    if arg is not None:
        return arg
    env = environ.get(SOCKET_ENV)
    return Path(env) if env else DEFAULT_SOCKET


def new_session_id(now: float | None = None) -> str:
    """A fresh id: the UTC time to the second, then 8 random hex digits, as
    `20261201T144530Z-3f9a1c2b`, so `ls sessions/` lists sessions by age and two made in the
    same second still differ. It matches SESSION_ID_RE (starts with a digit; 0-9 A-Z and -)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    sid = f"{stamp}-{secrets.token_hex(4)}"
    assert SESSION_ID_RE.fullmatch(sid)
    return sid


def bad_session_id(sid: str) -> str | None:
    """Why `sid` is refused (naming the pattern), or None when it is a good id."""
    if SESSION_ID_RE.fullmatch(sid):
        return None
    shown = sid if len(sid) <= 40 else sid[:40] + "..."
    return (
        f"session id {shown!r} is refused: it must match {SESSION_ID_RE.pattern} "
        f"({SESSION_ID_RULE})"
    )


def turn_frame(
    session: str,
    content: str,
    *,
    resume: bool,
    thinking: bool | None,
    compact: bool = False,
    client_ref: str | None = None,
) -> bytes:
    """The `turn` frame (DECISIONS.md: `{session, content, resume, thinking}`; `thinking` left
    out when None).

    Raises:
        ChatError: the message does not fit in a frame.
    """
    try:
        return channel_frame(Turn(session, content, resume, thinking, compact or None, client_ref))
    except EncodeError as e:
        raise ChatError(f"the message cannot be sent: {e}") from None


def not_running(path: Path, why: str, hint: str = START_HINT) -> NotRunning:
    return NotRunning(f"loopd is not running ({why} at {path}); {hint}")


def check_socket(path: Path, hint: str = START_HINT) -> None:
    """Fails early, before a chat reads its first line, when there is no socket file at all.

    Raises:
        ChatError: nothing exists at `path`.
    """
    if not path.exists():
        raise not_running(path, "no socket file", hint)


class Canceller:
    """Stops the turn in flight: `cancel()` sends `cancel` on its connection, once. Safe to call
    from a signal handler (one send on a socket; nothing buffered is touched)."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None  # the turn's connection while one runs
        self.sent = False
        self.asking = False  # an approval's question is reading stdin (approve.py)

    def cancel(self) -> bool:
        """True when a cancel went out now; False when no turn runs or one was sent already."""
        sock = self.sock
        if sock is None or self.sent:
            return False
        self.sent = True
        try:
            sock.sendall(cancel_frame())
        except OSError:
            return False
        return True


def _connect(path: Path, connect_ms: int, hint: str = START_HINT) -> socket.socket:
    deadline = time.monotonic() + connect_ms / 1000
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(connect_ms / 1000)
        try:
            sock.connect(str(path))
            return sock
        except BlockingIOError:  # a full backlog: EAGAIN at once to a timed connect
            sock.close()
            if time.monotonic() < deadline:
                time.sleep(CONNECT_RETRY_S)
                continue
            raise _not_accepted(path, connect_ms) from None
        except TimeoutError:
            sock.close()
            raise _not_accepted(path, connect_ms) from None
        except (FileNotFoundError, ConnectionRefusedError) as e:
            sock.close()
            why = "no socket file" if isinstance(e, FileNotFoundError) else "nothing is listening"
            raise not_running(path, why, hint) from None
        except OSError as e:
            sock.close()
            if e.errno == errno.EACCES:
                raise ChatError(
                    f"cannot connect to loopd at {path}: permission denied "
                    "(loop.sock is for loopd's own user)"
                ) from None
            raise ChatError(f"cannot connect to loopd at {path}: {e.strerror or e}") from None


def _not_accepted(path: Path, connect_ms: int) -> ChatError:
    return ChatError(
        f"loopd did not accept the connection at {path} within {connect_ms} ms (it is wedged or "
        "flooded); --connect-timeout-ms or $BOXMAKER_CHAT_CONNECT_MS sets the bound"
    )


def exchange(
    path: Path,
    frame: bytes,
    connect_ms: int = CONNECT_MS,
    silence_ms: int = SILENCE_MS,
    canceller: Canceller | None = None,
    hint: str = START_HINT,
) -> Iterator[tuple[Frame, ChannelBody]]:
    """Runs one turn: yields each frame loopd sends, with its typed body, up to and including
    the final one; the connection is closed when the generator ends.

    Raises:
        ChatError: not running, not accepting within `connect_ms`, silent for `silence_ms`, the
            connection broke or closed before the final frame, or a frame or body was malformed.
    """
    sock = _connect(path, connect_ms, hint)
    sock.settimeout(silence_ms / 1000)
    if canceller is not None:
        canceller.sock, canceller.sent = sock, False
    try:
        try:
            sock.sendall(frame)
        except OSError as e:
            raise ChatError(f"loopd closed the connection before taking the turn: {e}") from None
        decoder = FrameDecoder()
        seen = 0
        while True:
            try:
                got = decoder.next_frame()
            except FrameError as e:
                raise ChatError(f"malformed frame from loopd: {e}") from None
            if got is NEED_DATA:
                try:
                    data = sock.recv(RECV_BYTES)
                except TimeoutError:
                    raise ChatError(
                        f"loopd sent nothing for {silence_ms} ms during the turn ({seen} frames "
                        "received); gave up waiting. The turn may still finish and be logged "
                        "(`bxctl verify`); --silence-ms or $BOXMAKER_CHAT_SILENCE_MS sets the bound"
                    ) from None
                except OSError as e:
                    raise ChatError(f"the connection to loopd broke: {e.strerror or e}") from None
                decoder.receive_data(data)
                continue
            if got is CLOSED:
                raise ChatError(
                    f"loopd closed the connection before the turn ended ({seen} frames received);"
                    " the turn may or may not be in the session's log (`bxctl verify`)"
                )
            try:
                body = decode_body(got)
            except BodyError as e:
                raise ChatError(f"malformed frame from loopd: {e}") from None
            if isinstance(body, Turn):
                raise ChatError("malformed frame from loopd: a `turn` frame (only bxctl sends one)")
            seen += 1
            yield got, body
            if got.final:
                return
    finally:
        if canceller is not None:
            canceller.sock = None
        sock.close()


Show = Callable[[Frame, ChannelBody], None]


@dataclass
class ChatSession:
    """One session as bxctl sees it.

    Args:
        resume: whether the next turn says `resume: true` (false for a new random id).
    """

    path: Path
    session: str
    resume: bool
    thinking: bool | None = None  # None: loopd's [loop] thinking
    connect_ms: int = CONNECT_MS
    silence_ms: int = SILENCE_MS
    canceller: Canceller | None = None  # set: the turn can be stopped through it
    hint: str = START_HINT  # how to start loopd, for the stack bxctl found

    def turn(
        self, content: str, show: Show, *, compact: bool = False, client_ref: str | None = None
    ) -> TurnDone | WireError:
        """Runs one turn, calling `show` for every frame but a refusal it answers with a retry.

        Returns:
            The final body: the turn's TurnDone, or its WireError.

        Raises:
            ChatError: as `exchange`.
        """
        retried = False
        while True:
            frame = turn_frame(
                self.session,
                content,
                resume=self.resume,
                thinking=self.thinking,
                compact=compact,
                client_ref=client_ref,  # M4: gatewayd's mm:<post id>
            )
            last: tuple[Frame, TurnDone | WireError] | None = None
            frames = exchange(
                self.path, frame, self.connect_ms, self.silence_ms, self.canceller, self.hint
            )
            for got, body in frames:  # ends after the final frame
                if isinstance(body, TurnDone | WireError):
                    last = got, body
                else:
                    show(got, body)
            assert last is not None  # exchange ends on a final frame or raises
            final_frame, final = last
            if isinstance(final, WireError):
                flip = _FLIP.get((self.resume, final.code))
                if flip is not None and not retried:
                    self.resume, retried = flip, True
                    continue
                if final.code is ErrorCode.STOPPED:
                    self.resume = True  # stopped after the session was made: it exists
            else:
                self.resume = True  # the session exists now
            show(final_frame, final)
            return final
