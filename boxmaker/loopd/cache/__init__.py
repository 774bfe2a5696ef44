"""A session's prompt cache saved to a file and restored around other users of its slot (issue
14): `policy` decides (sans-IO), `server` asks llama-server, `keeper` is the main process's shell.
"""
