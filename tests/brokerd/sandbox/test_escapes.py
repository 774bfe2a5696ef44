"""Path escapes through a real brokerd on broker.sock: every row must come back as an error
result, and no byte from outside the workspace may appear in any answer or be changed.

The same table runs on openat2 (RESOLVE_BENEATH) and on the fallback walk (O_NOFOLLOW per
component, BOXMAKER_BROKERD_NO_OPENAT2=1). The reason each row gives is checked on openat2; the
fallback refuses every symlink, so there only "refused, nothing leaked" is checked.
"""

from __future__ import annotations

import ctypes
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.brokerd.rig import Rig

SECRET = "TOPSECRET-outside-the-workspace"
Setup = Callable[[Path, Path], None]  # (workspace, outside folder)


def nothing(ws: Path, out: Path) -> None:
    pass


def symlink(name: str, to: str | Callable[[Path], str]) -> Setup:
    def setup(ws: Path, out: Path) -> None:
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(to(out) if callable(to) else to, ws / name)

    return setup


def hardlink(ws: Path, out: Path) -> None:
    os.link(out / "secret.txt", ws / "hard.txt")


def fifo(ws: Path, out: Path) -> None:
    os.mkfifo(ws / "fifo")


def device(ws: Path, out: Path) -> None:
    try:
        os.mknod(ws / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers
    except PermissionError:  # not root: a FIFO is the non-regular file we can make
        os.mkfifo(ws / "zero")


def sparse(ws: Path, out: Path) -> None:
    with open(ws / "big.bin", "wb") as f:
        f.truncate(10 * 1024**3)  # 10 GB, no block written


def loop(ws: Path, out: Path) -> None:
    os.symlink("loop2", ws / "loop1")
    os.symlink("loop1", ws / "loop2")


def notes_link(ws: Path, out: Path) -> None:
    pass  # made after start: the home is the rig's


def a_file(ws: Path, out: Path) -> None:
    (ws / "plain").write_text("x")


def a_dir(ws: Path, out: Path) -> None:
    (ws / "sub").mkdir()


ROWS: list[tuple[str, Setup, str, dict[str, object], str]] = [
    # (id, setup, tool, arguments, what the openat2 answer says)
    ("dotdot", nothing, "read_file", {"path": "../outside/secret.txt"}, "'..'"),
    ("dotdot-deep", nothing, "read_file", {"path": "a/../../outside/secret.txt"}, "'..'"),
    ("absolute-etc", nothing, "read_file", {"path": "/etc/passwd"}, "outside the workspace"),
    ("absolute-sibling", nothing, "read_file", {"path": "{ws}x/secret.txt"}, "outside the work"),
    ("absolute-dotdot", nothing, "read_file", {"path": "{ws}/../outside/secret.txt"}, "'..'"),
    ("symlink-to-etc", symlink("etc", "/etc"), "read_file", {"path": "etc/passwd"}, "a symlink"),
    ("symlink-file-out", symlink("s", lambda o: str(o / "secret.txt")), "read_file",
     {"path": "s"}, "a symlink"),
    ("symlink-relative-out", symlink("r", "../outside/secret.txt"), "read_file", {"path": "r"},
     "a symlink"),
    ("symlink-loop", loop, "read_file", {"path": "loop1"}, "a symlink"),
    ("proc-self-root", symlink("p", "/proc/self/root/etc/passwd"), "read_file", {"path": "p"},
     "a symlink"),
    ("proc-magic-cwd", symlink("c", "/proc/self/cwd"), "list_dir", {"path": "c"}, "a symlink"),
    ("hardlink-read", hardlink, "read_file", {"path": "hard.txt"}, "hard links"),
    ("hardlink-write", hardlink, "write_file", {"path": "hard.txt", "content": "pwned"},
     "hard links"),
    ("fifo", fifo, "read_file", {"path": "fifo"}, "not a regular file"),
    ("dev-zero-node", device, "read_file", {"path": "zero"}, "not a regular file"),
    ("dev-zero-link", symlink("z", "/dev/zero"), "read_file", {"path": "z"}, "a symlink"),
    ("sparse-10gb", sparse, "read_file", {"path": "big.bin"}, "over the limit"),
    ("newline-name", nothing, "write_file", {"path": "a\nb", "content": "x"}, "control char"),
    ("name-4096", nothing, "write_file", {"path": "x" * 4096, "content": "x"}, "4095"),
    ("component-256", nothing, "write_file", {"path": "y" * 256, "content": "x"}, "255 bytes"),
    ("nul-byte", nothing, "read_file", {"path": "a\x00b"}, "NUL"),
    ("write-via-dir-link", symlink("o", lambda o: str(o)), "write_file",
     {"path": "o/new.txt", "content": "x"}, "a symlink"),
    ("edit-via-link", symlink("e", lambda o: str(o / "secret.txt")), "edit_file",
     {"path": "e", "old": "TOP", "new": "BOT"}, "a symlink"),
    ("list-etc-link", symlink("etc", "/etc"), "list_dir", {"path": "etc"}, "a symlink"),
    ("list-root", nothing, "list_dir", {"path": "/"}, "outside the workspace"),
    ("symlink-inside", symlink("in", "plain"), "read_file", {"path": "in"}, "a symlink"),
    ("write-over-symlink", symlink("w", lambda o: str(o / "secret.txt")), "write_file",
     {"path": "w", "content": "pwned"}, "a symlink"),
    ("read-a-folder", a_dir, "read_file", {"path": "sub"}, "folder"),
    ("write-a-folder", nothing, "write_file", {"path": ".", "content": "x"}, "folder"),
    ("parent-is-a-file", a_file, "write_file", {"path": "plain/x", "content": "x"}, "not a folder"),
]  # fmt: skip


def outside_state(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "walk"])
def test_every_escape_is_refused_and_leaks_nothing(rig: Rig, openat2: bool) -> None:
    rig.openat2 = openat2
    out = rig.base / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(SECRET)
    rig.workspace.mkdir()
    setups = {}
    for row_id, setup, *_ in ROWS:
        ws = rig.workspace / row_id  # each row in a folder of its own, beneath the workspace
        ws.mkdir()
        setup(ws, out)
        setups[row_id] = ws
    (rig.workspace / "outside").symlink_to(out)  # so "{ws}/../outside" would reach it lexically
    before = outside_state(out)
    rig.start()
    failures = []
    for row_id, _, tool, args, says in ROWS:
        prefix = f"{row_id}/"
        path = str(args["path"])
        if path.startswith("{ws}"):
            path = path.replace("{ws}", str(rig.workspace))
        elif not path.startswith("/"):
            path = prefix + path
        started = time.monotonic()
        body = rig.call(tool, {**args, "path": path})
        took = time.monotonic() - started
        content = body["content"]
        if not content.startswith("error: ") or SECRET in content or "root:" in content:
            failures.append(f"{row_id}: not refused: {content[:200]!r}")
        elif openat2 and says not in content:
            failures.append(f"{row_id}: refused, but the reason {content!r} lacks {says!r}")
        if took > 5:
            failures.append(f"{row_id}: took {took:.1f} s (a FIFO or a huge read?)")
    assert failures == []
    assert outside_state(out) == before  # nothing outside was written
    assert not (out / "new.txt").exists()


_libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> None:
    """renameat2(RENAME_EXCHANGE): `a` and `b` swap places in one atomic step."""
    if _libc.renameat2(AT_FDCWD, bytes(a), AT_FDCWD, bytes(b), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def test_a_symlink_swapped_between_check_and_open_never_leads_out(rig: Rig) -> None:
    """A thread swaps `d` between a real folder inside and a symlink to a folder outside, as fast
    as it can (atomically: renameat2 RENAME_EXCHANGE), while calls read d/secret.txt: every answer
    is the inside file or a refusal, never the outside one."""
    out = rig.base / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(SECRET)
    rig.workspace.mkdir()
    (rig.workspace / "d").mkdir()
    (rig.workspace / "d" / "secret.txt").write_text("inside")
    os.symlink(str(out), rig.workspace / "e")
    rig.start()
    stop = threading.Event()
    flips = 0

    def flip() -> None:
        nonlocal flips
        while not stop.is_set():
            exchange(rig.workspace / "d", rig.workspace / "e")
            flips += 1

    swapper = threading.Thread(target=flip, daemon=True)
    swapper.start()
    answers: dict[str, int] = {}
    try:
        for _ in range(300):
            content = rig.call("read_file", {"path": "d/secret.txt"})["content"]
            assert SECRET not in content
            refused = "refused" if "a symlink" in content else content
            key = "inside" if content == "inside" else refused
            answers[key] = answers.get(key, 0) + 1
    finally:
        stop.set()
        swapper.join()
    assert flips > 300, "the swapper did not race the reads"
    assert set(answers) <= {"inside", "refused"}, answers
    assert answers.get("refused", 0) > 0, answers  # the race was live: both states were seen
    assert answers.get("inside", 0) > 0, answers


def test_a_symlink_inside_cannot_lead_past_a_grant(rig: Rig) -> None:
    """pub/ is readable, secrets/ is not: a link pub/k -> ../secrets/key stays inside the
    workspace, so only the rule that no symlink is followed keeps the deny."""
    rig.grants_text = (
        '[[grant]]\ntool = "read_file"\nmode = "allow"\n'
        '[[grant]]\ntool = "read_file"\nmode = "deny"\npaths = ["secrets"]\n'
    )
    rig.workspace.mkdir()
    (rig.workspace / "secrets").mkdir()
    (rig.workspace / "secrets" / "key").write_text(SECRET)
    (rig.workspace / "pub").mkdir()
    os.symlink("../secrets/key", rig.workspace / "pub" / "k")
    os.symlink("../secrets", rig.workspace / "pub" / "s")
    rig.start()
    assert rig.call("read_file", {"path": "secrets/key"})["content"].startswith("error: denied")
    for path in ("pub/k", "pub/s/key"):
        content = rig.call("read_file", {"path": path})["content"]
        assert SECRET not in content
        assert "a symlink" in content


def test_a_note_file_replaced_by_a_symlink_is_refused(rig: Rig) -> None:
    out = rig.base / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(SECRET)
    rig.start()
    assert rig.call("note", {"text": "first"})["content"] == "noted in memory/notes.md"
    notes = rig.home / "memory" / "notes.md"
    notes.unlink()
    notes.symlink_to(out / "secret.txt")
    content = rig.call("note", {"text": "second"})["content"]
    assert content.startswith("error: ")
    assert (out / "secret.txt").read_text() == SECRET
