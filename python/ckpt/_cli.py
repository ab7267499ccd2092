"""Where the package's `ckpt` program lies. Its own module, so that the
package's modules find it without importing ckpt.__main__ (which
`python -m ckpt` then runs: imported first, it would be run as a module
already loaded, and Python warns of that)."""

import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def cli_path():
    """The path of the bundled `ckpt` program."""
    return os.path.join(_HERE, "_bin", "ckpt")
