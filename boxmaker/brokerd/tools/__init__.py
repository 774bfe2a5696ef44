"""brokerd's tools: their schemas and argument checks (spec.py), the file tools (files.py), the
notes (note.py), the sandboxed shell (shell.py, over ../sandbox.py) and fetch (fetch.py,
htmltext.py). Every tool answers a `ToolResponse`; every failure is one too (errors are data:
the turn goes on)."""
