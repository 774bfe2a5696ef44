"""The turn loop: `loop` (the sans-IO core), `limits` and `records` (its pure parts), `runner`
(the core against the client, the tool port and the session's log) and `command` (`loopd turn`)."""
