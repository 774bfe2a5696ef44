"""Helpers for the MCP tests: the servers, the hostile one, git (tests/brokerd/mcp)."""
