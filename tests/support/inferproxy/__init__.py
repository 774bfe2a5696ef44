"""Helpers for the inferproxy tests: the proxy rig, the stream checks."""
