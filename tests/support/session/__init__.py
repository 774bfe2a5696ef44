"""Helpers for the session tests: cases of sessions and epochs, a small disk."""
