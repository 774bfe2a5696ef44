"""Reading a config file: a regular file, bounded, never a FIFO or a device."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from boxmaker._config.kinds import ConfigError


def _file_kind(mode: int) -> str:
    kinds = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO", stat.S_ISCHR: "a character device"}
    kinds |= {stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket"}
    return next((words for test, words in kinds.items() if test(mode)), "not a file")


def read_bounded(
    path: Path, source: str, limit: int, example: str = "conf/loopd.toml.example"
) -> bytes:
    """The bytes of the regular file at `path`, at most `limit`; raises ConfigError.

    A FIFO would block the read for ever and /dev/zero never ends, so the file's type is
    checked before it is opened (no device is opened at all) and again on the open descriptor
    (it may have been swapped); O_NONBLOCK keeps the open itself from waiting on a FIFO's writer.
    """

    def refuse(message: str) -> ConfigError:
        return ConfigError(source, None, message)

    too_big = f"larger than {limit} bytes ({limit / (1 << 20):g} MiB); a config is a few KiB"
    try:
        if not stat.S_ISREG(mode := os.stat(path).st_mode):
            raise refuse(f"cannot read it: {_file_kind(mode)}, not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise refuse(f"no such file ({example} shows every key)") from None
    except OSError as exc:
        raise refuse(f"cannot read it: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refuse(f"cannot read it: {_file_kind(info.st_mode)}, not a regular file")
        if info.st_size > limit:
            raise refuse(too_big)
        chunks: list[bytes] = []
        left = limit + 1  # one byte more tells a file that grew past the cap
        while left > 0 and (chunk := os.read(fd, left)):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise refuse(f"cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if left <= 0:
        raise refuse(too_big)
    return b"".join(chunks)
