"""taigym: liquid pouring, spill-free transport and multi-contact locomotion as Gymnasium envs."""

import os

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")  # offline runs can segfault at exit otherwise

from . import sim  # noqa: E402
from . import agents, envs  # noqa: E402

__version__ = "0.1.0"
__all__ = ["agents", "envs", "sim"]
