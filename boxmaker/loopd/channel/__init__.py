"""The channel on loop.sock (M2b section 6): connections, one `turn` each, and the session locks."""
