"""loopd: the agent daemon. Its inference path (config, http, sse, llama.*) and, later, sessions."""
