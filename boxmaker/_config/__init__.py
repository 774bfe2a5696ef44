"""The typed config floor loopd, gatewayd and brokerd share: kinds, schema walk, bounded read."""
