"""`make verify-device`: the on-device checks (checks.py the rules, device.py the run, stack.py the
processes under supervisord, tee.py the capture of every request)."""
