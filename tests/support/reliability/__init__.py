"""Helpers for the reliability tests: crash plans, load, floods, hostile clients."""
