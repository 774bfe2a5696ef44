"""brokerd under the real supervisord, with conf/programs/brokerd.conf as shipped: it starts,
a kill -9 mid-call is followed by a restart (autorestart), the call's loopd side gets no result
(BrokerPort turns that into "the tools are unavailable"), and the log still verifies and replays."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from boxmaker.loopd.tools.port import BrokerPort
from boxmaker.proto import ToolRequest, ToolResponse
from tests.support.brokerd.approvals import ASK_WRITES, Call
from tests.support.brokerd.core import replay
from tests.support.brokerd.rig import Rig
from tests.support.procs import Daemon, wait_for, wait_for_socket

PROGRAM = Path(__file__).resolve().parents[2] / "conf" / "programs" / "brokerd.conf"
BIN = Path(sys.executable).parent
BOUND = 30.0

SUPERVISORD = """[unix_http_server]
file={run}/supervisor.sock
chmod=0700

[supervisord]
logfile={run}/supervisord.log
pidfile={run}/supervisord.pid
childlogdir={run}

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{run}/supervisor.sock

[include]
files = {run}/supervisord.d/*.conf
"""


def test_supervisord_restarts_brokerd_after_kill_9_mid_call(rig: Rig) -> None:
    run = rig.base / "sv"
    (run / "supervisord.d").mkdir(parents=True)
    shutil.copy(PROGRAM, run / "supervisord.d" / "brokerd.conf")
    conf = run / "supervisord.conf"
    conf.write_text(SUPERVISORD.format(run=run))
    rig.grants_text = ASK_WRITES
    rig.start()  # writes the config; this first brokerd is only a check that it starts
    rig.stop()
    env = dict(os.environ, BOXMAKER_RUN=str(run), BOXMAKER_PYTHON=sys.executable,
               BOXMAKER_BROKERD_CONFIG=str(rig.base / "brokerd.toml"))  # fmt: skip
    sv = Daemon([str(BIN / "supervisord"), "-n", "-c", str(conf)], env=env)

    def pid() -> int | None:
        argv = [str(BIN / "supervisorctl"), "-c", str(conf), "pid", "brokerd"]
        got = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        out = got.stdout.strip()
        return int(out) if out.isdigit() and out != "0" else None

    try:
        wait_for_socket(str(run / "supervisor.sock"), BOUND)
        first = wait_for(pid, "brokerd started by supervisord", BOUND)
        wait_for_socket(rig.socket, BOUND)
        call = Call(rig, "write_file", {"path": "a.txt", "content": "x"})
        call.wait_needed()
        os.kill(first, signal.SIGKILL)
        call.join(BOUND)
        assert [f.kind for f in call.frames] == ["approval_needed"]
        second = wait_for(lambda: (p := pid()) and p != first and p, "a new brokerd", BOUND)
        assert second != first
        port = BrokerPort(rig.socket, 10.0, lambda *_: None)

        def clock() -> ToolResponse | None:
            answer = port.call(ToolRequest(1, "clock", "{}"))
            return None if answer.content.startswith("error") else answer

        assert wait_for(clock, "the restarted brokerd to answer", BOUND).content.endswith("day")
        assert not (rig.workspace / "a.txt").exists()
    finally:
        sv.stop()  # stops brokerd too
    # the held call's decision, and the clock calls after the restart; the chain holds
    assert replay(rig.log.read_bytes()) >= 2


def test_brokerd_port_says_the_tools_are_unavailable_when_it_is_down(rig: Rig) -> None:
    port = BrokerPort(rig.socket, 1.0, lambda *_: None)
    answer = port.call(ToolRequest(1, "read_file", '{"path": "a"}'))
    assert answer.content.startswith("error: the tools are unavailable: brokerd is not running")


def test_brokerd_killed_mid_call_is_a_result_for_loopd(rig: Rig) -> None:
    rig.grants_text = ASK_WRITES
    daemon = rig.start()
    held = threading.Event()
    port = BrokerPort(rig.socket, 10.0, lambda *_: held.set())
    answers: list[ToolResponse] = []
    caller = threading.Thread(
        target=lambda: answers.append(
            port.call(ToolRequest(1, "write_file", '{"path": "a.txt", "content": "x"}'))
        )
    )
    caller.start()
    assert held.wait(BOUND)  # brokerd holds the call for the owner
    daemon.send_signal(signal.SIGKILL)
    caller.join(BOUND)
    assert answers[0].content.startswith(
        "error: the tools are unavailable: brokerd failed mid-call"
    )
    rig.daemon = None
    daemon.wait()
