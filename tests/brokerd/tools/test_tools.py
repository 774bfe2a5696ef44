"""The tools through a real brokerd: what each answers, the cap, the windows, atomic writes."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime, timedelta

import pytest

from boxmaker.brokerd.tools.files import tally
from tests.support.brokerd.rig import Rig


def test_read_file_windows_and_the_cap(rig: Rig) -> None:
    rig.broker = {"result_cap_bytes": 1024}
    rig.workspace.mkdir()
    (rig.workspace / "long.txt").write_text("".join(f"{i:04d}\n" for i in range(1000)))  # 5000 B
    rig.start()
    first = rig.call("read_file", {"path": "long.txt"})
    assert first["truncated"] is True
    assert first["untrusted"] is True  # a file may hold text written to steer the model
    assert len(first["content"].encode()) <= 1024
    assert first["content"].endswith("call again with offset=928]")
    window = rig.call("read_file", {"path": "long.txt", "offset": 4990, "limit": 100})
    assert window["content"] == "0998\n0999\n"
    assert window["truncated"] is False
    past = rig.call("read_file", {"path": "long.txt", "offset": 9000})
    assert past["content"] == ""
    # limit 0 is "no limit": the first window, not nothing and "call again with offset=0"
    assert rig.call("read_file", {"path": "long.txt", "offset": 0, "limit": 0}) == first


def test_a_cut_never_splits_a_character(rig: Rig) -> None:
    rig.broker = {"result_cap_bytes": 257}  # a window of 161 bytes: half a character at its end
    rig.workspace.mkdir()
    (rig.workspace / "wide.txt").write_text("é" * 1000)
    rig.start()
    body = rig.call("list_dir", {"path": "."})
    assert body["content"] == "1 file (1 .txt):\nwide.txt"
    content = rig.call("read_file", {"path": "wide.txt"})["content"]
    assert "\ufffd" not in content
    assert content.endswith("call again with offset=160]")  # the half is left for the next


def test_write_then_edit_then_read(rig: Rig) -> None:
    rig.start()
    assert rig.call("write_file", {"path": "f.txt", "content": "a b a"})["content"] == (
        "wrote f.txt: 5 bytes"
    )
    twice = rig.call("edit_file", {"path": "f.txt", "old": "a", "new": "c"})["content"]
    assert twice == "error: f.txt: old text found 2 times; it must occur exactly once " \
        "(give more context)"  # fmt: skip
    none = rig.call("edit_file", {"path": "f.txt", "old": "a  b", "new": "c"})["content"]
    # A miss names the next step and shows the lines to copy old from (issue 40.2).
    assert none == (
        "error: f.txt: old text not found; the nearest lines are 'a b a'. Read the file first "
        "(read_file) and give old exactly as it is written there, or write_file the whole file."
    )
    assert rig.call("edit_file", {"path": "f.txt", "old": "b", "new": "B"})["content"] == (
        "edited f.txt: now 5 bytes"
    )
    assert rig.call("read_file", {"path": "f.txt"})["content"] == "a B a"
    missing = rig.call("edit_file", {"path": "nope.txt", "old": "a", "new": "b"})["content"]
    assert "no such file" in missing


def test_a_missing_file_lists_the_folder_that_is_there(rig: Rig) -> None:
    """read_file of a missing file names the nearest existing folder's entries (issue 40.2):
    the model's next call can name the file that is there instead of guessing."""
    (rig.workspace / "notes").mkdir(parents=True)
    (rig.workspace / "notes" / "plans.txt").write_text("x")
    (rig.workspace / "notes" / "old").mkdir()
    rig.start()
    got = rig.call("read_file", {"path": "notes/plan.txt"})["content"]
    assert got == (
        "error: notes/plan.txt: no such file or folder; notes/ holds: notes/old/, "
        "notes/plans.txt. Use one of those paths."
    )
    deeper = rig.call("read_file", {"path": "nothere/a/b.txt"})["content"]
    assert deeper.endswith("; the workspace holds: notes/. Use one of those paths."), deeper


def test_a_write_is_atomic_and_keeps_the_mode(rig: Rig) -> None:
    rig.workspace.mkdir()
    target = rig.workspace / "f.txt"
    target.write_text("old")
    os.chmod(target, 0o640)
    before = target.stat().st_ino
    rig.start()
    rig.call("write_file", {"path": "f.txt", "content": "new"})
    assert target.read_text() == "new"
    assert target.stat().st_ino != before  # a new file renamed over, never written in place
    assert target.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in rig.workspace.iterdir()] == ["f.txt"]  # no temp file left


def test_oversize_content_is_refused(rig: Rig) -> None:
    rig.broker = {"max_write_bytes": 10}
    rig.start()
    body = rig.call("write_file", {"path": "f.txt", "content": "x" * 11})
    assert "over [broker] max_write_bytes" in body["content"]
    assert not (rig.workspace / "f.txt").exists()


