"""The one compiled part: hostfs/_fastread.c, the batched reads of the scrape's hot loops.

Everything else is declared in pyproject.toml; the extension is here because Debian 12's
setuptools (66, which builds the Debian package) reads no ext-modules from pyproject.toml
(setuptools 74.1 added that, experimental). The extension is optional: where it cannot
be built (no C compiler or no Python headers) the package installs without it and
``cephnode_exporter.hostfs.batch`` reads with its pure-Python fallback, saying so in the
log at start (docs/performance.md).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cephnode_exporter.hostfs._fastread",
            sources=["exporter/cephnode_exporter/hostfs/_fastread.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"],
            optional=True,
        )
    ],
)
