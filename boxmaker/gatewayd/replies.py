"""The reply marker (M4 section 6 "Out"). [core]

Every post gatewayd makes for an owner's post carries `props.boxmaker_reply_to = <that post's
id>` and `props.boxmaker_part = "<i>/<n>"`. Before posting an answer (after any restart or
retry) gatewayd reads the thread (or the DM after the owner's post) and posts only the parts that
are not there: the marker, not memory, says what was posted. A notice (a full queue, posts too
old to answer) is part 1/1 of the reply to the post it answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from boxmaker.gatewayd.mattermost.types import Post

REPLY_TO = "boxmaker_reply_to"
PART = "boxmaker_part"


def reply_props(post_id: str, part: int, total: int) -> dict[str, Any]:
    return {REPLY_TO: post_id, PART: f"{part}/{total}"}


def pending_id(bot_id: str, run: str, post_id: str, part: int) -> str:
    """The create's pending_post_id: the same for a retried create of the same part within one
    run of gatewayd (`run`, new at each start), so the server folds a retry in its short
    window. Across a restart the marker alone decides: the server's window is seconds."""
    return f"{bot_id}:{run}:{post_id}:{part}"


def posted_parts(posts: Iterable[Post], bot_id: str, post_id: str) -> set[int]:
    """The part numbers the bot already posted for `post_id` (any total: an answer is posted
    with one split, and a part present is never posted again)."""
    found: set[int] = set()
    for p in posts:
        if p.user_id != bot_id or p.props.get(REPLY_TO) != post_id:
            continue
        part = p.props.get(PART)
        head = part.split("/", 1)[0] if isinstance(part, str) else ""
        found.add(int(head) if head.isdigit() else 1)
    return found


def missing(parts: int, posted: set[int]) -> list[int]:
    """The part numbers (from 1) still to post, in order."""
    return [i for i in range(1, parts + 1) if i not in posted]
