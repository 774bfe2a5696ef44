"""The defaults loopd and bxctl share, so the two can never disagree on where things are."""

from pathlib import Path

SOCKET_ENV = "BOXMAKER_SOCKET"  # bxctl's override of loop.sock's path
DEFAULT_SOCKET = Path("/run/loop/loop.sock")  # `[channel] socket`
HOME_ENV = "BOXMAKER_HOME"  # overrides `[paths] home`; bxctl's home too
DEFAULT_HOME = Path("/var/lib/boxmaker")  # `[paths] home`
