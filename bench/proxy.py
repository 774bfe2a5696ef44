"""inferproxy against socat and a direct TCP connection, one table from one run on this machine.

Each path ends at the same sink, a TCP server on 127.0.0.1 in its own process (so this process's
GIL limits nothing there), which the first byte of a connection tells what to do:

  U  read to EOF, then answer b"K"          (bulk client -> upstream)
  D  + 8-byte length: send that many bytes  (bulk upstream -> client)
  P  answer b"p"                            (connection set-up)
  E  echo until EOF                         (small-write latency)

Measured for each path: (a) bulk throughput each way, and the proxy process's CPU seconds per GiB
(utime + stime of all its threads, plus its reaped children's for socat's fork-per-connection);
(b) set-up cost: connect, one request byte, one response byte; (c) the round trip of 100-byte
writes sent once a millisecond and echoed, and what the proxy adds to the direct path's.

`python -m bench.proxy [--size-mib N] [--repeat N] [--connections N] [--writes N]`
"""

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tests.support.procs import wait_for

MiB = 1 << 20
GiB = 1 << 30
CHUNK = MiB
CLK_TCK = os.sysconf("SC_CLK_TCK")
BOUND = 30.0  # seconds for anything that should take milliseconds

# --- The sink, in its own process ----------------------------------------------------------------


def _serve(conn: socket.socket) -> None:
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        op = conn.recv(1)
        if op == b"P":
            conn.sendall(b"p")
        elif op == b"U":
            buf = bytearray(CHUNK)
            while conn.recv_into(buf):
                pass
            conn.sendall(b"K")
        elif op == b"D":
            header = b""
            while len(header) < 8:
                header += conn.recv(8 - len(header))
            left = struct.unpack("!Q", header)[0]
            block = memoryview(bytes(CHUNK))
            while left:
                n = min(left, CHUNK)
                conn.sendall(block[:n])
                left -= n
            conn.shutdown(socket.SHUT_WR)
        elif op == b"E":
            while data := conn.recv(65536):
                conn.sendall(data)


def sink_main() -> None:
    """The sink process: prints its port, then serves until it is terminated."""
    server = socket.create_server(("127.0.0.1", 0), backlog=1024)
    print(server.getsockname()[1], flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_serve, args=(conn,), daemon=True).start()


