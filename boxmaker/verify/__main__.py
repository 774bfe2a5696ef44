"""`python -m boxmaker.verify`: see device.py."""

import sys

from boxmaker.verify.device import main

sys.exit(main())
