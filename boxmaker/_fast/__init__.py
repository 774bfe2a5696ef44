"""The three hot paths, each a compiled Cython module with a pure-Python twin.

`<name>.py` picks the twin: the compiled `_<name>_c` unless BOXMAKER_NO_EXTENSIONS is set to a
non-empty value. A missing compiled module is a loud ImportError, never a silent fallback
(DECISIONS.md: the daemons use the compiled ones). Each selector records its choice here, so
daemons can name it in their start line and tests can check it.
"""

import os

NO_EXTENSIONS = bool(os.environ.get("BOXMAKER_NO_EXTENSIONS"))

# name -> "c" or "py"; filled in by each selector module when it is imported.
IMPLEMENTATIONS: dict[str, str] = {}
