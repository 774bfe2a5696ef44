"""Helpers for the _fast tests: the splice rig."""
