"""The turn loop: `loop` (the sans-IO core), `limits` and `records` (its pure parts), `compact`
(the sans-IO fold: when, and the summary request) and `compactor` (its shell: the summary, the
epoch switch, the pre-warm), `recall` (the `recall` tool answered from the session's own files),
`runner` (the core against the client, the tool port and the session's log; where a stop asked
by the owner takes effect) and `command` (`loopd turn`)."""
