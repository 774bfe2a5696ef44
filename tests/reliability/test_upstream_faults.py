"""inferproxy SIGKILLed mid-stream and started again (issue 13 item 2): the turn ends with an
`inference` error (the test config makes no retry), nothing of the half-streamed answer is logged,
the chain verifies, and the next turn works through the new inferproxy."""

from __future__ import annotations

from boxmaker.proto import ContentEvent, ErrorCode, TurnDone, WireError
from boxmaker.session.verify import verify_session
from tests.support.inferproxy.proxy import START_LINE
from tests.support.procs import Daemon, wait_for
from tests.support.reliability.crash_rig import Stall, log_path, start_loopd
from tests.support.reliability.load_rig import stack
from tests.support.serve import TurnClient, turn
from tests.support.turn import say


def test_inferproxy_killed_mid_stream_and_restarted() -> None:
    with stack() as s:
        env = s.env
        start_loopd(env, spare_worker=False)
        stall = Stall(env)
        assert isinstance(turn(env.socket, "s", "first", resume=False)[-1], TurnDone)
        before = log_path(env, "s").read_bytes()
        env.model.load([say("half of an answer")])
        stall.armed = True
        client = TurnClient(env.socket, "s", "go on")
        wait_for(lambda: any(isinstance(f, ContentEvent) for f in client.frames), "content")
        s.proxy.proc.kill()  # SIGKILL: its connections are cut, its socket file is left behind
        s.proxy.proc.wait(15)
        frames = client.result()
        assert isinstance(frames[-1], WireError), frames
        assert frames[-1].code == ErrorCode.INFERENCE, frames[-1]
        data = log_path(env, "s").read_bytes()
        assert data.startswith(before)
        records = env.log_lines("s")[before.count(b"\n") :]
        assert [(r["type"], r.get("content")) for r in records] == [("user", "go on")], records
        assert verify_session(env.home, "s").ok
        # Started again on the same path (it removes the stale socket file).
        again = Daemon(s.proxy.argv)
        try:
            again.wait_for_line(START_LINE, 15.0)
            frames = turn(env.socket, "s", "after the restart")
            assert isinstance(frames[-1], TurnDone), frames
            assert verify_session(env.home, "s").ok
        finally:
            again.stop()
