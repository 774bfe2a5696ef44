"""Every slot used (issue 19), against the REAL llama-server with --cache-ram 0 and two slots.

Nothing but Boxmaker's own mechanisms can make a cache hit here: the slot a session keeps, the
self-test kept off the slot a session lives on, and the keeper's saves and restores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from boxmaker.proto import (
    CacheLoss,
    CacheRestored,
    CacheSaved,
    ContentEvent,
    SessionStart,
    Turn,
    TurnDone,
    channel_frame,
    decode_body,
)
from boxmaker.proto.frame import CLOSED, NEED_DATA, FrameDecoder
from tests.support.loopd.cache import (
    BOUND_S,
    CacheStack,
    first_usage,
    hits,
    notes,
    previous_total,
    turns,
)
from tests.support.serve import connect

OFF = {"slot_save": False}
LONG = "Count from one to forty in words, one number a line."


def slot_of(cs: CacheStack, session: str) -> int:
    start = cs.records(session)[0]
    assert isinstance(start, SessionStart)
    return start.slot


def kinds(records: Sequence[object], kind: type) -> list[object]:
    return [r for r in records if isinstance(r, kind)]


def streamed(cs: CacheStack, session: str, out: dict[str, list[float]]) -> None:
    """A new session's turn; `out[session]`: when each of its content events arrived."""
    times: list[float] = []
    decoder = FrameDecoder()
    with connect(cs.dir / "loop.sock", BOUND_S) as sock:
        sock.sendall(channel_frame(Turn(session, LONG, False, thinking=False)))
        while True:
            frame = decoder.next_frame()
            if frame is CLOSED:
                break
            if frame is NEED_DATA:
                decoder.receive_data(sock.recv(65536))
                continue
            body = decode_body(frame)
            if isinstance(body, ContentEvent):
                times.append(time.monotonic())
            if frame.final:
                assert isinstance(body, TurnDone), body
                break
    out[session] = times


def test_two_sessions_started_together_stream_at_once() -> None:
    with CacheStack(slots=2, cache=OFF, inference={"max_tokens": 96}) as cs:
        cs.start_loopd()
        for session in ("warm-a", "warm-b"):  # both slots hold the system prompt from now on
            cs.turn(session, "Say hello.", resume=False)
        alone: dict[str, list[float]] = {}
        for session in ("one-a", "one-b"):  # one after the other: the queue's figure
            start = time.monotonic()
            streamed(cs, session, alone)
            alone[session] = [start, alone[session][-1]]
        got: dict[str, list[float]] = {}
        threads = [threading.Thread(target=streamed, args=(cs, s, got)) for s in ("two-a", "two-b")]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(BOUND_S)
        pair = max(times[-1] for times in got.values()) - start
        a, b = got["two-a"], got["two-b"]
        # Both answers stream at the same time: each one's tokens arrive before the other's end.
        assert a, "two-a streamed no content"
        assert b, "two-b streamed no content"
        assert a[0] < b[-1], (a[0], b[-1])
        assert b[0] < a[-1], (b[0], a[-1])
        assert {slot_of(cs, s) for s in ("two-a", "two-b")} == {0, 1}
        sequential = sum(end - begin for begin, end in alone.values())
        print(f"two sessions: {pair:.2f} s at once against {sequential:.2f} s one after the other")


def test_with_slot_save_off_a_loopd_restart_keeps_the_sessions_cache() -> None:
    with CacheStack(slots=2, cache=OFF) as cs:
        cs.start_loopd()
        cs.turn("keep", f"Say hello. {notes('keep')}", resume=False)
        before = cs.records("keep")
        cs.stop_loopd()
        cs.start_loopd()  # its self-test runs on the slot no session lives on
        cs.turn("keep", "Now say goodbye.")
        after = turns(cs.records("keep"))[-1]
        assert hits(previous_total(before), first_usage(after)), (before[-1], after)
        assert not kinds(after, CacheLoss)


def test_four_sessions_alternating_on_two_slots_hit_the_cache_every_time() -> None:
    sessions = ("four-a", "four-b", "four-c", "four-d")
    with CacheStack(slots=2, cache={"idle_save_ms": 600_000}) as cs:
        cs.start_loopd()
        said = ["Say hello.", "Name a colour.", "Name a fruit."]
        for i, text in enumerate(said):
            for session in sessions:
                previous = cs.records(session) if i else None
                cs.turn(session, f"{text} {notes(session) if i == 0 else ''}", resume=bool(i))
                if previous is None:
                    continue
                this = turns(cs.records(session))[-1]
                assert hits(previous_total(previous), first_usage(this)), (session, i, this)
        slots = {s: slot_of(cs, s) for s in sessions}
        assert sorted(slots.values()) == [0, 0, 1, 1], slots
        saves = sum(len(kinds(cs.records(s), CacheSaved)) for s in sessions)
        restores = sum(len(kinds(cs.records(s), CacheRestored)) for s in sessions)
        print(f"four sessions, two slots, twelve turns: {saves} saves, {restores} restores")
        assert restores == 8, restores  # every turn after each session's first


def test_llama_server_killed_two_seconds_after_a_turn_costs_the_session_nothing() -> None:
    # The idle save is a minute away: only the save right after the turn (its re-read costs far
    # more than ten saves on this CPU) can bring the cache back.
    with CacheStack(slots=2, cache={"idle_save_ms": 600_000}) as cs:
        cs.start_loopd()
        cs.turn("crash", f"Say hello. {notes('crash')}", resume=False)
        before = cs.records("crash")
        time.sleep(2)  # the scenario: the server dies 2 s after the turn
        assert "crash" in cs.state().get("saves", {}), cs.output()
        cs.restart_server()  # SIGKILL, and a new process on the same port
        cs.turn("crash", "Now say goodbye.")
        after = turns(cs.records("crash"))[-1]
        assert kinds(after, CacheRestored), after
        assert hits(previous_total(before), first_usage(after)), (before[-1], after)
