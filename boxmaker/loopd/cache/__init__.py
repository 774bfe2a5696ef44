"""A session's prompt cache saved to a file and restored around other users of its slot (issues
14, 21): `policy` decides (sans-IO: when to save, what a restore needs, the epoch a save belongs
to), `state` is slot-cache.json (the saves kept across loopd restarts), and `keeper` is the main
process's shell that asks llama-server to save and restore.
"""
