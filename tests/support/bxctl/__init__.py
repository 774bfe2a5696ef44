"""Helpers for the bxctl tests: a fake loopd."""