def test_notes_append(rig: Rig) -> None:
    rig.start()
    rig.call("note", {"text": "one"})
    rig.call("note", {"text": "two\n"})
    assert (rig.home / "memory" / "notes.md").read_text() == "one\ntwo\n"


def test_an_ungranted_tool_is_denied_and_not_listed(rig: Rig) -> None:
    rig.grants_text = '[[grant]]\ntool = "read_file"\nmode = "allow"\n' \
        '[[grant]]\ntool = "write_file"\nmode = "deny"\n'  # fmt: skip
    rig.start()
    body = rig.call("list_dir", {"path": "."})
    assert body["content"] == (
        "error: denied: no grant for list_dir: the owner has not granted this tool"
    )
    conn = rig.loopd()
    with conn.sock:
        conn.send("list", {}, True)
        tools = conn.recv()
    assert tools is not None
    # no write_file; fetch asks by default, so it is offered unless a deny covers every host
    assert [t["name"] for t in tools.body["tools"]] == ["clock", "read_file", "fetch"]


def test_a_bad_frame_gets_an_error(rig: Rig) -> None:
    rig.start()
    conn = rig.loopd()
    with conn.sock:
        conn.send("call", {"tool": "read_file"}, True)
        got = conn.recv()
    assert got is not None
    assert got.kind == "error"


def test_a_write_makes_its_missing_folders_beneath_the_workspace(rig: Rig) -> None:
    rig.start()
    body = rig.call("write_file", {"path": "a/b/c.txt", "content": "deep"})
    assert body["content"] == "wrote a/b/c.txt: 4 bytes"
    assert (rig.workspace / "a" / "b" / "c.txt").read_text() == "deep"
    (rig.workspace / "a" / "out").symlink_to("/tmp")
    refused = rig.call("write_file", {"path": "a/out/new/x.txt", "content": "x"})["content"]
    assert refused.startswith("error: ")
    assert not os.path.exists("/tmp/new/x.txt")


def test_odd_names_and_bytes_come_back_as_valid_text(rig: Rig) -> None:
    rig.workspace.mkdir()
    os.mkdir(os.path.join(os.fsencode(rig.workspace), b"bad\xffname"))
    (rig.workspace / "two\nlines").write_text("x")
    (rig.workspace / "latin1.txt").write_bytes(b"caf\xe9 old\n")
    rig.broker = {}
    rig.grants_text = rig.grants_text + '\n[[grant]]\ntool = "edit_file"\nmode = "ask"\n'
    rig.start()
    listing = rig.call("list_dir", {"path": "."})["content"]
    assert listing.splitlines() == [
        "2 files (1 .txt), 1 folder:",  # "two\nlines" has no extension
        "bad\ufffdname/",
        "latin1.txt",
        "two\\nlines",
    ]
    conn = rig.loopd()
    with conn.sock:
        args = '{"path":"latin1.txt","old":"old","new":"new"}'
        conn.send("call", {"tool": "edit_file", "arguments": args}, True)
        needed = conn.recv()
        assert needed is not None
        assert needed.body["summary"] == "edit_file latin1.txt: waiting for the owner's answer"
        owner = rig.owner()
        with owner.sock:
            owner.send("claim", {"id": needed.body["id"]}, True)
            claimed = owner.recv()
            assert claimed is not None
            assert "-caf\ufffd old" in claimed.body["summary"]  # the owner sees the diff
            answer = {"id": needed.body["id"], "hash": claimed.body["hash"], "answer": "yes"}
            owner.send("answer", answer, True)
            assert owner.recv() is not None
        result = conn.recv()
    assert result is not None
    assert result.body["content"] == "edited latin1.txt: now 9 bytes"
    assert (rig.workspace / "latin1.txt").read_bytes() == b"caf\xe9 new\n"  # other bytes kept


# ---- class 1 (issue 27): a tool's answer may not reveal what a read denies ---------------------

READ_DENIED = """
[[grant]]
tool = "read_file"
mode = "allow"

[[grant]]
tool = "read_file"
mode = "deny"
paths = ["secrets"]

[[grant]]
tool = "edit_file"
mode = "allow"

[[grant]]
tool = "write_file"
mode = "allow"

[[grant]]
tool = "list_dir"
mode = "allow"
"""

