"""Smoke test of a llama-server binary: start it with the model, wait for /health, ask for one
short completion. Exit 0 when it served; otherwise 1 with one line that names the cause (the exit
signal, for a binary that traps) and the tail of its log on the following lines.

    python3 smoke_llama_server.py BINARY MODEL LOG

Standard library only: it runs before the project's venv exists (scripts/build_llama_server.sh).
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import time

READY_TIMEOUT = 120.0  # a 135M model loads in about a second; the bound is for a loaded machine
REQUEST_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
SIGNAL_MEANING = {
    signal.SIGILL: "the binary uses an instruction this CPU cannot run",
    signal.SIGSEGV: "the binary crashed",
    signal.SIGBUS: "the binary crashed",
    signal.SIGKILL: "the binary was killed (out of memory?)",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def request(port: int, method: str, path: str, body: object = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {} if data is None else {"Content-Type": "application/json"}
        conn.request(method, path, body=data, headers=headers)
        res = conn.getresponse()
        return res.status, res.read()
    finally:
        conn.close()


def describe_exit(code: int) -> str:
    if code >= 0:
        return f"llama-server exited with code {code}"
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return f"llama-server died of signal {-code}"
    meaning = SIGNAL_MEANING.get(sig, "the binary died")
    return f"llama-server died of {sig.name}: {meaning}"


def smoke(proc: subprocess.Popen[bytes], port: int) -> str | None:
    """None when the server answered a completion; otherwise what went wrong."""
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        code = proc.poll()
        if code is not None:
            return describe_exit(code)
        try:
            status, _ = request(port, "GET", "/health")
            if status == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            return f"llama-server did not answer /health within {READY_TIMEOUT:.0f} s"
        time.sleep(0.1)
    try:
        status, body = request(port, "POST", "/completion", {"prompt": "Hello", "n_predict": 4})
    except OSError as exc:
        code = proc.poll()
        return describe_exit(code) if code is not None else f"/completion failed: {exc}"
    if status != 200:
        return f"/completion answered HTTP {status}: {body[:200]!r}"
    try:
        content = json.loads(body)["content"]
    except (ValueError, KeyError, TypeError):
        return f"/completion answered no content: {body[:200]!r}"
    if not isinstance(content, str):
        return f"/completion answered a content that is not text: {content!r}"
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: smoke_llama_server.py BINARY MODEL LOG", file=sys.stderr)
        return 2
    binary, model, log_path = argv
    port = free_port()
    cmd = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "512"]
    cmd += ["-np", "1", "-t", "1", "--log-colors", "off", "--offline"]
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        except OSError as exc:
            print(f"llama-server could not be started: {exc}", file=sys.stderr)
            return 1
        try:
            problem = smoke(proc, port)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    if problem is None:
        return 0
    with open(log_path, "rb") as log:
        tail = log.read().decode(errors="replace").splitlines()[-20:]
    print(f"smoke test failed: {problem} (log: {log_path})", file=sys.stderr)
    print("\n".join(f"  | {line}" for line in tail), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
