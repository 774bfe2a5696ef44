"""`make help` and the README name every make target (issue 30 item 7)."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z-]*):", text, re.MULTILINE))


def test_make_help_names_every_target() -> None:
    shown = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "help"], capture_output=True, text=True, check=True
    ).stdout
    named = set(re.findall(r"^make ([a-z][a-z-]*)", shown, re.MULTILINE))
    assert len(targets()) >= 20
    assert targets() - named == set()
    assert named - targets() == set()


def test_the_readme_points_at_make_help() -> None:
    assert "make help" in (ROOT / "README.md").read_text()
