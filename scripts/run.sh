#!/usr/bin/env bash
# `make run`: starts supervisord with a local llama-server, inferproxy and loopd (everything under
# the checkout's run/ folder), waits until loopd has passed its self-test and listens, then opens
# `bxctl chat`. `make stop` shuts it all down.
#
#   MODEL=name           a model profile, conf/profiles/<name>.toml (default local: SmolLM2;
#                        qwen-coder: the tool model): its model file (fetched once), llama-server
#                        flags, loopd config, brokerd config and starter grants
#   MODEL=path.gguf      serve another model file with the local profile's flags and id
#   UPSTREAM=host:port   use a llama-server that is already running instead of the local one;
#                        needs CONFIG, a loopd config written for that server
#   CONFIG=path.toml     loopd's config (default the profile's, conf/loopd.local.toml)
#   BROKERD_CONFIG=path.toml  brokerd's config (default conf/brokerd.local.toml): its workspace
#                        is created, and conf/grants.local.toml copied to its grants when missing
#   GATEWAY=path.toml    also start gatewayd with this config (conf/gateway.example.toml):
#                        the owner's Mattermost posts as turns (docs/gateway.md); absent: no gateway
#   BOXMAKER_LLAMA_PORT  moves the local llama-server off 18080
#   BOXMAKER_START_S     how long to wait for the stack to be ready (default: the profile's
#                        start_s: 180 s for local, 600 s for qwen-coder)
#   BOXMAKER_RUN         the run folder (default: the checkout's run/); the tests use a temporary
#                        one, with CONFIG naming sockets in it (make status/ctl/stop honor it too)
#
# Any step that fails is one line on stderr, `run: <what failed>; <what to do>`, naming the log.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=$ROOT/.venv/bin/python

fail() { echo "run: $*" >&2; exit 1; }

export BOXMAKER_RUN=${BOXMAKER_RUN:-$ROOT/run}
export BOXMAKER_PYTHON=$PY
export BOXMAKER_LLAMA_PORT=${BOXMAKER_LLAMA_PORT:-18080}
mkdir -p "$BOXMAKER_RUN/supervisord.d" "$BOXMAKER_RUN/home" "$BOXMAKER_RUN/slots"
chmod 0700 "$BOXMAKER_RUN" "$BOXMAKER_RUN/home"

