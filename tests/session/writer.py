"""A second process for the store tests: `python writer.py <mode> <home> <session> [n]`.

Modes:
  hold     open the session, append one record, print "locked", wait for SIGUSR1, append one
           more, close, print "done"
  try      open the session once: print "busy" (exit 0) or "opened" (exit 3)
  append   N rounds of open, append "<pid> <i>", close; SessionBusy counts as a miss. Prints
           "appended A busy B"
  create   create sessions <session>-0 .. <session>-(N-1); prints "created C exists E"
  open     N rounds over <session>-0 .. <session>-(N-1): open each and close it at once; prints
           "opened O busy B missing M" (a corrupt log is an error: exit 1)
  fsize    limit the file size to the log's size plus 10 bytes, append a record longer than that,
           print the SessionError and whether the log is closed; lift the limit, append again
"""

import os
import resource
import signal
import sys
from pathlib import Path

from boxmaker.proto import User
from boxmaker.session.baseline import Baseline
from boxmaker.session.errors import NoSuchSession, SessionBusy, SessionError, SessionExists
from boxmaker.session.store import SessionStore

T = "2026-11-30T03:48:37.123Z"


def main(mode: str, home: str, session: str, n: int) -> int:
    store = SessionStore(Path(home))
    if mode == "hold":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        with store.open(session) as log:
            log.append(User(T, f"held by {os.getpid()}"))
            print("locked", flush=True)
            signal.sigwait({signal.SIGUSR1})
            log.append(User(T, f"released by {os.getpid()}"))
        print("done", flush=True)
        return 0
    if mode == "try":
        try:
            log = store.open(session)
        except SessionBusy:
            print("busy", flush=True)
            return 0
        log.close()
        print("opened", flush=True)
        return 3
    if mode == "append":
        appended = busy = 0
        for i in range(n):
            try:
                with store.open(session) as log:
                    log.append(User(T, f"{os.getpid()} {i}"))
                    appended += 1
            except SessionBusy:
                busy += 1
        print(f"appended {appended} busy {busy}", flush=True)
        return 0
    if mode == "create":
        created = exists = 0
        for i in range(n):
            try:
                store.create(f"{session}-{i}", Baseline("S", ()), slot=0, time=T).close()
                created += 1
            except SessionExists:
                exists += 1
        print(f"created {created} exists {exists}", flush=True)
        return 0
    if mode == "open":
        opened = busy = missing = 0
        for _ in range(n):
            for i in range(n):
                try:
                    store.open(f"{session}-{i}").close()
                    opened += 1
                except SessionBusy:
                    busy += 1
                except NoSuchSession:
                    missing += 1
        print(f"opened {opened} busy {busy} missing {missing}", flush=True)
        return 0
    if mode == "fsize":
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead
        with store.open(session) as log:
            size = log.log_path.stat().st_size
            resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, resource.RLIM_INFINITY))
            try:
                log.append(User(T, "x" * 100))
            except SessionError as e:
                print(f"refused: {e}", flush=True)
                print(f"closed {log.closed}", flush=True)
                # The room comes back: the same open log goes on.
                resource.setrlimit(resource.RLIMIT_FSIZE, (-1, -1))
                log.append(User(T, "after"))
                print("appended after", flush=True)
                return 0
        print("appended", flush=True)
        return 1
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main(args[0], args[1], args[2], int(args[3]) if len(args) > 3 else 0))
