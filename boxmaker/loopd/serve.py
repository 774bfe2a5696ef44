"""`loopd serve --config <path>`: the self-test, then the channel on loop.sock (M2b section 8).

First `<home>/loopd.lock` is flocked for serve's life: one loopd per home (two keepers would
overwrite each other's state), so a second serve on the same home exits 1 saying so.

In order: a stale socket file at `[channel] socket` is removed (so clients see "not running"
rather than "connection refused" while the self-test runs); the self-test runs, and a failure
exits 1 with its findings; the socket is bound 0600 in a 0700 folder; one start line names the
socket, the compiled modules in use, the slots and the home. Then connections are accepted, each
peer checked with SO_PEERCRED, until SIGTERM, SIGINT or SIGHUP, with supervisor's loop: accept, then
`pool.transition()`, then `pool.reap()`.

Before the self-test, while the server answers that it is loading its model (HTTP 503, or a
router's proxy error), serve waits for it, polling /props every 0.5 s, at most
`[inference] load_wait_ms`; then the self-test judges whatever the server answers. So under
supervisord a loopd started beside a loading llama-server starts once, without retries.

On SIGTERM (and SIGINT, and SIGHUP: loopd has nothing to reload, since its workers run the
config it started with, so a hangup is a stop, never the default death with no drain; issue
29.7): no more connections; turns in flight may finish within `[channel] drain_ms`; those still
running are cut (their worker is killed: the log holds whole lines only) and answered
`unavailable`; the idle workers are stopped; exit 0.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from boxmaker._cli import Environment, ExitStatus
from boxmaker._daemon import SetupError
from boxmaker._daemon.accept import accept_until_stopped
from boxmaker._daemon.listener import bind_unix_listener, remove_stale_socket
from boxmaker._daemon.log import DaemonLog
from boxmaker._daemon.signals import stop_signals
from boxmaker._fast import IMPLEMENTATIONS  # filled in as the client imports the twins
from boxmaker.loopd.channel.locks import SessionLocks
from boxmaker.loopd.channel.server import ChannelServer
from boxmaker.loopd.config import Config, ConfigSource
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import HttpStatus, InferError
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.loopd.llama.retry import is_retryable
from boxmaker.loopd.prewarm import Say, prewarm
from boxmaker.loopd.selftest import run_selftest
from boxmaker.loopd.tools.port import tools_line
from boxmaker.loopd.workers.pool import Pool
from boxmaker.proto import is_session_id
from boxmaker.proto.errors import EncodeError
from boxmaker.session.errors import SessionError
from boxmaker.session.files import FILE_MODE, ensure_dir, open_regular, try_lock
from boxmaker.session.paths import LOG_NAME, SESSIONS_DIR

# Each one drains as SIGTERM does (a hangup of the terminal loopd runs on included).
DRAIN_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

PROG = "loopd"
SETTING = "[channel] socket"
# The longest the accept loop waits before it looks at the workers again: reaping needs no
# precision, only to happen.
REAP_INTERVAL_S = 1.0
LOAD_POLL_S = 0.5  # how often /props is asked while the server is loading its model
FIRST_LINE_BYTES = 64 << 10  # a SessionStart line is far shorter; its slot is all that is read


def compiled_modules() -> str:
    """`sse=c, chunked=c`: the twins loopd uses (DECISIONS.md: the compiled ones)."""
    return ", ".join(f"{name}={IMPLEMENTATIONS.get(name, '?')}" for name in ("sse", "chunked"))


def wait_until_loaded(
    props: Callable[[], object],
    load_wait_ms: int,
    say: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Asks `props` until it does not fail with "loading" (a retryable HTTP status), at most
    `load_wait_ms`; says once that it waits. True when the server answered something else."""
    deadline = clock() + load_wait_ms / 1000
    waiting = False
    while True:
        try:
            props()
        except HttpStatus as err:
            if not is_retryable(err):
                return True
            if clock() >= deadline:
                return False
            if not waiting:
                say(f"serve: the server is loading its model ({err}); waiting up to "
                    f"{load_wait_ms} ms (load_wait_ms)")  # fmt: skip
                waiting = True
        except InferError:
            return True  # not a loading server: the self-test says what it is
        else:
            return True
        sleep(LOAD_POLL_S)


def recent_sessions(home: Path, window_s: float, now: float) -> Iterator[tuple[str, int, float]]:
    """Each session whose log was written within `window_s` of `now` (wall clock): its id, its
    SessionStart slot and the log's mtime. What the gate's slot choice and the self-test's slot
    start from, so a restarted loopd still knows which slots hold live sessions."""
    try:
        entries = list(os.scandir(home / SESSIONS_DIR))
    except OSError:
        return
    for entry in entries:
        if not is_session_id(entry.name):
            continue
        path = Path(entry.path) / LOG_NAME
        try:
            fd = open_regular(path)
        except Exception:  # missing, a link, a FIFO: not a live session's
            continue
        try:
            mtime = os.fstat(fd).st_mtime
            if now - mtime > window_s:
                continue
            first = os.read(fd, FIRST_LINE_BYTES).split(b"\n", 1)[0]
        except OSError:
            continue
        finally:
            os.close(fd)
        try:
            start = orjson.loads(first)
        except orjson.JSONDecodeError:
            continue
        if isinstance(start, dict) and type(slot := start.get("slot")) is int:
            yield entry.name, slot, mtime


