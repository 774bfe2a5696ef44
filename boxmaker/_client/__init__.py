"""The clients every program shares: the channel client of loop.sock (`channel.py`) and the owner's
client of brokerd's owner.sock (`owner.py`). bxctl's chat and approvals, and gatewayd, are faces
over them; nothing here prints or reads a terminal."""
