"""Tools: the port the turn loop calls (`port`), the registry and core schemas (`registry`), and
the argument checker (`schema`)."""
