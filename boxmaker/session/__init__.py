"""Sessions on disk (M2b brief section 2, issue 21): `<home>/sessions/<id>/<n>.baseline.json` and
`<n>.jsonl` for each epoch n (0 until the first compaction).

`baseline` assembles the system text and tool schemas a session starts with and reads them back;
`store` creates, opens (verifying the whole chain) and appends to a session's log under an
exclusive flock, from the file operations in `files` and the paths and locks in `paths`; `chain`
and `check` are the pure verification `store`, `verify` (`bxctl verify`) and `repair` use, and
`torn` tells a torn last line from other damage; `replay` turns a log back into the messages of
the next request; `epochs` is the pure rule of a compaction's switch and `epoch_files` carries it
out and checks the epochs' links; `recall` reads a folded record back. The log is the session's
state: nothing else is kept. `crashpoint` lets the crash tests stop a write half-way.
"""
