"""Runs INSIDE the sandbox, before an MCP server with `hosts`: `python3 -I bridge.py SOCKET PORT
-- COMMAND ARGS...`.

The sandbox's network namespace has only `lo`. This listens on 127.0.0.1:PORT there and carries
each connection to brokerd's egress proxy over the Unix socket SOCKET (bound into the sandbox),
while the server runs as its child with HTTP(S)_PROXY pointing at PORT. It exits with the
server's status, and the sandbox with it. Standard library only: it runs on the system's python3,
not brokerd's.
"""

import socket
import subprocess
import sys
import threading

CHUNK = 65536


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(CHUNK):
            dst.sendall(chunk)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _carry(conn: socket.socket, path: str) -> None:
    with conn, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as out:
        try:
            out.connect(path)
        except OSError:
            return
        back = threading.Thread(target=_pipe, args=(out, conn), daemon=True)
        back.start()
        _pipe(conn, out)
        back.join()


def _accept(listener: socket.socket, path: str) -> None:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_carry, args=(conn, path), daemon=True).start()


def main(argv: list[str]) -> int:
    path, port, sep, *command = argv
    if sep != "--" or not command:
        print("usage: bridge.py SOCKET PORT -- COMMAND ARGS...", file=sys.stderr)
        return 2
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(64)
    threading.Thread(target=_accept, args=(listener, path), daemon=True).start()
    try:
        server = subprocess.Popen(command)  # the listener is not inherited (PEP 446)
    except OSError as exc:
        print(f"bridge: cannot start {command[0]}: {exc}", file=sys.stderr)
        return 127
    return server.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
