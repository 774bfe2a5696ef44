"""The fake Mattermost server (fake.py) and the fixtures it is pinned to (fixtures.py)."""
