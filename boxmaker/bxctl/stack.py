"""Where bxctl finds the stack it talks to, and how that stack was started (issue 30 item 3).

`make run` writes `run.env` in its run folder (scripts/run.sh): the loop.sock, owner.sock and
home it started with. bxctl reads it, so `bxctl chat --session <id>` after `make run` finds loopd
and brokerd's owner.sock with no flag or variable. The run folder is $BOXMAKER_RUN, else the
`run/` folder of the checkout bxctl runs from (the .venv's editable install), used only when its
`run.env` exists.

What wins, for each path: the flag, then the environment variable ($BOXMAKER_SOCKET,
$BOXMAKER_OWNER_SOCKET, $BOXMAKER_HOME), then run.env, then the packaged default (loop.sock
only). owner.sock and the home are taken from run.env only when loop.sock is run.env's own, so a
chat with another `--socket` never answers approvals on an unrelated brokerd.

`Stack.start_hint()` names the command that works for how the stack was started: `make run`'s
(in its checkout) when loop.sock is make run's, else supervisorctl with the owner's config.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from boxmaker._defaults import DEFAULT_HOME, DEFAULT_SOCKET, HOME_ENV, SOCKET_ENV
from boxmaker._pid import alive
from boxmaker.proto import brokerd_state
from boxmaker.session.errors import SessionError
from boxmaker.session.files import open_regular, read_bounded, read_regular

RUN_ENV_NAME = "run.env"
RUN_ENV = "BOXMAKER_RUN"
OWNER_SOCKET_ENV = "BOXMAKER_OWNER_SOCKET"
RUN_ENV_MAX_BYTES = 65_536  # a few lines: anything bigger is not make run's


def checkout_run_folder() -> Path:
    """The `run/` beside the boxmaker package (the checkout, for the editable install)."""
    return Path(__file__).resolve().parents[2] / "run"  # boxmaker/bxctl/stack.py


def read_run_env(path: Path) -> dict[str, str]:
    """run.env's `NAME=value` lines (bash's printf %q quoting); {} when it cannot be read."""
    try:  # the home-file rules: a FIFO or a link to /dev/zero there cannot hang or flood bxctl
        data = read_regular(path, RUN_ENV_MAX_BYTES)
    except (OSError, SessionError):
        return {}
    if data is None:
        return {}
    found: dict[str, str] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        name, sep, value = line.partition("=")
        if not sep or not name.isidentifier():
            continue
        try:
            words = shlex.split(value)
        except ValueError:
            continue
        found[name] = words[0] if words else ""
    return found


@dataclass(frozen=True)
class Stack:
    socket: Path
    owner_socket: Path | None  # where approvals are answered; None: not known here
    home: Path | None  # where the sessions live; None: not known here
    run: Path | None  # make run's folder, when loop.sock is the one it started
    unstarted: Path | None = None  # a checkout whose make run has not run (nothing else named)

    def start_hint(self) -> str:
        """The command that (re)starts loopd, for how this stack was started."""
        if self.run is not None:
            checkout = self.run.parent
            # `make ctl` needs make run's supervisord; after `make stop` only make run starts it
            ctl = ' (or `make ctl CMD="start loopd"`)' if supervisor_running(self.run) else ""
            return f"start it with `make run` in {checkout}{ctl}; its logs are in {self.run}/"
        if self.unstarted is not None:
            return (
                f"`make run` has not started a stack in {self.unstarted} (no "
                f"{self.unstarted / 'run' / RUN_ENV_NAME}): run `make run` there, or name "
                f"another loopd with --socket <loop.sock> (or ${SOCKET_ENV})"
            )
        return (
            "start it with `supervisorctl -c <your supervisord.conf> start loopd`, "
            "or `loopd serve --config <path>`"
        )

    def owner_hint(self) -> str:
        """What to run to answer approvals, when this chat cannot."""
        if self.run is not None:
            return f"`make chat` in {self.run.parent}"
        if self.unstarted is not None:
            return f"`make run` in {self.unstarted}"
        return "`bxctl chat --owner-socket <brokerd's owner.sock>` (or $BOXMAKER_OWNER_SOCKET)"


SUPERVISORD_PID = "supervisord.pid"  # conf/supervisord.conf's pidfile, in the run folder


def supervisor_running(run: Path) -> bool:
    """Whether make run's supervisord is alive (its pidfile names a live process)."""
    try:
        data = read_regular(run / SUPERVISORD_PID, 64)
        pid = int((data or b"").decode("ascii").strip())
    except (OSError, ValueError, SessionError):
        return False
    return alive(pid)


