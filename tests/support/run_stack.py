"""`make run`'s whole stack for the end-to-end tests: scripts/run.sh as `make run` runs it, under
the real supervisord, in a fresh short run folder (BOXMAKER_RUN) with llama-server on a free port,
so it never touches a `make run` the developer may have going in the checkout's run/ folder."""

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from boxmaker.verify.stack import free_port
from tests.support.llama import ensure_built
from tests.support.procs import wait_for
from tests.support.stack import write_local_config

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf" / "supervisord.conf"
BIN = Path(sys.executable).parent
PROGRAMS = ("brokerd", "inferproxy", "llama-server", "loopd")  # `supervisorctl pid all`'s order
BOUND = 60.0  # seconds for llama-server to load the model on a loaded 2-core machine
# loopd retries its self-test while llama-server loads (startretries), then passes it.
LOOPD_BOUND = 3 * BOUND


def ctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "supervisorctl"), "-c", str(CONF), *args],
        env=env, capture_output=True, text=True, timeout=BOUND, check=False,
    )  # fmt: skip


def write_brokerd_config(run: Path) -> Path:
    """brokerd's local profile, with its sockets, workspace, grants, home and log in this run
    folder."""
    text = (REPO / "conf" / "brokerd.local.toml").read_text()
    for name in ("broker.sock", "owner.sock", "workspace", "grants.toml", "home", "broker/"):
        old = f'"../run/{name}'
        assert old in text, f"conf/brokerd.local.toml no longer names {old}"
        text = text.replace(old, f'"{run / name}' + ("/" if name.endswith("/") else ""))
    path = run / "brokerd.toml"
    path.write_text(text)
    return path


def run_sh(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """scripts/run.sh as `make run` runs it, with no terminal on stdin (so no chat)."""
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "run.sh")], env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=LOOPD_BOUND + BOUND, check=False,
    )  # fmt: skip


@dataclass
class RunStack:
    run: Path  # the run folder
    env: dict[str, str]  # run.sh's environment, and what supervisorctl needs to parse its config
    port: int  # llama-server's
    started: subprocess.CompletedProcess[str]  # the first run.sh


@contextmanager
def run_stack(
    logs: Sequence[str],
    *,
    run: Path | None = None,
    settings: Callable[[Path], Mapping[str, str]] = lambda run: {},
) -> Iterator[RunStack]:
    """run.sh started once (its result in `started`: the body checks it); the run folder's `logs`
    printed if the body fails; supervisord shut down and the folder removed after. `run`: a
    folder made by the caller (a short one under /tmp); `settings`: make run's variables for this
    run folder, over the local profile's (CONFIG, UPSTREAM for a scripted model, GATEWAY)."""
    ensure_built()  # a build that fails fails here, with its own message
    run = run or Path(tempfile.mkdtemp(prefix="bx-e2e-", dir="/tmp"))  # short: socket paths
    port = free_port()
    env = dict(os.environ)
    for name in ("BOXMAKER_SOCKET", "MODEL", "UPSTREAM", "BOXMAKER_UPSTREAM", "GATEWAY"):
        env.pop(name, None)
    extra = dict(settings(run))
    if "CONFIG" not in extra:  # the local profile's loopd; a caller's own is left as it wrote it
        extra["CONFIG"] = str(write_local_config(run))
    env.update(BOXMAKER_RUN=str(run), BOXMAKER_LLAMA_PORT=str(port), **extra)
    env.update(BROKERD_CONFIG=str(write_brokerd_config(run)))
    started = run_sh(env)
    # supervisorctl reads the same file: the names run.sh exported must be set for it to parse.
    env.update(
        BOXMAKER_PYTHON=sys.executable,
        BOXMAKER_UPSTREAM=env.get("UPSTREAM") or f"127.0.0.1:{port}",
        BOXMAKER_LOOPD_CONFIG=env["CONFIG"],
        BOXMAKER_BROKERD_CONFIG=env["BROKERD_CONFIG"],
    )
    if "GATEWAY" in env:
        env["BOXMAKER_GATEWAY_CONFIG"] = env["GATEWAY"]
    try:
        yield RunStack(run, env, port, started)
    except BaseException:
        for name in logs:
            if (run / name).exists():
                print(f"--- {name}\n" + (run / name).read_text()[-3000:])
        raise
    finally:
        pid_file = run / "supervisord.pid"
        pid = int(pid_file.read_text()) if pid_file.exists() else None
        ctl(env, "shutdown")
        try:
            if pid is not None:
                wait_for(lambda: not os.path.exists(f"/proc/{pid}"), "supervisord to exit", BOUND)
        finally:
            shutil.rmtree(run, ignore_errors=True)
