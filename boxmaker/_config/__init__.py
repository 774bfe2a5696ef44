"""The typed config floor loopd and gatewayd share: value kinds, schema walk, bounded read."""
