"""bxctl reads the files a stack leaves (run.env, the pidfile, brokerd.log, the chat history)
by the home-file rules only (issue 38 item 2): no bare `open()`, `Path.open`, `read_text` or
`read_bytes` call in its modules, where a FIFO would hang it or a link to /dev/zero flood it.
`os.open` is allowed: it is how the rules' own flags (O_NOFOLLOW, O_EXCL) are given."""

import ast
from pathlib import Path

import pytest

import boxmaker.bxctl

BXCTL = Path(boxmaker.bxctl.__file__).parent
# decisions.py and verify_broker.py: brokerd's decision log, moved to the rules with brokerd's
# own reader (issue 38 item 2's brokerd part); repair.py: /proc, the kernel's own files.
ELSEWHERE = {"decisions.py", "verify_broker.py", "repair.py"}
READS = {"open", "read_text", "read_bytes"}


def _is_read(f: ast.expr) -> bool:
    if isinstance(f, ast.Name):
        return f.id == "open"
    is_os = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "os"
    return isinstance(f, ast.Attribute) and f.attr in READS and not is_os


def bare_reads(source: str) -> list[int]:
    calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)]
    return [n.lineno for n in calls if _is_read(n.func)]


@pytest.mark.parametrize(
    "path", sorted(p for p in BXCTL.glob("*.py") if p.name not in ELSEWHERE), ids=lambda p: p.name
)
def test_no_bare_file_reads(path: Path) -> None:
    assert bare_reads(path.read_text()) == [], f"{path.name}: use session.files' open_regular"


@pytest.mark.parametrize(
    "code",
    [
        "open('x')",
        "Path('x').open('rb')",
        "p.read_text()",
        "p.read_bytes()",
        "with open(p, 'rb') as f: pass",
    ],
)
def test_the_check_sees_each_form(code: str) -> None:
    assert bare_reads(code) == [1]
    assert bare_reads("os.open(p, 0)") == []
