"""`make status`: what `make run` started, in a few lines.

    programs      each supervisord program's state (supervisorctl status)
    sockets       infer.sock and loop.sock, and whether something listens on each
    model         what llama-server says it serves (/props through inferproxy)
    tools         which tools brokerd offers now, and why one is off, or why brokerd cannot
                  start (the state file brokerd writes at each start) while supervisord runs
    sessions      how many sessions the home holds, and the newest

It reads run/run.env (in $BOXMAKER_RUN when set, as for `make run`), which `make run` writes, and
changes nothing.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import orjson

from boxmaker.bxctl.stack import supervisor_running, tools_line
from boxmaker.loopd.config import ConfigError, load_config
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.llama.transport import exchange

ROOT = Path(__file__).resolve().parents[1]
RUN = Path(os.environ.get("BOXMAKER_RUN") or ROOT / "run")
TIMEOUT_MS = 2000


def read_env(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        name, _, value = line.partition("=")
        env[name] = " ".join(shlex.split(value))
    return env


def listening(path: Path) -> str:
    if not path.exists():
        return "missing"
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(TIMEOUT_MS / 1000)
        try:
            s.connect(os.fspath(path))
        except OSError as exc:
            return f"not listening ({exc.strerror or exc})"
    return "listening"


def model(infer_sock: Path) -> str:
    try:
        resp = exchange(
            infer_sock, "GET", "/props", None,
            timeout_ms=TIMEOUT_MS, max_header_bytes=65_536, max_body_bytes=4 << 20,
        )  # fmt: skip
    except InferError as err:
        return f"unknown ({err.describe()})"
    if resp.status != 200:
        return f"unknown (/props answered {resp.status})"
    props = orjson.loads(resp.body)
    path = props.get("model_path") or "?"
    slots = props.get("total_slots", "?")
    n_ctx = props.get("default_generation_settings", {}).get("n_ctx", "?")
    return f"{Path(path).name} ({slots} slots of {n_ctx} tokens)"


def sessions(home: Path) -> str:
    folder = home / "sessions"
    logs = (
        sorted(folder.glob("*/0.jsonl"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
    )
    if not logs:
        return f"none in {home}"
    return f"{len(logs)} in {home} (newest: {logs[-1].parent.name})"


def main() -> int:
    env_file = RUN / "run.env"
    if not env_file.exists():
        print(f"status: make run has not run here (no {env_file}); start it with make run",
              file=sys.stderr)  # fmt: skip
        return 1
    # supervisorctl parses the whole file, so every ENV_ name in it must be set; only RUN matters.
    env = {**os.environ, "BOXMAKER_PYTHON": "", **read_env(env_file), "BOXMAKER_RUN": str(RUN)}
    ctl = [
        str(ROOT / ".venv" / "bin" / "supervisorctl"),
        "-c",
        str(ROOT / "conf" / "supervisord.conf"),
    ]
    running = supervisor_running(RUN)
    if running:
        status = subprocess.run(
            [*ctl, "status"], env=env, capture_output=True, text=True, check=False
        )
        lines = (status.stdout or status.stderr).splitlines()
        ok = status.returncode == 0
    else:  # stopped (make stop) or gone: supervisorctl would print an XML-RPC fault
        lines = ["none: make run's supervisord is not running here; start it with make run"]
        ok = False
    print("programs:")
    for line in lines:
        print(f"  {line}")
    infer_sock = RUN / "infer.sock"
    loop_sock = Path(env["BOXMAKER_SOCKET"])
    loop_state = listening(loop_sock)
    if (
        loop_state == "missing"
        and running
        and any(line.split()[:2] == ["loopd", "RUNNING"] for line in lines)
    ):
        loop_state = "not yet: loopd binds it once its self-test has passed"
    print(f"sockets:  {infer_sock} ({listening(infer_sock)}), {loop_sock} ({loop_state})")
    print(f"upstream: {env['BOXMAKER_UPSTREAM']}, model: {model(infer_sock)}")
    tools = tools_line(RUN).removeprefix("[tools: ").removesuffix("]")
    print(f"tools:    {tools if running else 'none: brokerd is not running'}")
    try:
        home = load_config(env["BOXMAKER_LOOPD_CONFIG"]).paths.home
    except ConfigError as err:
        print(f"sessions: unknown ({err})")
    else:
        print(f"sessions: {sessions(home)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