@contextlib.contextmanager
def _sink() -> Iterator[int]:
    """The sink in its own interpreter (so this process's GIL limits nothing there); its port."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        [sys.executable, "-c", "import bench.proxy as b; b.sink_main()"],
        cwd=repo,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"bench: the sink did not start (it printed {line!r})")
        yield int(line)
    finally:
        proc.terminate()
        proc.wait(5)


# --- The paths under test ------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of `pid`, plus cutime + cstime of its reaped children."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / CLK_TCK


def _children(pid: int) -> list[str]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return f.read().split()


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@dataclass
class Path:
    name: str
    connect: Callable[[], socket.socket]
    proc: subprocess.Popen[bytes] | None = None
    note: str = ""
    results: dict[str, list[float]] = field(default_factory=dict)

    def settle(self) -> None:
        """Waits until the proxy has finished with every connection (so its CPU is all counted)."""
        if self.proc is None:
            return
        pid = self.proc.pid
        wait_for(
            lambda: not _children(pid) and _threads(pid) == 1,
            f"{self.name} to go idle",
            BOUND,
            0.002,
            error=RuntimeError,
        )

    def cpu(self) -> float:
        return _cpu_seconds(self.proc.pid) if self.proc is not None else 0.0

    def add(self, key: str, value: float) -> None:
        self.results.setdefault(key, []).append(value)


def _unix_connector(path: str) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(BOUND)
        s.connect(path)
        return s

    return connect


def _tcp_connector(port: int) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        s = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    return connect


def _start(argv: list[str], sock: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    wait_for(
        lambda: os.path.exists(sock) or proc.poll() is not None,
        f"{argv[0]} to listen",
        BOUND,
        0.002,
        error=RuntimeError,
    )
    if proc.poll() is not None:
        raise RuntimeError(f"bench: {' '.join(argv)} exited with {proc.returncode}")
    return proc


@contextlib.contextmanager
def _paths(port: int, folder: str) -> Iterator[list[Path]]:
    socat = shutil.which("socat")
    if socat is None:
        raise SystemExit("bench: socat is not installed (apt-get install -y socat)")
    paths: list[Path] = []
    try:
        sock = os.path.join(folder, "inferproxy.sock")
        proc = _start(
            [
                sys.executable,
                "-m",
                "boxmaker.inferproxy",
                "--listen",
                sock,
                "--upstream",
                f"127.0.0.1:{port}",
                "--accept-burst",
                "1000000",
                "--accept-rate",
                "1000000",
                "--max-connections",
                "64",
            ],
            sock,
        )
        assert proc.stdout is not None
        start_line = proc.stdout.readline().decode().strip()
        paths.append(Path("inferproxy", _unix_connector(sock), proc, start_line))
        for name, extra in (("socat", []), ("socat -b 65536", ["-b", "65536"])):
            sock = os.path.join(folder, name.replace(" ", "_") + ".sock")
            proc = _start(
                [socat, *extra, f"UNIX-LISTEN:{sock},fork", f"TCP:127.0.0.1:{port}"], sock
            )
            paths.append(Path(name, _unix_connector(sock), proc))
        paths.append(Path("direct", _tcp_connector(port)))
        yield paths
    finally:
        for p in paths:
            if p.proc is not None:
                p.proc.terminate()
                try:
                    p.proc.wait(5)
                except subprocess.TimeoutExpired:
                    p.proc.kill()
                    p.proc.wait()


# --- The measurements ----------------------------------------------------------------------------


def _bulk_up(path: Path, size: int) -> None:
    block = memoryview(bytes(CHUNK))
    path.settle()
    cpu0 = path.cpu()
    start = time.perf_counter()
    with path.connect() as s:
        s.sendall(b"U")
        left = size
        while left:
            n = min(left, CHUNK)
            s.sendall(block[:n])
            left -= n
        s.shutdown(socket.SHUT_WR)
        if s.recv(1) != b"K":
            raise RuntimeError(f"bench: {path.name} lost the upload's answer")
    elapsed = time.perf_counter() - start
    path.settle()
    path.add("up_mbps", size / elapsed / 1e6)
    path.add("up_cpu", (path.cpu() - cpu0) * GiB / size)


def _bulk_down(path: Path, size: int) -> None:
    buf = bytearray(CHUNK)
    path.settle()
    cpu0 = path.cpu()
    start = time.perf_counter()
    got = 0
    with path.connect() as s:
        s.sendall(b"D" + struct.pack("!Q", size))
        while n := s.recv_into(buf):
            got += n
    elapsed = time.perf_counter() - start
    if got != size:
        raise RuntimeError(f"bench: {path.name} delivered {got} of {size} bytes")
    path.settle()
    path.add("down_mbps", size / elapsed / 1e6)
    path.add("down_cpu", (path.cpu() - cpu0) * GiB / size)


def _setup_once(path: Path) -> float:
    start = time.perf_counter()
    s = path.connect()
    s.sendall(b"P")
    if s.recv(1) != b"p":
        raise RuntimeError(f"bench: {path.name} lost a set-up answer")
    elapsed = time.perf_counter() - start
    s.close()
    return elapsed


def _setup(paths: list[Path], count: int) -> None:
    """`count` set-ups per path, the paths taking turns (so a noisy moment hits all alike)."""
    for i in range(count):
        for p in paths[i % len(paths) :] + paths[: i % len(paths)]:
            p.add("setup", _setup_once(p))
    for p in paths:
        p.settle()


def _latency(paths: list[Path], writes: int) -> None:
    """Once a millisecond, a 100-byte write on each path's echo connection in turn; its RTT."""
    payload = b"x" * 100
    buf = memoryview(bytearray(100))
    conns = [p.connect() for p in paths]
    try:
        for s in conns:
            s.sendall(b"E")
        tick = time.perf_counter()
        for i in range(writes):
            order = list(range(len(paths)))
            order = order[i % len(order) :] + order[: i % len(order)]
            for k in order:
                s = conns[k]
                start = time.perf_counter()
                s.sendall(payload)
                got = 0
                while got < 100:
                    n = s.recv_into(buf[got:])
                    if n == 0:
                        raise RuntimeError(f"bench: {paths[k].name} closed the echo connection")
                    got += n
                paths[k].add("rtt", time.perf_counter() - start)
            tick += 0.001
            pause = tick - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
    finally:
        for s in conns:
            s.close()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# --- The table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    get: Callable[[Path], float | None]
    ratio: bool = True  # show inferproxy / socat -b 65536 and inferproxy / direct


