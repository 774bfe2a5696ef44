"""What supervisord says of its programs, read over its own socket (XML-RPC, stdlib only).

`make verify-device` (stack.py) and `make run` (scripts/run.sh) start supervisord and then wait
for sockets and /health. A program that cannot start (a bad flag, a missing folder) goes FATAL
after its start retries, within seconds; `gave_up()` turns that into one line naming it with the
last lines of its log, so a wait ends then instead of at its bound.

    python -m boxmaker.verify.programs <run folder>   # exit 1 with that line if one gave up
"""

from __future__ import annotations

import http.client
import re
import socket
import sys
import xmlrpc.client
from collections import deque
from pathlib import Path
from typing import Any

# States in which supervisord will not start the program again by itself (supervisorctl's names).
GAVE_UP = frozenset({"FATAL", "EXITED"})
# EXITED is a gave-up state once it has lasted this long (seconds): a program with autorestart
# passes through it for a moment on its way back to STARTING.
EXITED_GRACE = 2
TAIL_LINES = 3
ERROR = re.compile(r"error|fail|fatal", re.IGNORECASE)
CALL_TIMEOUT = 5.0  # seconds for one status call on a loaded machine


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=CALL_TIMEOUT)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(CALL_TIMEOUT)
        self.sock.connect(self._path)


class _UnixTransport(xmlrpc.client.Transport):
    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def make_connection(self, host: Any) -> http.client.HTTPConnection:
        return _UnixHTTP(self._path)


def states(run: Path) -> list[dict[str, Any]]:
    """supervisord's getAllProcessInfo: one dict per program (name, statename, stdout_logfile,
    stderr_logfile, spawnerr, ...); [] while supervisord is not answering yet."""
    proxy = xmlrpc.client.ServerProxy(
        "http://localhost", _UnixTransport(str(run / "supervisor.sock"))
    )
    try:
        info: Any = proxy.supervisor.getAllProcessInfo()
    except (OSError, xmlrpc.client.Error, http.client.HTTPException):
        return []
    return list(info)


def tail(path: str, lines: int = TAIL_LINES) -> list[str]:
    """The last non-blank lines of a log file ([] when there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 16_384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return list(deque((ln.strip() for ln in text.splitlines() if ln.strip()), maxlen=lines))


def gave_up(run: Path, programs: list[str] | None = None) -> str | None:
    """One line for the first program supervisord gave up on (FATAL or EXITED), else None:
    `llama-server FATAL (Exited too quickly ...); last lines of <log>: a | b | c`."""
    for info in states(run):
        name, state = info.get("name", "?"), info.get("statename", "?")
        if state not in GAVE_UP or (programs is not None and name not in programs):
            continue
        if state == "EXITED" and info.get("now", 0) - info.get("stop", 0) < EXITED_GRACE:
            continue  # an autorestart program is started again within a second
        logs = [p for p in (info.get("stdout_logfile"), info.get("stderr_logfile")) if p]
        last: list[str] = []
        shown = logs[0] if logs else f"{run}/{name}.log"
        for path in logs:
            if lines := tail(path, 20):
                # The last lines, after the last error line when it is further up (a usage
                # text after "error while handling argument ...").
                last, shown = lines[-TAIL_LINES:], path
                errors = [ln for ln in lines if ERROR.search(ln)]
                if errors and errors[-1] not in last:
                    last.insert(0, errors[-1])
                break
        why = info.get("spawnerr") or info.get("description") or ""
        said = " | ".join(last) or "(empty)"
        return f"{name} {state} ({why}); last lines of {shown}: {said}"
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m boxmaker.verify.programs <run folder>", file=sys.stderr)
        return 2
    line = gave_up(Path(argv[0]))
    if line is None:
        return 0
    print(line)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
