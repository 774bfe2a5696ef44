"""`make verify-device`: the on-device checks (checks.py the rules, device.py the run, stack.py the
processes under supervisord, programs.py what supervisord says of them, tee.py the capture of
every request)."""
