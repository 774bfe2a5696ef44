"""The one loopd.toml builder of the tests that run against the fake server (tests/support/
client.py, turn.py and serve.py call it with their own limits and sections).

Keys are written bare, one `key = value` a line, in the order given, so a test may edit a line of
the text (`slots = [0, 1]`, `retry_attempts = 1`) as the owner would. The real-server configs are
the local profile with overrides instead (tests/support/stack.py).
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from boxmaker._toml import toml_value

MODEL = "test-model"  # what every fake-server config names; the fake does not check it
NO_TEMPLATE_SHA = "0" * 64  # for the configs whose tests never run the self-test


def fake_inference(socket: Path | str, **keys: Any) -> dict[str, Any]:
    """[inference] for the fake server on `socket`: MODEL on slots 0 and 1, then `keys`."""
    return {"socket": str(socket), "model": MODEL, "slots": [0, 1], **keys}


def fake_expect(template_sha: str = NO_TEMPLATE_SHA) -> dict[str, Any]:
    """[expect] as the fake server's /props answers it: 2 slots of 2,048 tokens."""
    return {"chat_template_sha256": template_sha, "n_ctx": 2048, "total_slots": 2}


def loopd_toml(sections: Mapping[str, Mapping[str, Any]]) -> str:
    """`[name]` then its keys, for each section in order (an empty section stays, as a header)."""
    lines: list[str] = []
    for name, keys in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"
