"""A stand-in for the compile step of scripts/build_llama_server.sh (BOXMAKER_LLAMA_FAKE_BUILD).

    python standin_build.py KIND COUNTER OUTDIR

Writes OUTDIR/bin/llama-server as a stand-in of KIND and appends one line to COUNTER, so a test
can tell how many builds ran:
- "serves": an HTTP server on --port that answers /health and one /completion, like llama-server;
- "sigill": a process that kills itself with SIGILL, as a binary with an instruction the CPU lacks.
"""

import os
import stat
import sys
from pathlib import Path

SERVES = """
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self._answer({"status": "ok"} if self.path == "/health" else None)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._answer({"content": " there"} if self.path == "/completion" else None)

    def _answer(self, obj):
        body = json.dumps(obj or {"error": "not found"}).encode()
        self.send_response(200 if obj else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

port = int(sys.argv[sys.argv.index("--port") + 1])
HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""

SIGILL = """
import os, signal
print("llama threadpool init", flush=True)
os.kill(os.getpid(), signal.SIGILL)
"""


def main() -> None:
    kind, counter, outdir = sys.argv[1:4]
    binary = Path(outdir) / "bin" / "llama-server"
    binary.parent.mkdir(parents=True, exist_ok=True)
    body = {"serves": SERVES, "sigill": SIGILL}[kind]
    binary.write_text(f"#!{sys.executable}\n{body}")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    with open(counter, "a") as f:
        f.write(f"{kind} {os.getpid()}\n")


if __name__ == "__main__":
    main()
