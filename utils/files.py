"""Files that later processes read are written whole or not at all."""

import contextlib
import os
import stat
import tempfile
from typing import Optional, Union


@contextlib.contextmanager
def naming(path: str, temporary: Optional[str] = None):
    """An `OSError` raised in the block without a file name (a `write` or `close` on a full disk), or naming a
    file under `temporary` (a folder that is removed on failure), is raised again naming `path`: the one line
    the drivers print for it then says which file could not be written."""
    try:
        yield
    except OSError as e:
        named = e.filename is not None and not (temporary and str(e.filename).startswith(temporary))
        if named or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, path) from e


def atomic_write(path: str, data: Union[str, bytes]):
    """Write `data` to `path` so that a reader sees the old file or the whole new one, never a part.

    The data go to a temporary file in the same directory, are flushed to disk, and replace `path`
    (`os.replace`); a full disk or a crash leaves the old file (or none) and no half-written one. The file
    keeps the mode of the one it replaces, else gets what `open` would give (0o666 less the umask), not
    the owner-only mode of a temporary file: others on a shared cluster read the results.
    """
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.exists(path):
        mode = os.stat(path).st_mode & 0o7777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    with naming(path):
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


def existing_ancestor(path: str) -> str:
    """The nearest of `path` and its parent directories that exists (absolute, `~` expanded): where a file
    at `path` would be created. It may be a file (then nothing can be written under it)."""
    folder = os.path.abspath(os.path.expanduser(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    return folder


def non_file_kind(path: str) -> Union[str, None]:
    """What `path` is when it exists but is no regular file ('a directory', 'a character device', ...), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), None)
