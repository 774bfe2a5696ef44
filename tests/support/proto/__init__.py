"""Helpers for the proto tests: the golden log cases."""
