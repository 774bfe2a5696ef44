"""`python -m boxmaker.loopd`: the same as the `loopd` console script."""

import sys

from boxmaker.loopd.cli import main

sys.exit(main())