# The model profile (issue 28; boxmaker/verify/profile.py): MODEL=<name> picks one, a MODEL that
# is a path keeps the default profile with that file. Its values are the defaults below.
PROFILE=local
case "${MODEL:-}" in "" | */* | *.gguf) ;; *) PROFILE=$MODEL MODEL= ;; esac
PROFILE_VARS=$("$PY" -m boxmaker.verify.profile "$PROFILE") || exit 1
eval "$PROFILE_VARS"
export BOXMAKER_ALIAS BOXMAKER_TEMPLATE BOXMAKER_LLAMA_CTX BOXMAKER_LLAMA_SLOTS BOXMAKER_LLAMA_THREADS

if [ -n "${UPSTREAM:-}" ]; then
  [ -n "${CONFIG:-}" ] || fail "UPSTREAM=$UPSTREAM needs CONFIG=<loopd.toml> written for that" \
    "server (docs/operations.md, 'Against your own llama-server')"
  export BOXMAKER_UPSTREAM=$UPSTREAM
  # A dead address fails here, in seconds, with the error, before anything is started.
  "$PY" - "$UPSTREAM" <<'PYEOF' || exit 1
import socket, sys
host, _, port = sys.argv[1].rpartition(":")
try:
    socket.create_connection((host, int(port)), timeout=5).close()
except (OSError, ValueError) as e:
    sys.exit(f"run: UPSTREAM={sys.argv[1]}: cannot connect ({e}); start llama-server there, "
             "or fix the address (host:port)")
PYEOF
  rm -f "$BOXMAKER_RUN/supervisord.d/llama-server.conf"
  PROGRAMS="inferproxy loopd"
else
  export BOXMAKER_UPSTREAM=127.0.0.1:$BOXMAKER_LLAMA_PORT
  # Builds (or finds in the cache, smoke-tested) llama-server; its own message says why if it
  # can't. Assigned apart from `export`, which would hide the script's exit status.
  LLAMA_HOME=$(bash scripts/build_llama_server.sh | tail -n 1) \
    || fail "no llama-server that can serve on this machine (the lines above say why)"
  export BOXMAKER_LLAMA_SERVER=$LLAMA_HOME/bin/llama-server
  # The profile's model, fetched (and smoke-tested) once per machine by the profile's script.
  if [ -z "${MODEL:-}" ] && [ "$PROFILE_FETCH" != "$ROOT/scripts/build_llama_server.sh" ]; then
    bash "$PROFILE_FETCH" >/dev/null || fail "the $PROFILE profile's model could not be fetched" \
      "(the lines above say why)"
  fi
  export BOXMAKER_MODEL=${MODEL:-$PROFILE_MODEL}
  [ -f "$BOXMAKER_MODEL" ] || fail "MODEL=$BOXMAKER_MODEL: no such file"
  BOXMAKER_MODEL=$(realpath "$BOXMAKER_MODEL")
  cp conf/programs/llama-server.conf "$BOXMAKER_RUN/supervisord.d/"
  PROGRAMS="llama-server inferproxy loopd"
fi
CONFIG=${CONFIG:-$PROFILE_LOOPD_CONFIG}
[ -f "$CONFIG" ] || fail "CONFIG=$CONFIG: no such file"
export BOXMAKER_LOOPD_CONFIG
BOXMAKER_LOOPD_CONFIG=$(realpath "$CONFIG")
# Where bxctl finds loopd and the sessions: the config's [channel] socket and [paths] home (a
# bad config is one line, here).
LOOPD_PATHS=$("$PY" -c 'import sys
from boxmaker.loopd.config import ConfigError, load_config
try:
    c = load_config(sys.argv[1])
except ConfigError as e:
    sys.exit(f"run: {e}")
print(c.channel.socket)
print(c.paths.home)' "$BOXMAKER_LOOPD_CONFIG")
{ read -r BOXMAKER_SOCKET; read -r SESSIONS_HOME; } <<<"$LOOPD_PATHS"
export BOXMAKER_SOCKET
# What `make status` and bxctl read (boxmaker/bxctl/stack.py): how this run was started, so
# `bxctl chat --session <id>` and `make chat` find its sockets and home with no flag.
BOXMAKER_HOME=$SESSIONS_HOME
for name in BOXMAKER_UPSTREAM BOXMAKER_LOOPD_CONFIG BOXMAKER_SOCKET BOXMAKER_HOME; do
  printf '%s=%q\n' "$name" "${!name}"
done >"$BOXMAKER_RUN/run.env"

# brokerd (issues 22, 23): the tools, under supervisord before loopd; its owner.sock is where
# `bxctl chat` answers approvals. Its workspace is created and the starter grants copied (never
# over the owner's own: "always" answers append to that file).
BROKERD_CONFIG=${BROKERD_CONFIG:-$PROFILE_BROKERD_CONFIG}
[ -f "$BROKERD_CONFIG" ] || fail "BROKERD_CONFIG=$BROKERD_CONFIG: no such file"
export BOXMAKER_BROKERD_CONFIG
BOXMAKER_BROKERD_CONFIG=$(realpath "$BROKERD_CONFIG")
BROKERD_PATHS=$("$PY" -c 'import os, sys
from boxmaker.brokerd.config import ConfigError, parse_config
try:
    c = parse_config(open(sys.argv[1], "rb").read(), os.path.dirname(sys.argv[1]))
except ConfigError as e:
    sys.exit(f"run: {sys.argv[1]}: {e}")
from boxmaker.brokerd.state import state_path
for path in (c.owner_socket, c.workspace, c.grants, state_path(c.socket)):
    print(path)' "$BOXMAKER_BROKERD_CONFIG")
{ read -r BOXMAKER_OWNER_SOCKET; read -r WORKSPACE; read -r GRANTS; read -r BOXMAKER_BROKERD_STATE; } \
  <<<"$BROKERD_PATHS"
# Where brokerd says how its start went (ready, or failed and why): make run waits on it, the
# chat's tools line and make status read it.
export BOXMAKER_BROKERD_STATE
mkdir -p "$WORKSPACE"
# As root, brokerd's sandbox runs commands as nobody (docs/decisions/sandbox.md), which must pass
# through the run folder (0711: it can pass, not list) and write the workspace; else shell is off.
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
  chmod 0711 "$BOXMAKER_RUN"
  chown nobody: "$WORKSPACE"
fi
[ -e "$GRANTS" ] || install -m 0600 "$PROFILE_GRANTS" "$GRANTS"
cp conf/programs/brokerd.conf "$BOXMAKER_RUN/supervisord.d/"
PROGRAMS="brokerd $PROGRAMS"
printf 'BOXMAKER_BROKERD_CONFIG=%q\nBOXMAKER_OWNER_SOCKET=%q\nBOXMAKER_BROKERD_STATE=%q\n' \
  "$BOXMAKER_BROKERD_CONFIG" "$BOXMAKER_OWNER_SOCKET" "$BOXMAKER_BROKERD_STATE" \
  >>"$BOXMAKER_RUN/run.env"
# gatewayd (issue 36): only with GATEWAY=path/to/gateway.toml (conf/gateway.example.toml); without
# it an earlier run's program file is removed and nothing else changes. Its config and token file
# are checked here, so a mistake is one line now rather than a program supervisord gave up on.
rm -f "$BOXMAKER_RUN/supervisord.d/gatewayd.conf"
if [ -n "${GATEWAY:-}" ]; then
  [ -f "$GATEWAY" ] || fail "GATEWAY=$GATEWAY: no such file (conf/gateway.example.toml shows every key)"
  export BOXMAKER_GATEWAY_CONFIG
  BOXMAKER_GATEWAY_CONFIG=$(realpath "$GATEWAY")
  "$PY" -m boxmaker.gatewayd check --config "$BOXMAKER_GATEWAY_CONFIG" >/dev/null \
    || fail "GATEWAY=$GATEWAY: fix the line above, or run without GATEWAY"
  cp conf/programs/gatewayd.conf "$BOXMAKER_RUN/supervisord.d/"
  printf 'BOXMAKER_GATEWAY_CONFIG=%q\n' "$BOXMAKER_GATEWAY_CONFIG" >>"$BOXMAKER_RUN/run.env"
fi
CONF=$ROOT/conf/supervisord.conf
CTL=("$ROOT/.venv/bin/supervisorctl" -c "$CONF")

# A second `make run` starts everything afresh (new code, config and environment): supervisord
# is shut down (its programs stop as `make stop` stops them) and started again. That takes a few
# seconds, where `supervisorctl restart all` would wait out each program's startsecs in turn.
if OLD=$("${CTL[@]}" pid 2>/dev/null) && [ -n "$OLD" ] && kill -0 "$OLD" 2>/dev/null; then
  echo "run: supervisord is already running (pid $OLD); starting it afresh"
  "${CTL[@]}" shutdown >/dev/null || fail "supervisorctl shutdown failed; see $BOXMAKER_RUN/supervisord.log"
  for _ in $(seq 600); do kill -0 "$OLD" 2>/dev/null || break; sleep 0.1; done
  ! kill -0 "$OLD" 2>/dev/null \
    || fail "supervisord (pid $OLD) did not stop within 60 s; see $BOXMAKER_RUN/supervisord.log"
fi
# The local llama-server's port must be free (another checkout's `make run` may hold 18080):
# said here, in seconds, rather than as the server's bind error after its start retries.
if [ -z "${UPSTREAM:-}" ]; then
  "$PY" - "$BOXMAKER_LLAMA_PORT" <<'PYEOF' || exit 1
import socket, sys
try:
    with socket.socket() as s:  # SO_REUSEADDR: a closed server's TIME_WAIT is no holder
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError as e:
    sys.exit(f"run: port {sys.argv[1]} for the local llama-server is taken ({e.strerror}): "
             "another `make run` or server holds it; set BOXMAKER_LLAMA_PORT=<a free port>")
PYEOF
fi
rm -f "$BOXMAKER_BROKERD_STATE"  # a previous brokerd's state is no news of this one
"$ROOT/.venv/bin/supervisord" -c "$CONF" \
  || fail "supervisord did not start; see $BOXMAKER_RUN/supervisord.log"
# From here a failed start stops what it started, so nothing is left running half-way; so does
# Ctrl-C (one line: the wait exits quietly on SIGINT, and bash runs the trap once it has).
stop_started() {
  echo "run: ${1:-stopping what this run started} (supervisorctl shutdown)" >&2
  "${CTL[@]}" shutdown >/dev/null 2>&1 || true
}
trap 'trap "" INT TERM; stop_started "interrupted: stopping what this run started"; exit 130' \
  INT TERM

# Wait (bounded by the profile's start_s, or BOXMAKER_START_S) for llama-server to answer /health
# and for inferproxy's and loopd's sockets (loopd binds its socket once its self-test has passed),
# saying every few seconds what it waits for (llama-server's /health says while it loads the
# model). A program that supervisord gives up on, or a llama-server that exits after it had
# started, ends the wait at once, in one line with its log's last lines
# (boxmaker/verify/ready.py; boxmaker/verify/programs.py, as `make verify-device` does).
"$PY" -m boxmaker.verify.ready "${BOXMAKER_START_S:-$PROFILE_START_S}" $PROGRAMS \
  || { trap - INT TERM; stop_started; exit 1; }
trap - INT TERM  # the stack is up: from here Ctrl-C is the chat's, and leaves it running
"${CTL[@]}" status

# bxctl finds this run's sockets and home in run.env (boxmaker/bxctl/stack.py): no flags needed.
if [ -t 0 ]; then
  exec "$ROOT/.venv/bin/bxctl" chat
else
  "$PY" -c 'import sys
from pathlib import Path
from boxmaker.bxctl.stack import tools_line
print(tools_line(Path(sys.argv[1])))' "$BOXMAKER_RUN"  # on a terminal the chat says it
  echo "run: standard input is not a terminal, so no chat; try:"
  echo "  $ROOT/.venv/bin/bxctl chat --say 'Hello.'    (or: make chat, on a terminal)"
fi
