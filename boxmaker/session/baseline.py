"""The baseline: the system text and the tool schemas every request of a session starts with.

Assembled once, when a session starts, from `system.md` (`[baseline] system`), then
`memory/core.md` under the home if it exists (after a blank line), and the core tool schemas. It
is written to `0.baseline.json` and its SHA-256 goes into the log's `session_start` line. On
resume it is read back from that file, never from `system.md`: an edit to `system.md` applies to
sessions started after it, and every request of a session keeps the same first bytes, so the
server's prompt cache keeps hitting.

Nothing volatile goes in: no time, no date, no counter. The bytes are a pure function of the
text and the schemas (orjson, keys in a fixed order: `system`, then `tools`; each tool `name`,
`description`, `parameters`, the parameters as given), so assembling twice gives the same file.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from boxmaker.proto import BodyError, EncodeError, ToolSchema, sha256_hex

from .errors import BaselineError, BaselineTooLarge, SessionError
from .files import read_regular

BASELINE_TOKEN_LIMIT = 3000  # the brief's budget for the system text and the tool schemas
# The most bytes `0.baseline.json`, `system.md` or `memory/core.md` may hold, tied to the budget:
# no text within 3,000 tokens comes near 64 bytes a token, even written as JSON escapes. A file
# past it is refused before it is read, so a planted 50 MB baseline cannot pass on resume, where
# the budget is not counted again.
BASELINE_MAX_BYTES = BASELINE_TOKEN_LIMIT * 64
CORE_MEMORY = Path("memory") / "core.md"  # under the home

_KEYS = ("system", "tools")


@dataclass(frozen=True)
class Baseline:
    """The system text and the tool schemas, fixed for the session's epoch."""

    system: str
    tools: tuple[ToolSchema, ...]

    def to_bytes(self) -> bytes:
        """The exact bytes of `0.baseline.json`, a newline at the end.

        Raises:
            EncodeError: a field is not of its type (the caller built a bad baseline).
        """
        if not isinstance(self.system, str):
            raise EncodeError(f"baseline.system: expected str, got {type(self.system).__name__}")
        if not isinstance(self.tools, tuple):
            raise EncodeError(f"baseline.tools: expected tuple, got {type(self.tools).__name__}")
        tools = []
        for i, tool in enumerate(self.tools):
            if not isinstance(tool, ToolSchema):
                raise EncodeError(
                    f"baseline.tools[{i}]: expected ToolSchema, got {type(tool).__name__}"
                )
            tools.append(tool.to_json())
        try:
            return orjson.dumps(
                {"system": self.system, "tools": tools}, option=orjson.OPT_APPEND_NEWLINE
            )
        except orjson.JSONEncodeError as e:  # a lone surrogate, a non-str key in parameters
            raise EncodeError(f"baseline: {e}") from None

    @classmethod
    def from_bytes(cls, data: bytes, source: str) -> Baseline:
        """Reads `0.baseline.json` strictly: exactly the bytes `to_bytes` would write.

        Raises:
            BaselineError: naming `source` and what is wrong.
        """
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise BaselineError(f"{source}: not JSON ({e})") from None
        if not isinstance(obj, dict):
            raise BaselineError(f"{source}: expected a JSON object with keys system, tools")
        if list(obj) != list(_KEYS):
            raise BaselineError(
                f"{source}: expected the keys system, tools in that order; got {', '.join(obj)}"
            )
        system, raw_tools = obj["system"], obj["tools"]
        if not isinstance(system, str):
            raise BaselineError(f"{source}: system: expected a string")
        if not isinstance(raw_tools, list):
            raise BaselineError(f"{source}: tools: expected an array")
        try:
            tools = tuple(ToolSchema.from_json(t, f"tools[{i}]") for i, t in enumerate(raw_tools))
        except BodyError as e:
            raise BaselineError(f"{source}: {e}") from None
        _check_names(tools, source)
        baseline = cls(system, tools)
        if baseline.to_bytes() != data:
            raise BaselineError(
                f"{source}: not in the form the store writes (whitespace, escapes, key order or "
                "the final newline differ)"
            )
        return baseline

    @functools.cached_property
    def hash(self) -> str:
        """The hex SHA-256 of `to_bytes()`: what `session_start.baseline` records."""
        return sha256_hex(self.to_bytes())


def _check_names(tools: Sequence[ToolSchema], source: str) -> None:
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if tool.name in seen:
            raise BaselineError(f"{source}: tools[{i}]: a second tool named {tool.name!r}")
        seen.add(tool.name)


def _read_text(path: Path, what: str, *, follow: bool) -> str | None:
    """The file's text; None when it is missing. Never blocks on a FIFO, never reads past the
    bound; `follow` only for the config's own file (the home's are never followed out)."""
    try:
        data = read_regular(path, BASELINE_MAX_BYTES, follow=follow)
    except SessionError as e:  # a link, a FIFO, a device, a folder, too big, unreadable
        raise BaselineError(f"{e} ({what})") from None
    except OSError as e:
        raise BaselineError(f"{path}: cannot read it ({e.strerror}; {what})") from None
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BaselineError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None


def assemble_baseline(system_path: Path, home: Path, tools: Sequence[ToolSchema]) -> Baseline:
    """The baseline for a new session.

    The system text is `system_path`'s text, then, after a blank line, `<home>/memory/core.md`'s
    if that file exists. Trailing whitespace is dropped from each part, so an editor's final
    newline never reaches the prompt.

    Raises:
        BaselineError: `system_path` is missing, unreadable, not UTF-8 or blank; `core.md` exists
            but cannot be read; or two tools share a name.
    """
    what = "the system prompt, [baseline] system in the config"
    text = _read_text(system_path, what, follow=True)
    if text is None:
        raise BaselineError(f"{system_path}: no such file ({what})")
    system = text.rstrip()
    if not system:
        raise BaselineError(f"{system_path}: the system prompt is empty")
    core = _read_text(home / CORE_MEMORY, "the owner's core memory", follow=False)
    if core and core.rstrip():
        system = f"{system}\n\n{core.rstrip()}"
    schemas = tuple(tools)
    _check_names(schemas, "tools")
    return Baseline(system, schemas)


def budget_text(baseline: Baseline) -> str:
    """What the budget counts: the system text, a blank line, the tools as the request sends them.

    The chat template wraps these in a few more tokens of its own; the budget is for the parts
    this project controls.
    """
    tools = orjson.dumps([t.to_openai() for t in baseline.tools]).decode()
    return f"{baseline.system}\n\n{tools}"


def check_budget(
    baseline: Baseline, count_tokens: Callable[[str], int], limit: int = BASELINE_TOKEN_LIMIT
) -> int:
    """Counts the baseline's tokens with the server's tokenizer and returns the count.

    Args:
        count_tokens: the server's count for a text (`len(client.tokenize(text))`).
        limit: the most tokens allowed.

    Raises:
        BaselineTooLarge: the count is over `limit`.
    """
    n = count_tokens(budget_text(baseline))
    if n > limit:
        raise BaselineTooLarge(
            f"the baseline is {n} tokens, over the limit of {limit}: shorten system.md or "
            "memory/core.md (the tool schemas count too)"
        )
    return n
