"""One writer per folder: an exclusive lock held while a run trains or a sweep drives.

The lock is flock(2) on FOLDER/.lock, which the kernel releases when its holder exits in any
way, SIGKILL included: a lock left by a killed process is never in the way, and the next
writer simply takes it (the file then names the new holder). The file holds the holder's
process id, so a refusal can say who is writing.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..errors import FlatformerError
from .layout import LOCK as NAME
from .read import read_text


@contextlib.contextmanager
def hold(folder, what: str):
    """Hold FOLDER's lock for the block, or refuse in one line naming the holder's pid."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock, the rest works
        yield
        return
    folder = Path(folder)
    if folder.is_symlink():
        raise FlatformerError(
            f"cannot lock {folder}: it is a symbolic link; give the folder it points to"
        )
    folder.mkdir(parents=True, exist_ok=True)
    try:  # never through a link planted at the lock's name
        fd = os.open(folder / NAME, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as exc:
        raise FlatformerError(
            f"cannot lock {folder} ({exc.strerror}): {folder / NAME} must be "
            f"a file of its own, not a link; remove it"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise FlatformerError(
                f"{folder} is in use: process {holder} is writing it "
                f"({what}); wait for it to finish or choose another "
                f"--out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def holder(folder) -> int | None:
    """The pid written in FOLDER's lock file (the last holder, alive or not), or None."""
    try:
        return int(read_text(Path(folder) / NAME, "lock file", 64).strip())
    except (FlatformerError, ValueError):  # a FIFO planted there is not waited on
        return None


@contextlib.contextmanager
def hold_all(folders: list, what: str):
    """Hold every folder's lock (a --seeds job writes one folder per seed). Each lock is an open
    file, so the open-file limit is raised toward its hard limit when a job needs more."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = len(folders) + 256  # what the process already has open, with room
        if soft != resource.RLIM_INFINITY and wanted > soft:
            if hard != resource.RLIM_INFINITY and wanted > hard:
                raise FlatformerError(
                    f"{len(folders)} run folders need {wanted} open files but "
                    f"this system allows {hard}: train fewer seeds at a time"
                )
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except ImportError:  # Windows: no lock taken either
        pass
    with contextlib.ExitStack() as stack:
        for folder in folders:
            stack.enter_context(hold(folder, what))
        yield
