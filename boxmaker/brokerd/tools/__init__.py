"""The tools brokerd runs on the agent's behalf."""
