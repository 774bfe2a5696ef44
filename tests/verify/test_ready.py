"""`make run`'s readiness wait (boxmaker/verify/ready.py, called by scripts/run.sh) follows the
server's progress and fails fast on a server that dies after it started (issue 28 item 2).

The program under supervisord named llama-server here is a stand-in: it answers /health as
llama-server does while it loads a model (503, "Loading model") and then exits, as a server
killed mid-load (out of memory) does; a real llama-server cannot be made to die on cue. The
supervisord, inferproxy and loopd are the real ones (conf/supervisord.conf).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from boxmaker.verify.stack import CONF, free_port
from tests.support.procs import wait_for
from tests.support.stack import write_local_config

BOUND = 120.0  # the wait's own bound here; the server dies after LOADING_S
LOADING_S = 7  # over ready.SAY_EVERY_S, so one progress line is said first

STANDIN = """
import http.server, json, sys, threading, time
port = int(sys.argv[1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"error": {"code": 503, "message": "Loading model",
                                     "type": "unavailable_error"}}).encode()
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", port), H)
threading.Thread(target=s.serve_forever, daemon=True).start()
print("llama_model_load: loading model tensors", flush=True)
time.sleep(float(sys.argv[2]))
print("killed while loading the model (a stand-in)", flush=True)
sys.exit(1)
"""


def test_ready_says_the_model_loads_and_fails_fast_when_the_server_dies() -> None:
    run = Path(f"/tmp/bx-rd-{os.getpid()}")
    shutil.rmtree(run, ignore_errors=True)
    for sub in ("supervisord.d", "home", "slots"):
        (run / sub).mkdir(parents=True, mode=0o700)
    run.chmod(0o700)
    port = free_port()
    (run / "standin.py").write_text(STANDIN)
    (run / "supervisord.d" / "llama-server.conf").write_text(
        f"[program:llama-server]\ncommand={sys.executable} {run / 'standin.py'} {port} "
        f"{LOADING_S}\nautorestart=true\nstartsecs=1\nredirect_stderr=true\n"
        f"stdout_logfile={run / 'llama-server.log'}\n"
    )  # fmt: skip
    config = write_local_config(run)
    env = dict(os.environ, BOXMAKER_RUN=str(run), BOXMAKER_PYTHON=sys.executable,
               BOXMAKER_UPSTREAM=f"127.0.0.1:{port}", BOXMAKER_LOOPD_CONFIG=str(config),
               BOXMAKER_SOCKET=str(run / "loop.sock"))  # fmt: skip
    bin_ = Path(sys.executable).parent
    daemon = subprocess.Popen([str(bin_ / "supervisord"), "-n", "-c", str(CONF)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        started = time.monotonic()
        p = subprocess.run(
            [sys.executable, "-m", "boxmaker.verify.ready", f"{BOUND:g}", "llama-server",
             "inferproxy", "loopd"], env=env, capture_output=True, text=True,
            timeout=BOUND + 60, check=False,
        )  # fmt: skip
        took = time.monotonic() - started
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 1, p.stderr
        said = f"for llama-server at 127.0.0.1:{port}: /health answers 503: 'Loading model'"
        assert any(said in line for line in lines), p.stderr
        last = lines[-1]
        assert last.startswith("run: cannot start: llama-server exited after it had started"), last
        assert "killed while loading the model (a stand-in)" in last, last
        assert took < LOADING_S + 30, f"took {took:.0f} s: {last}"
    finally:
        subprocess.run([str(bin_ / "supervisorctl"), "-c", str(CONF), "shutdown"], env=env,
                       capture_output=True, timeout=BOUND, check=False)  # fmt: skip
        wait_for(lambda: daemon.poll() is not None, "supervisord to exit", BOUND)
        shutil.rmtree(run, ignore_errors=True)
