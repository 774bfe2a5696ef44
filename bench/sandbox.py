"""The sandbox's cost: starting a sandboxed `shell` call against a plain subprocess, and a `fetch`.

- shell start: `true` through Sandbox.run (bwrap: namespaces, mounts, rlimits, the uid drop when
  root) against the same `/bin/sh -c true` started with subprocess and nothing else; p50 and p99
  of each, and the ratio of the medians.
- fetch: a 1 MB HTML page from a local server (allowed by exact address), through fetch() with its
  address check, watchdog and HTML-to-text, against a bare urllib GET of the same page.

`python -m bench.sandbox [--calls 200] [--fetches 20]`
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from boxmaker.brokerd import netcheck
from boxmaker.brokerd.sandbox import Sandbox, default_run_as
from boxmaker.brokerd.tools.fetch import FetchLimits, fetch
from tests.support.brokerd.fetch import Server, body

from ._timing import line, times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sandbox")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--fetches", type=int, default=20)
    args = parser.parse_args(argv)
    print("bench sandbox: shell under bubblewrap vs a plain subprocess; fetch of a 1 MB page")
    base = Path(tempfile.mkdtemp(prefix="bx-bench-sandbox-"))
    os.chmod(base, 0o755)
    run_as = default_run_as()
    if run_as is not None:
        os.chown(base, *run_as)
    try:
        box = Sandbox(base)
        reason = box.probe()
        if reason is not None:
            print(f"  shell: no sandbox here ({reason})")
        else:
            boxed = times(lambda: box.run("true"), args.calls, warm=1)
            plain = times(
                lambda: subprocess.run(["/bin/sh", "-c", "true"], env={}, check=True),
                args.calls,
                warm=1,
            )
            line("shell `true` in the sandbox", boxed)
            line("/bin/sh -c true, plain subprocess", plain)
            ratio = statistics.median(boxed) / statistics.median(plain)
            print(f"  sandbox start costs {ratio:.1f}x the plain start (p50)")
        srv = Server()
        try:
            srv.routes["/big"] = body(b"<p>" + b"word " * ((1 << 20) // 5) + b"</p>")
            url = f"http://127.0.0.1:{srv.port}/big"
            allow = frozenset({netcheck.parse("127.0.0.1")})
            limits = FetchLimits(max_bytes=2 << 20)
            fetched = times(lambda: fetch(url, limits, allow), args.fetches, warm=1)
            bare = times(lambda: urllib.request.urlopen(url).read(), args.fetches, warm=1)
            line("fetch 1 MB page (checked, to text)", fetched)
            line("urllib GET of the same page", bare)
            ratio = statistics.median(fetched) / statistics.median(bare)
            print(f"  fetch costs {ratio:.1f}x the bare GET (p50)")
        finally:
            srv.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
