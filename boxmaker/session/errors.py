"""The session store's errors. Each message names the file and, for a bad log, the line."""


class SessionError(Exception):
    """A session cannot be created, opened or appended to; the message says why."""


class SessionBusy(SessionError):
    """Another open log (in this process or another) holds the session's lock: one writer."""


class NoSuchSession(SessionError):
    """The session's folder does not exist."""


class SessionExists(SessionError):
    """A session with this id already exists, so it cannot be created."""


class LogCorrupt(SessionError):
    """The log or its baseline file is refused: the message names the file, the line, the fault.

    Nothing is repaired: the files are left exactly as they were found.
    """


class BaselineError(SessionError):
    """A baseline cannot be assembled or read back; the message names the file."""


class BaselineTooLarge(BaselineError):
    """The baseline is over its token budget."""


class AppendFailed(SessionError):
    """The disk failed during an append (a short write, ENOSPC, EIO at write or fsync).

    The message names the file, the line, the step and the errno. Nothing partial is kept: the
    file was cut back to its last whole line, the last one acknowledged, unless the message says
    the cut itself failed (then the log is closed for good and open refuses the torn line).
    """


class LogReplaced(SessionError):
    """The log's path no longer names the file this open log writes to (an editor's save, a
    `mv` over it, a restore from a backup): nothing was written, and the log was closed, so the
    next open reads and checks the file that is there now."""


class RepairRefused(SessionError):
    """`bxctl repair` found a fault it does not cut: only a torn last line is ever repaired."""


class NotARegularFile(SessionError):
    """A file under the home is a link, a FIFO, a device, a folder or over its size bound.

    Nothing is read from it: the message names the path, what it is, and what to do.
    """


class SwitchRefused(SessionError):
    """An epoch switch was refused before its commit point (issue 29.1): the next epoch's files
    would not open, or writing them failed. Epoch n is as it was; the fold failed, the turn goes
    on uncompacted."""
