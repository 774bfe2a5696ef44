"""bxctl: the owner's command line. `bxctl verify` checks a session's log from disk; `bxctl chat`
(the channel client) comes later. It imports proto, _cli and loopd.session only, never a daemon.
"""