def _rows(direct: Path) -> list[Row]:
    def med(key: str) -> Callable[[Path], float | None]:
        return lambda p: statistics.median(p.results[key]) if key in p.results else None

    def cpu(key: str) -> Callable[[Path], float | None]:
        return lambda p: statistics.median(p.results[key]) if p.proc is not None else None

    def pct(key: str, q: float) -> Callable[[Path], float | None]:
        return lambda p: _pct(p.results[key], q) * 1e6

    def added(q: float) -> Callable[[Path], float | None]:
        return lambda p: (_pct(p.results["rtt"], q) - _pct(direct.results["rtt"], q)) * 1e6

    return [
        Row("bulk client->upstream, MB/s", med("up_mbps")),
        Row("bulk upstream->client, MB/s", med("down_mbps")),
        Row("proxy CPU s/GiB, client->upstream", cpu("up_cpu")),
        Row("proxy CPU s/GiB, upstream->client", cpu("down_cpu")),
        Row("set-up p50, us", pct("setup", 0.5)),
        Row("set-up p99, us", pct("setup", 0.99)),
        Row("100 B echo RTT p50, us", pct("rtt", 0.5)),
        Row("100 B echo RTT p99, us", pct("rtt", 0.99)),
        Row("added latency p50, us", added(0.5), ratio=False),
        Row("added latency p99, us", added(0.99), ratio=False),
    ]


def _cell(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"


def _ratio(mine: float | None, other: float | None) -> str:
    if mine is None or other is None or other <= 0:
        return "-"
    return f"{mine / other:.2f}x"


def _table(paths: list[Path], args: argparse.Namespace) -> str:
    by = {p.name: p for p in paths}
    mine, socat64, direct = by["inferproxy"], by["socat -b 65536"], by["direct"]
    header = ["", *(p.name for p in paths), "inferproxy / socat -b 65536", "inferproxy / direct"]
    lines = [header]
    for row in _rows(direct):
        cells = [row.label, *(_cell(row.get(p)) for p in paths)]
        cells += [
            _ratio(row.get(mine), row.get(o)) if row.ratio else "-" for o in (socat64, direct)
        ]
        lines.append(cells)
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]

    def fmt(row: list[str]) -> str:
        cells = (
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        return "| " + " | ".join(cells) + " |"

    out = [fmt(row) for row in lines]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    notes = [
        f"Bulk: {args.size_mib} MiB each way, median of {args.repeat} runs, paths interleaved; "
        "MB = 10^6 bytes. CPU: the proxy process's utime+stime, all threads (socat: its forked "
        "children too); direct has no proxy.",
        f"Set-up: {args.connections} connections per path (connect, 1 request byte, 1 response "
        f"byte). Echo: {args.writes} writes of 100 bytes per path, one per ms, paths taking "
        "turns. Added latency: a path's RTT percentile minus direct's.",
        "inferproxy ran with --accept-burst 1000000 --accept-rate 1000000 --max-connections 64: "
        "its defaults (burst 10, 2/s) would refuse most of the set-up test.",
        f"{mine.note}; {os.cpu_count()} cores, shared with this client and the sink (own process).",
    ]
    return "\n".join([*out, "", *notes])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.proxy", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--size-mib", type=int, default=1024, help="bulk bytes each way (MiB)")
    parser.add_argument("--repeat", type=int, default=3, help="bulk runs per path and direction")
    parser.add_argument("--connections", type=int, default=500, help="set-up test connections")
    parser.add_argument("--writes", type=int, default=5000, help="echoed 100-byte writes")
    args = parser.parse_args(argv if argv is not None else [])
    size = args.size_mib * MiB

    folder = tempfile.mkdtemp(prefix="bench-proxy-", dir="/tmp")
    try:
        with _sink() as port, _paths(port, folder) as paths:
            for _ in range(args.repeat):  # interleaved, so a noisy moment hits every path alike
                for p in paths:
                    _bulk_up(p, size)
                    _bulk_down(p, size)
            _setup(paths, args.connections)
            _latency(paths, args.writes)
            print("inferproxy vs socat vs direct TCP (one run, this machine)")
            print(_table(paths, args))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
