"""Sessions on disk (M2b brief section 2): `<home>/sessions/<id>/0.baseline.json` and `0.jsonl`.

`baseline` assembles the system text and tool schemas a session starts with and reads them back;
`store` creates, opens (verifying the whole chain) and appends to a session's log under an
exclusive flock, from the file operations in `files`; `check` is the pure verification both
`store` and `bxctl verify` use; `replay` turns a log back into the messages of the next request.
The log is the session's state: nothing else is kept.
"""
