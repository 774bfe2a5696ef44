"""`inferproxy`: the only way from `loopd` to the model (m2a spec, section 2).

A Unix socket in front of one TCP upstream (llama-server). Bytes only, never parsed; at most 8
connections at a time and a token bucket on accept. `cli.main` is the entry point, `proxy.py` the
shell, `limits.py` the sans-IO admission rules.
"""
