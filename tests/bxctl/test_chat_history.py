"""The chat's history file by the home-file rules (issue 38 items 2 and 3): a FIFO, a link or a
device in its place never hangs or floods the chat, and a write that fails (a full disk) drops
the history with one line while the chat goes on."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from boxmaker.bxctl.chat_history import MAX_BYTES, BoundedFileHistory, entry, parse
from boxmaker.bxctl.lineinput import history_file
from boxmaker.bxctl.stack import read_run_env
from boxmaker.session.errors import SessionError

BOUND_S = 10.0


def finishes(fn: Callable[[], object]) -> object:
    """`fn()` on a thread, which must end within BOUND_S (a FIFO open or read would hang)."""
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(BOUND_S)
    assert not t.is_alive(), "it hung"
    return out[0] if out else None


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def link_to(target: str) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        path.symlink_to(target)
        return path

    return make


def folder(path: Path) -> Path:
    path.mkdir()
    return path


NOT_FILES: list[tuple[str, Callable[[Path], Path]]] = [
    ("fifo", fifo),
    ("link_to_dev_zero", link_to("/dev/zero")),
    ("link_to_a_file", link_to("/etc/hostname")),
    ("dangling_link", link_to("/nonexistent/x")),
    ("folder", folder),
]


@pytest.mark.parametrize(("name", "make"), NOT_FILES, ids=[n for n, _ in NOT_FILES])
def test_a_history_path_that_is_not_a_file_is_refused_at_once(
    tmp_path: Path, name: str, make: Callable[[Path], Path]
) -> None:
    path = make(tmp_path / "chat_history")

    def attempt() -> object:
        try:
            history_file(path)
        except (OSError, SessionError) as e:
            return e
        return None

    got = finishes(attempt)
    assert isinstance(got, OSError | SessionError), got
    assert str(path) in str(got)


@pytest.mark.parametrize(("name", "make"), NOT_FILES, ids=[n for n, _ in NOT_FILES])
def test_history_swapped_for_something_else_is_not_read(
    tmp_path: Path, name: str, make: Callable[[Path], Path]
) -> None:
    path = history_file(tmp_path / "chat_history")
    path.unlink()  # swapped after the check, before prompt_toolkit loads it
    make(path)
    store = BoundedFileHistory(path)
    assert finishes(lambda: list(store.load_history_strings())) == []
    assert store.dropped is not None
    assert str(path) in store.dropped
    finishes(lambda: store.store_string("hello"))  # and never written through
    assert path.is_symlink() or not path.is_file()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS])
def test_a_failed_write_drops_the_history_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    path = history_file(tmp_path / "chat_history")
    store = BoundedFileHistory(path)
    store.store_string("kept")
    real = os.write

    def full(fd: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{fd}") == str(path):
            raise OSError(code, os.strerror(code))
        return real(fd, data)

    monkeypatch.setattr(os, "write", full)
    store.store_string("lost")  # no exception: a key handler would print a traceback
    assert store.dropped == (
        f"[history: cannot write {path}: {os.strerror(code)}; this chat's messages are kept "
        "in memory only from now on]"
    )
    store.dropped = None
    store.store_string("again")  # dropped: not tried, not said again
    assert store.dropped is None
    monkeypatch.setattr(os, "write", real)
    assert parse(path.read_bytes()) == ["kept"]


def test_the_format_is_prompt_toolkits() -> None:
    data = entry("one") + entry("two\nlines") + entry("three")
    assert parse(data) == ["three", "two\nlines", "one"]


def test_a_history_over_its_bound_is_not_read(tmp_path: Path) -> None:
    path = history_file(tmp_path / "chat_history")
    with path.open("ab") as f:
        f.truncate(MAX_BYTES + 1)
    store = BoundedFileHistory(path)
    assert list(store.load_history_strings()) == []
    assert store.dropped is not None
    assert "over its bound" in store.dropped


@pytest.mark.parametrize(("name", "make"), NOT_FILES, ids=[n for n, _ in NOT_FILES])
def test_run_env_that_is_not_a_file_is_ignored_at_once(
    tmp_path: Path, name: str, make: Callable[[Path], Path]
) -> None:
    path = make(tmp_path / "run.env")
    assert finishes(lambda: read_run_env(path)) == {}
