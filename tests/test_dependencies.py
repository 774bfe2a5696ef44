"""What boxmaker imports is what pyproject.toml declares, and constraints.txt pins it (issue 39
item 8): `anyio`, `pydantic`, `jsonschema` and the MCP types were imported but not declared.

The MCP client is the `mcp` extra (docs/decisions/mcp-extra.md): its imports stay inside
boxmaker/brokerd/mcp, and brokerd starts without loading it when no [mcp.*] server is configured.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import boxmaker

ROOT = Path(boxmaker.__file__).resolve().parent
REPO = ROOT.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
STDLIB = sys.stdlib_module_names | {"__future__", "_typeshed", "boxmaker"}
# The packages of the mcp extra, which only boxmaker/brokerd/mcp may import.
MCP_ONLY = {"mcp", "mcp_types", "anyio", "pydantic", "jsonschema"}
INSTALLED = ("dependencies", "mcp", "test")  # what `make install` installs


def third_party_imports() -> dict[str, set[str]]:
    """Top-level name -> the modules of boxmaker that import it (outside the stdlib)."""
    found: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in STDLIB:
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def declared(group: str) -> list[Requirement]:
    project = PYPROJECT["project"]
    raw = (
        project["dependencies"]
        if group == "dependencies"
        else project["optional-dependencies"][group]
    )
    return [Requirement(r) for r in raw]


def test_every_third_party_import_is_declared() -> None:
    names = {
        canonicalize_name(r.name)
        for group in ("dependencies", *PYPROJECT["project"]["optional-dependencies"])
        for r in declared(group)
    }
    dists = md.packages_distributions()
    missing = {
        top: sorted(where)
        for top, where in third_party_imports().items()
        if not {canonicalize_name(d) for d in dists.get(top, [top])} & names
    }
    assert not missing, f"imported but not in pyproject.toml: {missing}"


def test_every_installed_dependency_is_pinned() -> None:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    for group in INSTALLED:
        for req in declared(group):
            name = canonicalize_name(req.name)
            assert name in pins, f"{req.name} ({group}) is not in constraints.txt"
            assert req.specifier.contains(pins[name], prereleases=True), (req, pins[name])
    assert "-c constraints.txt" in (REPO / "Makefile").read_text()


def test_the_mcp_extra_is_imported_only_by_brokerd_mcp() -> None:
    for top, where in third_party_imports().items():
        if top in MCP_ONLY:
            outside = [w for w in where if not w.startswith("boxmaker/brokerd/mcp/")]
            assert not outside, f"{top} imported outside brokerd/mcp: {outside}"


def test_brokerd_starts_without_loading_the_mcp_client() -> None:
    probe = (
        "import sys, boxmaker.brokerd.cli, boxmaker.brokerd.serve\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'mcp', 'mcp_types', 'anyio', 'pydantic', 'jsonschema', 'starlette', 'uvicorn'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout
