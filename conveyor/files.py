"""Files written whole or not at all: a crash mid-write leaves the old file, never half of a new one."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def replace_atomically(path: Path, content: bytes, mode: int = 0o644) -> None:
    """``content`` as ``path`` with ``mode``: written to a temporary file beside it, synced, renamed
    over it, and the rename synced, so that a reader sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(descriptor, mode)
        with os.fdopen(descriptor, "wb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


@contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Held by one process at a time (an advisory lock on ``lock_file``, released if it dies)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
