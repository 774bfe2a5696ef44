"""The docs' claims that a test can check stay true (issue 39 item 9, issue 35 item 6): one
module map that names every module, decisions one per file and all listed, every make target
in operations.md, every dependency in its list, `make status`'s sample in the script's shape,
the diagram's programs, and one figure for the build time and one for `make test`'s."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PROGRAMS = ("brokerd", "inferproxy", "llama-server", "loopd")  # what make run starts


def section(text: str, heading: str) -> str:
    """The body of the `## heading` section."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_the_module_map_names_every_module_and_no_other() -> None:
    mapped: set[str] = set()
    folder = None
    for line in section((DOCS / "architecture.md").read_text(), "Module map").splitlines():
        if m := re.match(r"\*\*`(boxmaker(?:/[\w]+)*)/`\*\*", line):
            folder = m.group(1)
        elif (m := re.match(r"- `([\w.]+)`: \S", line)) and folder is not None:
            mapped.add(f"{folder}/{m.group(1)}")
    on_disk = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "boxmaker").rglob("*")
        if p.suffix in (".py", ".pyx", ".pxd")
        and p.name not in ("__init__.py", "__main__.py")
        and "__pycache__" not in p.parts
    }
    assert sorted(on_disk - mapped) == [], "modules missing from docs/architecture.md's map"
    assert sorted(mapped - on_disk) == [], "modules in docs/architecture.md's map that are gone"
    operations = (DOCS / "operations.md").read_text()
    assert "architecture.md#module-map" in operations
    assert "| `boxmaker/" not in section(operations, "Layout")  # no second module map


def test_decisions_are_one_per_file_and_all_listed() -> None:
    folder = DOCS / "decisions"
    index = (folder / "README.md").read_text()
    files = sorted(p.name for p in folder.glob("*.md") if p.name != "README.md")
    listed = re.findall(r"^- \[([\w.-]+\.md)\]\(\1\)", index, re.MULTILINE)
    assert sorted(listed) == files
    for name in files:
        headings = re.findall(r"^# ", (folder / name).read_text(), re.MULTILINE)
        assert len(headings) == 1, f"docs/decisions/{name}: {len(headings)} decisions in one file"


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))


def test_operations_names_every_make_target_and_no_doc_a_missing_one() -> None:
    targets = make_targets()
    named = set(re.findall(r"`make ([a-z][a-z-]*)", (DOCS / "operations.md").read_text()))
    assert sorted(targets - named) == [], "make targets docs/operations.md does not name"
    for doc in [ROOT / "README.md", *DOCS.glob("*.md")]:
        named = set(re.findall(r"`make ([a-z][a-z-]*)", doc.read_text()))
        assert sorted(named - targets) == [], f"{doc.name} names make targets that do not exist"


def test_operations_lists_every_declared_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared += extra
    listed = section((DOCS / "operations.md").read_text(), "Dependencies")
    missing = [r for r in map(Requirement, declared) if f"`{r.name}`" not in listed]
    assert missing == [], f"in pyproject.toml, not in operations.md's Dependencies: {missing}"


def test_the_make_status_sample_has_the_scripts_lines(tmp_path: Path) -> None:
    """The sample's labels are the ones scripts/status.py prints (run here on a stopped folder),
    and its programs the ones make run starts."""
    (tmp_path / "run.env").write_text(
        f"BOXMAKER_SOCKET={tmp_path / 'loop.sock'}\nBOXMAKER_UPSTREAM=127.0.0.1:9\n"
        f"BOXMAKER_LOOPD_CONFIG={tmp_path / 'loopd.toml'}\n"
    )
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "status.py")],
                       env={**os.environ, "BOXMAKER_RUN": str(tmp_path)},
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    printed = [line.split(":")[0] for line in p.stdout.splitlines() if not line.startswith(" ")]
    text = (DOCS / "operations.md").read_text()
    sample = text[text.index("```\nprograms:\n") + 4 :].split("```")[0]
    labels = [line.split(":")[0] for line in sample.splitlines() if not line.startswith(" ")]
    assert labels == printed
    shown = [line.split()[0] for line in sample.splitlines() if line.startswith("  ")]
    assert shown == list(PROGRAMS)


def test_the_readme_diagram_shows_what_make_run_starts() -> None:
    text = (ROOT / "README.md").read_text()
    diagram = section(text, "How it fits together").split("```")[1]
    for program in PROGRAMS:
        assert program in diagram, program
    assert "owner.sock" in diagram
    assert "local profile only" not in text


def test_one_figure_for_the_build_time_and_one_for_make_test() -> None:
    build = re.compile(r"(\d+ to \d+|about \d+) minutes on 2 cores")
    found = {
        name: build.findall(path.read_text())
        for name, path in [
            ("README.md", ROOT / "README.md"),
            ("operations.md", DOCS / "operations.md"),
            ("build_llama_server.sh", ROOT / "scripts" / "build_llama_server.sh"),
        ]
    }
    figures = {fig for figs in found.values() for fig in figs[:1]}
    assert all(found.values()), found
    assert len(figures) == 1, found
    help_text = subprocess.run(["make", "-s", "-C", str(ROOT), "help"], capture_output=True,
                               text=True, timeout=60, check=True).stdout  # fmt: skip
    said = re.search(r"make test +every test \(about (\d+) minutes", help_text)
    assert said is not None, help_text
    readme = re.search(
        r"`make test` itself takes about (\d+) minutes", (ROOT / "README.md").read_text()
    )
    assert readme is not None
    assert said.group(1) == readme.group(1)