def slot_gate(config: Config) -> SlotGate:
    """The gate, told which slots the sessions active within slot_window_ms used."""
    window_s = config.inference.slot_window_ms / 1000
    gate = SlotGate(config.inference.queue_length, window_s)
    wall, mono = time.time(), time.monotonic()
    for session, slot, mtime in recent_sessions(config.paths.home, window_s, wall):
        if slot in config.inference.slots:
            gate.seen(slot, session, mono - (wall - mtime))
    return gate


HOME_LOCK = "loopd.lock"  # under [paths] home: flocked for serve's whole life


def prewarm_slots(client: Client, keeper: Any, selftest_slot: int, warn: Say) -> list[int]:
    """The slots the pre-warm fills: those no session holds (the keeper knows), else (slot
    saves off) the empty ones and the self-test's."""
    if keeper is not None:
        free: list[int] = keeper.free_slots()
        return free
    try:
        states = client.slots()
    except InferError as exc:
        warn(f"prewarm: GET /slots failed ({exc.describe()}); only the self-test's slot")
        return [selftest_slot]
    empty = {s.id for s in states if s.n_prompt_tokens == 0}
    return [s for s in client.config.slots if s in empty or s == selftest_slot]


def lock_home(home: Path) -> int:
    """Takes the home's lock, or says which loopd holds it: one loopd per home, since two
    keepers would overwrite each other's state. The lock dies with the process.

    Raises:
        SetupError: another loopd serve holds it, or the file cannot be made.
    """
    path = home / HOME_LOCK
    try:
        ensure_dir(home)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except (OSError, SessionError) as e:
        raise SetupError(f"cannot take the home's lock {path}: {e}") from e
    if not try_lock(fd):
        os.close(fd)
        raise SetupError(
            f"another loopd serve is running on the home {home} (it holds {path}); "
            "one loopd per home: stop it first, or give this one another [paths] home"
        )
    return fd


def run(source: ConfigSource, config: Config, env: Environment) -> ExitStatus:
    log = DaemonLog(PROG, env.stdout, env.stderr)
    try:
        home_lock = lock_home(config.paths.home)
    except SetupError as exc:
        log.warn(f"serve: {exc}")
        return ExitStatus.ERROR
    try:
        return _run(source, config, log)
    finally:
        os.close(home_lock)


def _run(source: ConfigSource, config: Config, log: DaemonLog) -> ExitStatus:
    path = str(config.channel.socket)
    try:
        remove_stale_socket(path, SETTING)
    except SetupError as exc:
        log.warn(f"serve: {exc}")
        return ExitStatus.ERROR
    client = Client(config.inference)
    wait_until_loaded(client.props, config.inference.load_wait_ms, log.say)
    gate = slot_gate(config)
    outcome = run_selftest(config, gate, log.say, log.warn, serving=True)
    keeper, failed = outcome.keeper, outcome.failed
    if failed:
        log.warn(
            f"serve: the self-test FAILED ({', '.join(failed)}); not starting against this "
            "server (see the lines above; `loopd selftest` runs it alone)"
        )
        return ExitStatus.ERROR
    if config.cache.prewarm:
        prewarm(config, client, prewarm_slots(client, keeper, outcome.slot, log.warn),
                keeper.copy_slot if keeper is not None else None, log.say, log.warn)  # fmt: skip
    with stop_signals(DRAIN_SIGNALS) as stop:
        try:
            listener = bind_unix_listener(path, setting=SETTING)
        except SetupError as exc:
            log.warn(f"serve: {exc}")
            return ExitStatus.ERROR
        clients = frozenset(config.channel.clients)
        if clients:  # M4: other users' clients (gatewayd); SO_PEERCRED admits exactly these
            os.chmod(path, 0o666)
        try:
            pool = Pool(source, config.channel, gate, keeper)
        except EncodeError as exc:
            log.warn(f"serve: the config cannot be handed to the workers: {exc}; shorten it")
            return ExitStatus.ERROR
        if keeper is not None:
            keeper.start()
        server = ChannelServer(config.channel, pool, SessionLocks(), log)

        def tick() -> float:
            due = pool.transition()
            for worker in pool.reap():
                code = worker.proc.returncode
                if code:
                    log.warn(f"session worker {worker.pid} ({worker.session}) exited with {code}")
            return REAP_INTERVAL_S if due is None else min(due, REAP_INTERVAL_S)

        try:
            log.listening(
                path,
                compiled_modules(),
                f"slots {','.join(map(str, config.inference.slots))}",
                f"home {config.paths.home}",
                f"one worker per session (idle exit after {config.channel.worker_idle_ms} ms)",
                tools_line(config.tools),
            )
            accept_until_stopped(
                listener.sock, stop, server.on_client, log, on_timer=tick, also_uids=clients
            )
        finally:
            listener.close()  # no new connections while the turns in flight drain
            server.stop_reading()
            cut = pool.stop(config.channel.drain_ms / 1000)
            if keeper is not None:
                log.say(f"cache: saved {keeper.drain()} slot(s) on the way out")
            open_left = server.join(config.channel.send_timeout_ms / 1000)
            log.say(
                f"stopped: {cut} turn(s) cut after drain_ms"
                + (f", {open_left} connection(s) left open" if open_left else "")
            )
    return ExitStatus.OK
