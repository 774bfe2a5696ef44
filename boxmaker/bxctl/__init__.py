"""bxctl: the owner's command line. `bxctl chat` talks to loopd over loop.sock; `bxctl sessions`
lists the sessions on disk and `bxctl verify` checks one. It imports proto, _cli and session
only, never a daemon.
"""
