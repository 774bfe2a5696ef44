"""Issue 37 item 4 and issue 38 items 2 and 5: "always" while the owner edits grants.toml.

An editor that truncates and rewrites in place shows brokerd, for a moment, an empty file or
a prefix of the new one. None of those is ever the base of a merge: the "always" adds nothing,
says why in one line (the decision log's `grant_refused`, brokerd's own log), the call still
runs as the yes it also is, and every rule of the owner is still in the file. The file is read
by the home-file rules (a FIFO, a link to /dev/zero, a folder: refused at once, no hang). A
merge killed half way leaves `grants.toml.<hex>.tmp`; the next start removes it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.brokerd.approvals import ASK_WRITES, Call, owner_says
from tests.support.brokerd.rig import BOUND_S, Rig
from tests.support.procs import wait_for

OWNER = ASK_WRITES + '\n[[grant]]\ntool = "fetch"\nmode = "deny"\n'


def settled(path: Path) -> None:
    """Saved a while ago: what the owner's finished edit looks like."""
    then = time.time() - 60  # well past amend.SETTLE_S
    os.utime(path, (then, then), follow_symlinks=False)


def empty(p: Path) -> None:
    p.write_text("")  # open('w') before its write: what nano and `cat >` leave for a moment
    settled(p)


def blank(p: Path) -> None:
    p.write_text("\n  \n")
    settled(p)


def comments_only(p: Path) -> None:
    p.write_text("# the owner's grants\n# (rewritten below)\n")
    settled(p)


def cut_mid_line(p: Path) -> None:
    p.write_text(OWNER[: OWNER.index('mode = "allow"') + 5])  # a prefix, cut in a line
    settled(p)


def cut_after_a_rule(p: Path) -> None:
    p.write_text(OWNER[: OWNER.index("[[grant]]", 10)])  # a whole rule, then nothing yet
    # just written: the rest is coming (mtime now)


def cut_mid_table(p: Path) -> None:
    p.write_text(OWNER[: OWNER.index('tool = "read_file"')])  # `[[grant]]` with no tool yet
    settled(p)


def fifo(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)


def link_to_zero(p: Path) -> None:
    p.unlink()
    p.symlink_to("/dev/zero")


def folder(p: Path) -> None:
    p.unlink()
    p.mkdir()


EDITS: dict[str, Callable[[Path], None]] = {
    "empty": empty,
    "blank": blank,
    "comments only": comments_only,
    "cut mid-line": cut_mid_line,
    "cut after a rule, just now": cut_after_a_rule,
    "cut mid-table": cut_mid_table,
    "a FIFO": fifo,
    "a link to /dev/zero": link_to_zero,
    "a folder": folder,
}


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_always_never_merges_into_a_file_caught_mid_edit(rig: Rig, edit: str) -> None:
    rig.grants_text = OWNER
    rig.start()
    EDITS[edit](rig.grants)
    before = _content(rig.grants)
    call = Call(rig, "write_file", {"path": "a.txt", "content": "x"})
    owner_says(rig, call.wait_needed()["id"], "always")
    assert call.result() == "wrote a.txt: 1 bytes"  # the yes of it still holds
    assert _content(rig.grants) == before  # nothing merged into the half-written file
    line = _warned(rig, '"always" on call')
    assert "no rule was added" in line, line
    rig.stop()
    assert b'"type":"grant_refused"' in rig.log.read_bytes()


def _content(p: Path) -> str:
    if p.is_symlink() or not p.is_file():
        return f"<{os.lstat(p).st_mode:o}>"
    return p.read_text()


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_always_answered_while_an_editor_rewrites_in_place_loses_no_rule(
    rig: Rig, cut: int
) -> None:
    """The race of the issue, made exact: an editor truncates the file and writes it again in
    place; the "always" is answered when it has written its first `cut` rules (a file that
    parses); then it writes the rest, into the file it holds open. Every owner rule is in the
    file at the end, the fetch deny included."""
    rig.grants_text = OWNER
    rig.start()
    rules = OWNER.split("\n[[grant]]")
    head = "\n[[grant]]".join(rules[: cut + 1]) + "\n"
    with open(rig.grants, "w") as editor:
        editor.write(head)
        editor.flush()
        call = Call(rig, "write_file", {"path": "a.txt", "content": "x"})
        owner_says(rig, call.wait_needed()["id"], "always")
        assert call.result() == "wrote a.txt: 1 bytes"
        editor.write(OWNER[len(head) :])  # the rest of the owner's file
    text = rig.grants.read_text()
    assert text.startswith(OWNER), text
    assert 'tool = "fetch"\nmode = "deny"' in text
    assert "no rule was added" in _warned(rig, '"always" on call')


def test_always_on_a_settled_file_still_merges(rig: Rig) -> None:
    rig.grants_text = OWNER
    rig.start()
    call = Call(rig, "write_file", {"path": "a.txt", "content": "x"})
    owner_says(rig, call.wait_needed()["id"], "always")
    call.result()
    text = rig.grants.read_text()
    assert text.startswith(OWNER)
    assert text.endswith('files = ["a.txt"]\n')


def test_a_merge_cut_short_leaves_no_temporary_file_after_the_next_start(rig: Rig) -> None:
    rig.base.mkdir(parents=True, exist_ok=True)
    left = [rig.base / f"grants.toml.{h}.tmp" for h in ("0badc0de", "12345678", "abcdef01")]
    kept = [rig.base / "grants.toml.notes.tmp", rig.base / "grants.toml.0badc0de.tmp.bak"]
    for p in left + kept:
        p.write_text("[[grant]]\n")
    rig.start()
    for p in left:
        assert not p.exists(), p
    for p in kept:
        assert p.exists(), p  # only what a merge names its temporary files
    assert "grants.toml.0badc0de.tmp" in _warned(rig, "0badc0de")


def _warned(rig: Rig, contains: str) -> str:
    """brokerd's one line on stderr holding `contains`."""
    daemon = rig.daemon
    assert daemon is not None
    return wait_for(
        lambda: next((line for line in list(daemon.err_lines) if contains in line), None),
        f"brokerd's line with {contains!r}",
        BOUND_S,
    )
