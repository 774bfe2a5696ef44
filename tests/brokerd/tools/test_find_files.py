"""find_files (issue 35 item 2's new tool): one file and one row. Through a real brokerd: it
finds by part of a name or a glob, is off unless granted, never leaves the workspace (`..`, an
absolute path, a symlink to /etc or to /proc/self/cwd, a symlinked folder in the walk), hides
what the grants deny, and stops at its `[broker.find_files]` bounds. On openat2 and on the
fallback walk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from boxmaker.brokerd.tools.find_files import FIND_FILES, FindLimits
from boxmaker.brokerd.tools.table import BUILTIN, TABLE
from tests.support.brokerd.core import WS, decide, parse_grants
from tests.support.brokerd.rig import ALL_ALLOW, Rig, grant

SECRET = "TOPSECRET-outside-the-workspace"
GRANTS = ALL_ALLOW + grant("find_files") + grant("read_file", "deny", paths=["secrets"])


def plant(rig: Rig) -> Path:
    """A workspace with matches at several depths, a denied folder, and ways out."""
    out = rig.base / "outside"
    (out / "deep").mkdir(parents=True)
    (out / "report-outside.txt").write_text(SECRET)
    ws = rig.workspace
    for rel in ["report.txt", "src/app.py", "src/lib/report_2.py", "src/lib/x/y/z/report.md",
                "secrets/report-key.txt", "Docs/REPORT.pdf"]:  # fmt: skip
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text("x")
    os.symlink(out, ws / "out-link")  # a folder link out: listed as a name, never walked
    os.symlink("/etc", ws / "etc")
    os.symlink("/proc/self/cwd", ws / "cwd")
    os.symlink("../outside", ws / "src" / "up")
    return out


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "walk"])
def test_it_finds_by_name_and_never_leaves_the_workspace(rig: Rig, openat2: bool) -> None:
    rig.openat2, rig.grants_text = openat2, GRANTS
    rig.workspace.mkdir()
    plant(rig)
    rig.start()
    got = rig.call("find_files", {"path": ".", "name": "report"})["content"]
    assert got.splitlines() == [
        "report.txt",  # breadth first: the nearest first
        "Docs/REPORT.pdf",  # plain text matches in any case
        "src/lib/report_2.py",
        "src/lib/x/y/z/report.md",
    ], got
    assert rig.call("find_files", {"path": "src", "name": "*.py"})["content"].splitlines() == [
        "src/app.py",
        "src/lib/report_2.py",
    ]
    assert rig.call("find_files", {"path": "src", "name": "lib"})["content"] == "src/lib/"
    # Names of links are names in the workspace; nothing behind them is walked.
    assert rig.call("find_files", {"path": ".", "name": "*link*"})["content"] == "out-link"
    assert (
        "nothing under . matches"
        in rig.call("find_files", {"path": ".", "name": "passwd"})["content"]
    )
    escapes = {
        "../outside": "'..'",
        "src/../../outside": "'..'",
        "/etc": "outside the workspace",
        f"{rig.workspace}/../outside": "'..'",
        "out-link": "a symlink",
        "etc": "a symlink",
        "cwd": "a symlink",
        "src/up": "a symlink",
    }
    for path, says in escapes.items():
        content = rig.call("find_files", {"path": path, "name": "e"})["content"]
        assert content.startswith("error: "), (path, content)
        assert SECRET not in content, (path, content)
        assert "passwd" not in content, (path, content)
        if openat2:
            assert says in content, (path, content)
    # what read_file denies is not there for find_files either: not shown, not walked
    assert "secrets" not in rig.call("find_files", {"path": ".", "name": "key"})["content"]
    denied = rig.call("find_files", {"path": "secrets", "name": "key"})["content"]
    assert denied.startswith("error: denied"), denied


def test_it_is_off_unless_granted_and_needs_list_dirs_decision_too(rig: Rig) -> None:
    rig.grants_text = ALL_ALLOW.replace(
        'tool = "list_dir"\nmode = "allow"', 'tool = "list_dir"\nmode = "deny"'
    )
    rig.grants_text += grant("find_files", paths=["src"])
    rig.workspace.mkdir()
    (rig.workspace / "src").mkdir()
    (rig.workspace / "src" / "a.py").write_text("x")
    rig.start()
    off = rig.call("find_files", {"path": ".", "name": "a"})["content"]
    assert off.startswith("error: denied: no grant for find_files covers ."), off
    listing_denied = rig.call("find_files", {"path": "src", "name": "a"})["content"]
    assert listing_denied.startswith("error: denied"), listing_denied
    assert "list_dir" in listing_denied


def test_it_stops_at_its_config_bounds(rig: Rig) -> None:
    rig.grants_text = GRANTS
    rig.broker = {"find_files": {"max_results": 3, "max_depth": 1, "max_entries": 100}}
    ws = rig.workspace
    for i in range(5):
        (ws / "a" / "b").mkdir(parents=True, exist_ok=True)
        (ws / f"hit{i}").write_text("x")
        (ws / "a" / f"hit{i}").write_text("x")
        (ws / "a" / "b" / f"deep-hit{i}").write_text("x")
    for i in range(150):
        (ws / "many" / f"n{i:03}").mkdir(parents=True)
    rig.start()
    few = rig.call("find_files", {"path": ".", "name": "hit"})["content"].splitlines()
    assert few == ["hit0", "hit1", "hit2", "[stopped at 3 results; give a narrower name]"]
    shallow = rig.call("find_files", {"path": "a", "name": "deep"})["content"]
    assert shallow == "nothing under a matches 'deep'"  # a/b is level 2: named, not walked
    wide = rig.call("find_files", {"path": "many", "name": "zzz"})["content"]
    assert wide.endswith("[stopped after looking at 100 names; give a deeper path]"), wide


def test_a_bad_name_is_refused_before_anything_runs() -> None:
    rules = parse_grants(GRANTS.encode())
    for name in ["", "a/b", "x" * 256]:
        d = decide(rules, "find_files", f'{{"path": ".", "name": "{name}"}}', WS)
        assert d.decision.reason.startswith("bad request: find_files: name must be"), d
    ok = decide(rules, "find_files", '{"path": "src", "name": "*.py"}', WS)
    assert (str(ok.decision.mode), ok.target) == ("allow", ("src",))


def test_it_is_one_row_that_only_reads_and_is_offered_by_no_profile() -> None:
    assert FIND_FILES in BUILTIN
    assert (FIND_FILES.writes, FIND_FILES.untrusted, FIND_FILES.needs_grant) == (False, True, True)
    assert TABLE.sections()["find_files"] is FindLimits
    conf = Path(__file__).resolve().parents[3] / "conf"
    for profile in conf.glob("loopd*.toml*"):  # loopd's core lists: brokerd's tools stay found
        assert "find_files" not in profile.read_text(), profile
