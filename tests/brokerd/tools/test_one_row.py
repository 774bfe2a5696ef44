"""Issue 35 item 2's proof: find_files, a tool with config, was added as one file and one row.
Its names appear in boxmaker/ only in its own file and in the table's row (and the import that
brings it), so config.py, broker.py, kind.py and every other module were left as they were."""

from __future__ import annotations

import re
from pathlib import Path

from boxmaker.brokerd.tools import find_files

PACKAGE = Path(find_files.__file__).resolve().parents[2]
NAMES = re.compile(r"\b(find_files|FIND_FILES|FindLimits|FindArgs)\b")


def test_the_new_tool_is_named_only_in_its_file_and_its_row() -> None:
    mentions = {
        str(path.relative_to(PACKAGE)): NAMES.findall(path.read_text("utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
        if NAMES.search(path.read_text("utf-8"))
    }
    row = mentions.pop("brokerd/tools/table.py")
    assert sorted(row) == ["FIND_FILES", "FIND_FILES", "find_files"]  # import, row
    assert list(mentions) == ["brokerd/tools/find_files.py"]
