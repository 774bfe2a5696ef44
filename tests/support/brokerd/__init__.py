"""Helpers for the brokerd tests: rigs, grants and the core decisions (tests/brokerd)."""
