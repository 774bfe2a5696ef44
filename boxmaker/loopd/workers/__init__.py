"""loopd's session workers: one process per active session, frames over pipes (private)."""
