"""Helpers for the owner-task suite and the tool-model tests (tests/e2e, scripts/agent_tasks.py)."""
