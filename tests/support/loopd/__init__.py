"""Helpers for the loopd tests: config texts, fake slots, cache stacks, conversations."""
