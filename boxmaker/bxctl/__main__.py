"""`python -m boxmaker.bxctl`: the same as the `bxctl` console script."""

import sys

from boxmaker.bxctl.cli import main

sys.exit(main())
