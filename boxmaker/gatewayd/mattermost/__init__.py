"""gatewayd's Mattermost client: wire shapes (types), socket rules (protocol), I/O (client)."""

from .client import ClientLimits, MattermostClient
from .types import Connected, MattermostError, Me, Post, Posted

__all__ = [
    "ClientLimits",
    "Connected",
    "MattermostClient",
    "MattermostError",
    "Me",
    "Post",
    "Posted",
]
