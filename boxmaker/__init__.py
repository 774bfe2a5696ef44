"""Boxmaker: a personal agent beside a llama.cpp llama-server."""

__version__ = "0.1.0"
