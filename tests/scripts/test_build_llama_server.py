"""The decisions of scripts/build_llama_server.sh, with the compile step replaced by a stand-in
(BOXMAKER_LLAMA_FAKE_BUILD) and a cache folder of the test's own: a binary that cannot serve is
never handed back, a cached one that dies is rebuilt once, and the flags are part of the key.
The smoke test itself (scripts/smoke_llama_server.py) runs for real against the stand-ins.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "build_llama_server.sh"
STANDIN = Path(__file__).with_name("standin_build.py")
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
TIMEOUT = 120.0

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    # A model file in place, so the script fetches nothing; the stand-ins never read it.
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / MODEL).write_bytes(b"GGUF stand-in")
    return tmp_path


@pytest.fixture
def run(cache: Path) -> Run:
    def run(kind: str, **env: str) -> subprocess.CompletedProcess[str]:
        full = {k: v for k, v in os.environ.items() if not k.startswith("BOXMAKER_LLAMA")}
        full.update(
            BOXMAKER_CACHE=str(cache),
            PYTHON=sys.executable,
            BOXMAKER_LLAMA_FAKE_BUILD=f"{sys.executable} {STANDIN} {kind} {cache / 'builds'}",
            **env,
        )
        return subprocess.run(
            ["bash", str(SCRIPT)], env=full, capture_output=True, text=True, timeout=TIMEOUT
        )

    return run


def line_within(pipe: IO[str], seconds: float) -> str:
    """The pipe's next line, or "" when none comes within `seconds` (the script waits on)."""
    ready, _, _ = select.select([pipe], [], [], seconds)
    return pipe.readline() if ready else ""


def builds(cache: Path) -> list[str]:
    path = cache / "builds"
    return path.read_text().split()[::2] if path.exists() else []


def folder(done: subprocess.CompletedProcess[str]) -> Path:
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


def test_a_fresh_build_that_serves_is_cached_and_a_second_run_reuses_it(
    run: Run, cache: Path
) -> None:
    first = folder(run("serves"))
    assert first.parent == cache
    assert (first / "bin" / "llama-server").is_file()
    assert "-DGGML_NATIVE=OFF" in (first / "build-flags.txt").read_text().split()
    assert builds(cache) == ["serves"]

    again = folder(run("serves"))
    assert again == first
    assert builds(cache) == ["serves"], "a cache hit that serves must not rebuild"


def test_a_cached_binary_that_dies_of_sigill_is_rebuilt_once(run: Run, cache: Path) -> None:
    dest = folder(run("serves"))
    # Plant a binary that traps where the good one was, as a native build on an AMX VM would.
    planted = dest / "bin" / "llama-server"
    planted.write_text("#!/bin/sh\nkill -ILL $$\n")

    done = run("serves")
    assert folder(done) == dest
    assert "cannot serve; rebuilding it once" in done.stderr
    assert "SIGILL" in done.stderr
    assert builds(cache) == ["serves", "serves"]
    assert "kill -ILL" not in planted.read_text()


def test_a_fresh_build_that_dies_of_sigill_is_never_handed_back(run: Run, cache: Path) -> None:
    done = run("sigill")
    assert done.returncode == 1
    assert done.stdout == ""
    assert "died of SIGILL: the binary uses an instruction this CPU cannot run" in done.stderr
    assert "llama threadpool init" in done.stderr, "the log tail is shown"
    assert "nothing was cached" in done.stderr
    assert not list(cache.glob("llama-server-*")), "no folder, not even a .tmp, is left"


def test_a_rebuild_that_still_cannot_serve_fails_with_the_cause(run: Run, cache: Path) -> None:
    dest = folder(run("serves"))
    (dest / "bin" / "llama-server").write_text("#!/bin/sh\nkill -ILL $$\n")
    done = run("sigill")
    assert done.returncode == 1
    assert "died of SIGILL" in done.stderr
    assert not dest.exists(), "the broken cached binary is gone, not handed back"


def test_the_old_unkeyed_cache_folder_is_not_reused(run: Run, cache: Path) -> None:
    old = cache / "llama-server-11434.0.0"
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "llama-server").write_text("#!/bin/sh\nkill -ILL $$\n")
    (old / "bin" / "llama-server").chmod(0o755)
    dest = folder(run("serves"))
    assert dest != old
    assert dest.name.startswith("llama-server-11434.0.0-")
    assert builds(cache) == ["serves"]


def test_the_flags_are_part_of_the_cache_key(run: Run, cache: Path) -> None:
    plain = folder(run("serves"))
    extra = folder(run("serves", BOXMAKER_LLAMA_CMAKE_EXTRA="-DGGML_LTO=ON"))
    assert extra != plain
    assert "-DGGML_LTO=ON" in (extra / "build-flags.txt").read_text().split()
    assert builds(cache) == ["serves", "serves"]


def test_rebuild_on_request(run: Run, cache: Path) -> None:
    first = folder(run("serves"))
    assert folder(run("serves", BOXMAKER_LLAMA_REBUILD="1")) == first
    assert builds(cache) == ["serves", "serves"]


def test_a_build_waiting_on_the_lock_says_so_until_it_gets_it(cache: Path, run: Run) -> None:
    """Another build holds the cache's lock: the script names the holder, says every few seconds
    that it still waits (BOXMAKER_LOCK_SAY_S, 15 by default), and builds once the lock is free."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,sys; f=open(sys.argv[1],'a'); "
         "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
         str(cache / ".build.lock")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None
    assert holder.stdin is not None
    assert holder.stdout.readline() == "held\n"
    (cache / ".build.lock.holder").write_text("pid 1, since 00:00:00 UTC\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOXMAKER_LLAMA")}
    env.update(
        BOXMAKER_CACHE=str(cache), PYTHON=sys.executable, BOXMAKER_LOCK_SAY_S="1",
        BOXMAKER_LLAMA_FAKE_BUILD=f"{sys.executable} {STANDIN} serves {cache / 'builds'}",
    )  # fmt: skip
    script = subprocess.Popen(
        ["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert script.stderr is not None
    try:
        first = line_within(script.stderr, TIMEOUT)
        assert "waiting for another build" in first, first
        assert "held by pid 1, since 00:00:00 UTC" in first, first
        second = line_within(script.stderr, TIMEOUT)  # the lock is asked for again every 1 s
        assert "still waiting for the other build (1 s)" in second, second
        assert builds(cache) == []  # nothing built while the lock is held
    finally:
        holder.stdin.close()  # the holder exits: the lock is free
        holder.wait(TIMEOUT)
    out, _ = script.communicate(timeout=TIMEOUT)
    assert script.returncode == 0, out
    assert builds(cache) == ["serves"]
