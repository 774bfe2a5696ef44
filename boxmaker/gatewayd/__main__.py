"""`python -m boxmaker.gatewayd`: the same as the `gatewayd` console script."""

import sys

from boxmaker.gatewayd.cli import main

sys.exit(main())
