"""brokerd: the agent's authority in its own process (issues 22 and 23)."""
