"""An answer cut into posts under the server's post size (M4 section 7). [core]

The whole answer, in order, each part at most `limit` characters (Mattermost's MaxPostSize counts
characters, not bytes), cut at a paragraph break where one fits, else at a line break, else (one
line longer than a part) at a space, else anywhere. A code fence is never left open: a part cut
inside one closes it and the next part opens it again with the same opener (```python stays
python), so each part renders on its own. Parts are numbered, `(1/3)` on a line of their own,
when there are several. At most `max_posts`: the rest is cut, and the last part says how much
was not posted and where the whole answer is (the session log: `bxctl history <session>`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Room kept in every part for the number line, a fence closed and reopened, and the cut note.
RESERVE = 400
MIN_LIMIT = RESERVE + 100
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True, slots=True)
class _Block:
    text: str
    fence: str  # the fence's opening line when the block is a fenced code block, else ""


def _blocks(text: str) -> list[_Block]:
    """Paragraphs and fenced blocks, in order; a fence's blank lines stay inside it."""
    blocks: list[_Block] = []
    para: list[str] = []
    fence: list[str] = []
    marker = ""
    for line in text.split("\n"):
        if marker:
            fence.append(line)
            m = _FENCE.match(line)
            closing = m is not None and line.strip() == m.group(1)  # nothing after it
            if m and closing and m.group(1)[0] == marker[0] and len(m.group(1)) >= len(marker):
                blocks.append(_Block("\n".join(fence), fence[0]))
                fence, marker = [], ""
            continue
        m = _FENCE.match(line)
        if m:
            if para:
                blocks.append(_Block("\n".join(para), ""))
                para = []
            marker, fence = m.group(1), [line]
        elif line.strip() == "":
            if para:
                blocks.append(_Block("\n".join(para), ""))
                para = []
        else:
            para.append(line)
    if fence:  # never closed in the answer: close it here
        blocks.append(_Block("\n".join(fence), fence[0]))
    if para:
        blocks.append(_Block("\n".join(para), ""))
    return blocks


def _cut_line(line: str, size: int) -> list[str]:
    """A line longer than `size`, cut at the last space that fits, else at `size`."""
    out = []
    while len(line) > size:
        at = line.rfind(" ", size // 2, size)
        at = size if at <= 0 else at
        out.append(line[:at])
        line = line[at:].lstrip(" ") if at < size else line[at:]
    out.append(line)
    return out


def _pieces(block: _Block, size: int) -> list[str]:
    """The block as pieces of at most `size`, each one whole (a fence closed and reopened)."""
    if len(block.text) <= size:
        return [block.text]
    lines = block.text.split("\n")
    opener, closer = "", ""
    if block.fence:
        opener = lines[0]
        m = _FENCE.match(opener)
        closer = m.group(1) if m else "```"
        body = lines[1:]
        if body and body[-1].strip() == closer:
            body = body[:-1]
        lines = body
    room = size - (len(opener) + len(closer) + 2 if block.fence else 0)
    pieces: list[str] = []
    cur: list[str] = []
    used = 0
    for line in lines:
        for bit in _cut_line(line, room):
            if cur and used + 1 + len(bit) > room:
                pieces.append("\n".join(cur))
                cur, used = [], 0
            used += (1 if cur else 0) + len(bit)
            cur.append(bit)
    if cur:
        pieces.append("\n".join(cur))
    if block.fence:
        return [f"{opener}\n{p}\n{closer}" for p in pieces]
    return pieces


def split_answer(text: str, limit: int, max_posts: int, where: str) -> list[str]:
    """The posts that carry `text`, in order.

    Args:
        limit: the server's post size, in characters (at least MIN_LIMIT).
        max_posts: the most posts one answer may take.
        where: how the owner reads the whole answer, for the cut note (`bxctl history <id>`).
    """
    size = max(limit, MIN_LIMIT) - RESERVE
    pieces = [p for b in _blocks(text) for p in _pieces(b, size)]
    if not pieces:
        return [text.strip() or "(an empty answer)"]
    parts: list[str] = []
    cur = ""
    for piece in pieces:
        if cur and len(cur) + 2 + len(piece) > size:
            parts.append(cur)
            cur = ""
        cur = f"{cur}\n\n{piece}" if cur else piece
    parts.append(cur)
    if len(parts) > max_posts:
        left = sum(len(p) for p in parts[max_posts:])
        parts = parts[:max_posts]
        parts[-1] += (
            f"\n\n[cut: {left:,} more characters of this answer were not posted "
            f"(max_reply_posts = {max_posts}); the whole answer: {where}]"
        )
    if len(parts) == 1:
        return parts
    n = len(parts)
    return [f"({i}/{n})\n{p}" for i, p in enumerate(parts, 1)]
