#!/usr/bin/env bash
# `make run`: starts supervisord with a local llama-server, inferproxy and loopd (everything under
# the checkout's run/ folder), waits until loopd has passed its self-test and listens, then opens
# `bxctl chat`.
# `make stop` shuts it all down. Set BOXMAKER_LLAMA_PORT to move llama-server off 18080.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=$ROOT/.venv/bin/python
CACHE=${BOXMAKER_CACHE:-$HOME/.cache/boxmaker}

export BOXMAKER_RUN=$ROOT/run
export BOXMAKER_PYTHON=$PY
export BOXMAKER_LLAMA_PORT=${BOXMAKER_LLAMA_PORT:-18080}
export BOXMAKER_UPSTREAM=127.0.0.1:$BOXMAKER_LLAMA_PORT
export BOXMAKER_LOOPD_CONFIG=$ROOT/conf/loopd.local.toml
export BOXMAKER_SOCKET=$BOXMAKER_RUN/loop.sock  # where bxctl finds loopd
# Builds (or finds in the cache, smoke-tested) llama-server; its own message says why if it can't.
# Assigned apart from `export`, which would hide the script's exit status.
LLAMA_HOME=$(bash scripts/build_llama_server.sh | tail -n 1) || {
  echo "run: no llama-server that can serve on this machine (the lines above say why)" >&2
  exit 1
}
export BOXMAKER_LLAMA_SERVER=$LLAMA_HOME/bin/llama-server
export BOXMAKER_MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
export BOXMAKER_TEMPLATE=$ROOT/conf/templates/chatml-tools.jinja
CONF=$ROOT/conf/supervisord.conf
CTL=("$ROOT/.venv/bin/supervisorctl" -c "$CONF")

mkdir -p "$BOXMAKER_RUN/supervisord.d" "$BOXMAKER_RUN/home"
chmod 0700 "$BOXMAKER_RUN" "$BOXMAKER_RUN/home"
cp conf/programs/llama-server.conf "$BOXMAKER_RUN/supervisord.d/"

if "${CTL[@]}" pid >/dev/null 2>&1; then
  echo "run: supervisord is already running; restarting its programs"
  "${CTL[@]}" update >/dev/null
  "${CTL[@]}" restart all
else
  "$ROOT/.venv/bin/supervisord" -c "$CONF"
fi

# Wait (bounded) for llama-server to answer /health and for inferproxy's and loopd's sockets
# (loopd binds its socket once its self-test has passed); a program that supervisord gives up on
# (it kept exiting) ends the wait at once, in one line.
"$PY" - "${CTL[@]}" <<'PYEOF'
import http.client, os, subprocess, sys, time
ctl = sys.argv[1:]
run = os.environ["BOXMAKER_RUN"]
port = int(os.environ["BOXMAKER_LLAMA_PORT"])
socks = [os.path.join(run, name) for name in ("infer.sock", "loop.sock")]
deadline = time.monotonic() + 180
while time.monotonic() < deadline:
    for program in ("llama-server", "inferproxy", "loopd"):
        status = subprocess.run([*ctl, "status", program], capture_output=True, text=True).stdout
        if "FATAL" in status.split():  # supervisord gave up after its retries
            sys.exit(f"run: {program} cannot start ({' '.join(status.split()[1:])}); "
                     f"see {run}/{program}.log")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/health")
        if conn.getresponse().status == 200 and all(map(os.path.exists, socks)):
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.5)
sys.exit(f"run: llama-server on port {port}, infer.sock or loop.sock not ready after 180 s; "
         f"see {run}/llama-server.log, inferproxy.log and loopd.log")
PYEOF
"${CTL[@]}" status

grep -h "^loopd: selftest\|^ok \|^FAILED" "$BOXMAKER_RUN/loopd.log" 2>/dev/null | tail -n 4 || true
if [ -t 0 ]; then
  exec "$ROOT/.venv/bin/bxctl" chat
else
  echo "run: standard input is not a terminal, so no chat; try:"
  echo "  BOXMAKER_SOCKET=$BOXMAKER_SOCKET $ROOT/.venv/bin/bxctl chat --say 'Hello.'"
fi
