"""gatewayd: the owner's agent from Mattermost (issue 36; docs/architecture.md)."""
