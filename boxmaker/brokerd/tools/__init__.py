"""brokerd's tools: their schemas and argument checks (spec.py), the file tools (files.py) and
the notes (note.py). Every tool answers a `ToolResponse`; every failure is one too (errors are
data: the turn goes on)."""
