"""The compiled twins in boxmaker/_fast: one Extension per `_<name>_c.pyx` (httptools style).

BOXMAKER_CYTHON_TRACE=1 builds them with line tracing for coverage (`make debug`).
"""

import os
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

TRACE = os.environ.get("BOXMAKER_CYTHON_TRACE") == "1"

directives = {"language_level": 3, "embedsignature": True}
macros = []
if TRACE:
    directives["linetrace"] = True
    macros.append(("CYTHON_TRACE", "1"))

extensions = [
    Extension(
        f"boxmaker._fast.{pyx.stem}",
        [str(pyx)],
        define_macros=macros,
        extra_compile_args=["-O2"],
    )
    for pyx in sorted(Path("boxmaker/_fast").glob("_*_c.pyx"))
]

setup(ext_modules=cythonize(extensions, compiler_directives=directives, force=TRACE))
