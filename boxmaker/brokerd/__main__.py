import sys

from boxmaker.brokerd.cli import main

sys.exit(main())
