"""brokerd: the only process with authority (M3). It holds the grants the owner writes, asks the
owner (never loopd) when a grant says `ask`, runs the tools (files and notes beneath one
workspace; a sandboxed shell and fetch), and appends every request, decision and approval to its
own hash-chained log.

loopd reaches it on broker.sock (loopd's uid only); the owner answers on owner.sock (the owner's
uid only). docs/brokerd.md is the user's guide; docs/decisions/brokerd-*.md say why.
"""
