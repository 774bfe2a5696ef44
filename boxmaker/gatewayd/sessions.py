"""Session ids and reply roots for Mattermost posts (M4 section 5). [core]

- A direct message channel is one session: `mm.<channel_id>`. The answer goes where the owner
  wrote: at the top level, or into the thread the owner's post is in.
- In a listed channel each thread is one session, `mm.<channel_id>.<root_id>`; a top-level post
  starts a thread (its answer's root is that post).

Mattermost ids are 26 characters of [a-z0-9], so both fit proto's SessionId rule (at most 128
characters of [A-Za-z0-9._-]); `session_for` checks it anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from boxmaker.gatewayd.mattermost.types import Post
from boxmaker.proto.ids import is_session_id

DIRECT = "D"


@dataclass(frozen=True, slots=True)
class Place:
    session: str  # the loopd session
    root_id: str  # the answer's root_id ("" for the top level of a DM)


def place_of(post: Post, channel_type: str) -> Place:
    """Where the post's turn runs and where its answer goes. Raises ValueError on an id that
    would not make a session id (a server with another id scheme)."""
    if channel_type == DIRECT:
        session, root = f"mm.{post.channel_id}", post.root_id
    else:
        root = post.root_id or post.id
        session = f"mm.{post.channel_id}.{root}"
    if not is_session_id(session):
        raise ValueError(f"ids that do not make a session id: {session[:80]!r}")
    return Place(session, root)


def client_ref(post: Post) -> str:
    """The turn's client_ref (M4 section 6)."""
    return f"mm:{post.id}"