def find_stack(
    socket_arg: Path | None, owner_arg: Path | None, environ: Mapping[str, str]
) -> Stack:
    run_dir = Path(environ[RUN_ENV]) if environ.get(RUN_ENV) else checkout_run_folder()
    recorded = read_run_env(run_dir / RUN_ENV_NAME)
    run_socket = Path(recorded[SOCKET_ENV]) if recorded.get(SOCKET_ENV) else None
    if socket_arg is not None:
        socket = socket_arg
    elif environ.get(SOCKET_ENV):
        socket = Path(environ[SOCKET_ENV])
    elif run_socket is not None:
        socket = run_socket
    else:
        socket = DEFAULT_SOCKET
    ours = run_socket is not None and _same(socket, run_socket)

    def pick(arg: Path | None, env_name: str) -> Path | None:
        if arg is not None:
            return arg
        if environ.get(env_name):
            return Path(environ[env_name])
        if ours and recorded.get(env_name):
            return Path(recorded[env_name])
        return None

    # Nothing named a loopd and this checkout's make run has not run (or has not got that far):
    # the hint is make run, not the packaged default's supervisorctl.
    unstarted = socket_arg is None and not environ.get(SOCKET_ENV) and run_socket is None
    checkout = run_dir.parent
    return Stack(
        socket=socket,
        owner_socket=pick(owner_arg, OWNER_SOCKET_ENV),
        home=pick(None, HOME_ENV),
        run=run_dir if ours else None,
        unstarted=checkout if unstarted and (checkout / "Makefile").is_file() else None,
    )


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b


def add_home_argument(parser: argparse.ArgumentParser) -> None:
    """`--home`, as each command that reads the sessions takes it (`home_for` resolves it)."""
    parser.add_argument(
        "--home",
        type=Path,
        help=f"Boxmaker's home (default: ${HOME_ENV}, else make run's, else {DEFAULT_HOME})",
    )


def home_for(arg: Path | None, environ: Mapping[str, str]) -> Path:
    """`--home`, else $BOXMAKER_HOME when set and not empty, else make run's home (its run.env:
    the new-user trial's `bxctl sessions` after `make run` looked in /var/lib/boxmaker), else
    the default."""
    if arg is not None:
        return arg
    if environ.get(HOME_ENV):
        return Path(environ[HOME_ENV])
    found = find_stack(None, None, environ).home
    return found if found is not None else DEFAULT_HOME


BROKERD_STATE_ENV = "BOXMAKER_BROKERD_STATE"  # run.env: where make run's brokerd writes it


def tools_line(run: Path) -> str:
    """One line saying which tools make run's brokerd offers now and why one is off, or why it
    offers none: from the state file this brokerd writes at each start (proto/brokerd_state.py;
    run.env names it), so never an older brokerd's."""
    named = read_run_env(run / RUN_ENV_NAME).get(BROKERD_STATE_ENV)
    path = Path(named) if named else run / brokerd_state.NAME
    logs = f"{run}/brokerd.err.log"
    try:
        fd = open_regular(path)
        try:
            state = brokerd_state.decode(read_bounded(fd, brokerd_state.MAX_BYTES, str(path)))
        finally:
            os.close(fd)
    except FileNotFoundError:
        return f"[tools: none yet: brokerd has not started (no {path}; see {logs})]"
    except OSError as e:
        return f"[tools: unknown: {path}: {e.strerror or e}]"
    except SessionError as e:
        return f"[tools: unknown: {e}]"
    if state is None:
        return f"[tools: unknown: {path} is not brokerd's state]"
    if (why := brokerd_state.failure(state)) is not None:
        return f"[tools: none: brokerd cannot start: {why}]"
    if not alive(state.get("pid")):
        return f"[tools: none: brokerd is not running (it was {state['state']}); see {logs}]"
    if state["state"] == brokerd_state.STARTING:
        return "[tools: none yet: brokerd is starting]"
    if state["state"] != brokerd_state.READY:
        return f"[tools: none: brokerd is {state['state']}]"
    names = [str(n) for n in state.get("tools", [])]
    shell = str(state.get("shell", "unknown"))
    shown = [n for n in names if n != "shell"]
    if "shell" in names:
        shown.append("shell (sandboxed)" if shell == "sandbox ready" else f"shell {shell}")
    return f"[tools: {', '.join(shown) or 'none granted'}; workspace {state.get('workspace', '?')}]"