CANARY = "canary-7f3a9c2e51"


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("edit_file", {"path": "secrets/key", "old": "c", "new": "c"}),  # the match count
        ("edit_file", {"path": "secrets/key", "old": CANARY[:6], "new": CANARY[:6]}),
        ("edit_file", {"path": "./secrets//key", "old": "x", "new": "y"}),  # another spelling
        ("edit_file", {"path": "secrets/key", "old": CANARY, "new": "x" * 500_000}),  # size
        ("edit_file", {"path": "secrets/missing", "old": "a", "new": "b"}),  # existence
        ("edit_file", {"path": "secrets/key", "old": "", "new": "b"}),
    ],
)
def test_a_read_denied_file_reveals_nothing_through_another_tool(
    rig: Rig, tool: str, args: dict[str, str]
) -> None:
    """An edit needs the read decision of what it reads: with read_file denied on secrets/,
    edit_file there is denied before it reads, whatever the guess (issue 27, class 1)."""
    rig.grants_text = READ_DENIED
    rig.workspace.mkdir()
    (rig.workspace / "secrets").mkdir()
    (rig.workspace / "secrets" / "key").write_text(CANARY)
    rig.start()
    body = rig.call(tool, args)
    assert body["content"].startswith("error: denied: "), body
    assert "read_file" in body["content"], body  # the refusal says which read it needs
    assert (rig.workspace / "secrets" / "key").read_text() == CANARY


@pytest.mark.parametrize(
    ("args", "reveals"),
    [
        ({"path": "f.txt", "old": "a", "new": "b"}, "found 2 times"),
        ({"path": "f.txt", "old": "zz", "new": "b"}, "old text not found"),
        ({"path": "nope.txt", "old": "a", "new": "b"}, "no such file"),
        ({"path": "f.txt", "old": "b", "new": "B"}, "edited"),
        ({"path": "f.txt", "old": "b", "new": "x" * 70_000}, "bytes, over"),
    ],
)
def test_what_an_edit_reveals_is_untrusted_errors_too(
    rig: Rig, args: dict[str, str], reveals: str
) -> None:
    """Every answer of a tool that reads content counts as untrusted: an error quoting a count,
    a size or a missing file taints the session like the content would."""
    rig.broker = {"max_write_bytes": 65536}
    rig.workspace.mkdir()
    (rig.workspace / "f.txt").write_text("a b a")
    rig.start()
    body = rig.call("edit_file", args)
    assert reveals in body["content"], body
    assert body["untrusted"] is True, body


# ---- the notes (27): a long name in bytes, and the edit's limit named right ------------


@pytest.mark.parametrize(
    "name",
    [
        "\U0001f600" * 63,  # 252 bytes of emoji: 63 characters
        "\u4e2d" * 85,  # 255 bytes of CJK
        "a" * 255,
        "é" * 127,  # 254 bytes
        "x" + "\U0001f600" * 63 + "yz",  # 255 bytes, mixed
    ],
    ids=["emoji-252", "cjk-255", "ascii-255", "latin-254", "mixed-255"],
)
def test_a_name_of_255_bytes_in_any_script_is_written(rig: Rig, name: str) -> None:
    assert len(name.encode()) <= 255
    rig.start()
    body = rig.call("write_file", {"path": name, "content": "x"})
    assert body["content"] == f"wrote {name}: 1 bytes", body
    assert (rig.workspace / name).read_text() == "x"


@pytest.mark.parametrize("size", [4097, 10_000, 65_536])
def test_an_edit_of_a_file_over_max_write_bytes_names_that_key(rig: Rig, size: int) -> None:
    rig.broker = {"max_write_bytes": 4096}
    rig.workspace.mkdir()
    (rig.workspace / "big.txt").write_text("a" * (size - 4) + "tail")
    rig.start()
    body = rig.call("edit_file", {"path": "big.txt", "old": "tail", "new": "TAIL"})
    assert "max_write_bytes" in body["content"], body
    assert "max_file_bytes" not in body["content"], body
    assert (rig.workspace / "big.txt").read_text().endswith("tail")  # nothing cut


@pytest.mark.parametrize(
    ("names", "counted"),
    [
        (["feb.csv", "jan.csv", "mar.csv", "notes.txt"], "4 files (3 .csv, 1 .txt)"),
        (["a/", "b.PDF", "c.pdf", "README"], "3 files (2 .pdf), 1 folder"),
        (["old/", "new/"], "2 folders"),
        ([".bashrc", "x.tar.gz", "odd.na me"], "3 files (1 .gz)"),
        (["one.md"], "1 file (1 .md)"),
    ],
)
def test_a_listing_is_counted_by_kind_and_extension(names: list[str], counted: str) -> None:
    """csv-count (issue 40): the model counted the lines of a listing itself and said 4 for 3."""
    assert tally(names) == counted


def test_the_clock_says_the_time_and_its_weekday(rig: Rig) -> None:
    """RFC 3339 text, then the weekday that date falls on (issue 40: asked what day of the week
    it is, the tool model read the bare timestamp out)."""
    rig.start()
    before = datetime.now(UTC)
    content = rig.call("clock", {})["content"]
    stamp, weekday = content.split(", a ")
    when = datetime.fromisoformat(stamp)
    assert before - timedelta(seconds=1) <= when <= datetime.now(UTC)
    assert weekday == f"{date(when.year, when.month, when.day):%A}"
