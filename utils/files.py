"""Files that later processes read are written whole or not at all."""

import os
import tempfile
from typing import Union


def atomic_write(path: str, data: Union[str, bytes]):
    """Write `data` to `path` so that a reader sees the old file or the whole new one, never a part.

    The data go to a temporary file in the same directory, are flushed to disk, and replace `path`
    (`os.replace`); a full disk or a crash leaves the old file (or none) and no half-written one.
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
