"""The one writer of files and folders: every file created exclusively under a random
temporary name and renamed into place (never through a link, never half-written), appends
that never follow a link, output folders claimed before the first write (no writing among
someone else's files), and our own temporaries of a killed write cleared on the next run.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from pathlib import Path

from ..errors import FlatformerError
from .layout import CHECKPOINTS, CONFIG, LOCK, RUN_FILES


def output_file(path, what: str) -> Path:
    """A file we are about to write: its folder must exist and it must not be a folder."""
    path = Path(path)
    if path.is_symlink():
        raise FlatformerError(
            f"{what} {path} is a symbolic link; give the file it points to "
            f"({os.path.realpath(path)}) or a new name"
        )
    if path.is_dir():
        raise FlatformerError(f"{what} {path} is a folder; give a file name")
    if path.exists() and not path.is_file():  # a FIFO or a device: never ours to replace
        raise FlatformerError(f"{what} {path} is not a regular file; give a new name")
    if not path.parent.is_dir():
        raise FlatformerError(f"folder {path.parent} does not exist")
    return path


def output_folder(path, what: str) -> Path:
    """A folder we are about to create or write into: not an existing file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FlatformerError(f"{what} {path} is a file, not a folder")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise FlatformerError(f"{what} {path}: {parent} is a file, not a folder")
    return path


class WriteFailed(FlatformerError):
    pass


# Created, never opened if they exist, never through a link: a name planted in the folder (a
# symlink to a file elsewhere) makes the write fail instead of writing through it.
CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
APPEND = os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)


def atomic_write(path: str | Path, data: bytes):
    """Write a temporary file, then rename it over `path`: a kill or a failed write (a full
    disk) leaves the previous version whole. The temporary name carries a random suffix and
    is created exclusively without following links, so nobody can plant it; the rename
    replaces `path` itself, never what a link there points to. Not fsync'ed: that survives
    any crash of the process, not a power cut, and would cost more than the whole default
    run's training (its 300 writes). Plain strings, not pathlib, inside: a 64-seed run writes 13,000 files."""
    path = os.fspath(path)
    tmp = f"{path}.{secrets.token_hex(6)}.tmp"
    try:
        with open(tmp, "wb", opener=lambda name, _: os.open(name, CREATE, 0o644)) as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise WriteFailed(
            f"could not write {path} ({exc.strerror or exc}); the version before it is intact"
        ) from None


# The name `atomic_write` gives its temporary file: a kill between its open and its rename
# leaves one behind, which `remove_temporaries` clears before a run is written again.
TEMPORARY = re.compile(r"^.+\.[0-9a-f]{12}\.tmp$")


def remove_temporaries(folder: str | Path):
    """Delete what killed writes left in `folder` (our own temporary names only, never a link's
    target), so a resumed run's folder holds exactly what an unbroken one does. Called with the
    folder's lock held: no other writer's temporary file can be in flight."""
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            if TEMPORARY.match(entry.name) and not entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


def append_write(path: str | Path, data: bytes):
    """Append to `path` (never through a link); a failed write (a full disk) cuts the file
    back to what it held, so it never ends in half a line. Opened for each append: a run may
    write to thousands of seeds' files, more than a process may hold open (256 on macOS)."""
    path = os.fspath(path)
    try:
        with open(
            path, "ab", opener=lambda name, _: os.open(name, APPEND | os.O_CREAT, 0o644)
        ) as f:
            size = f.tell()
            try:
                f.write(data)
                f.flush()
            except OSError:
                f.truncate(size)
                raise
    except OSError as exc:
        raise WriteFailed(
            f"could not write {path} ({exc.strerror or exc}); the version before it is intact"
        ) from None


def refuse_links(folder: Path, names=RUN_FILES):
    """Refuse a run folder, or a part of it we read or write, that is a symbolic link: a
    folder handed over could point checkpoints/ (or the lock) at files elsewhere."""
    folder = Path(folder)
    if folder.is_symlink():
        raise FlatformerError(
            f"{folder} is a symbolic link; give the folder it points to "
            f"({os.path.realpath(folder)})"
        )
    for name in names:
        if (folder / name).is_symlink():
            raise FlatformerError(
                f"{folder / name} is a symbolic link: a run folder's files "
                f"are its own; remove the link"
            )


def left_by_a_start(entry: os.DirEntry) -> bool:
    """What a run killed before its config.json was written leaves in its folder: the lock,
    an empty checkpoints/ and the temporary file of an atomic write (so its rerun goes on)."""
    if entry.is_symlink():
        return False
    if entry.name == CHECKPOINTS and entry.is_dir():  # empty, or a killed write's temporary
        return all(
            TEMPORARY.match(e.name) and e.is_file(follow_symlinks=False)
            for e in os.scandir(entry.path)
        )
    return entry.name == LOCK or (bool(TEMPORARY.match(entry.name)) and entry.is_file())


def claim_folder(folder, what: str, ours=lambda f: (Path(f) / CONFIG).is_file()):
    """Refuse, before anything is written, an output folder that is not ours to write: the
    filesystem's root, a file, a symbolic link, or an existing non-empty folder that holds
    no run (someone else's files). A folder holding a run is for the caller to judge."""
    folder = Path(folder)
    if folder.exists() and os.path.realpath(folder) == os.path.realpath(os.sep):
        raise FlatformerError(
            f"{what} {folder} is the filesystem's root; give a folder of its own, e.g. runs/mine"
        )
    if folder.exists() and not folder.is_dir():
        raise FlatformerError(f"{what} {folder} is a file, not a folder")
    refuse_links(folder)
    if folder.is_dir() and not ours(folder) and not all(map(left_by_a_start, os.scandir(folder))):
        raise FlatformerError(
            f"{what} {folder} is not empty and holds no flatformer run; "
            f"choose an empty or new folder"
        )
    return folder


# What the drawing commands write (figures, movies and their posters, comparisons): a folder of
# only these is ours to write again, whichever of them wrote it (figures and movies may share one).
OUTPUT_SUFFIXES = (".png", ".pdf", ".svg", ".mp4", ".gif", ".json")


def holds_only(*suffixes: str):
    """`claim_folder`'s test of ours for a folder of outputs (figures, movies, a comparison):
    every entry a regular file (not a link) ending in one of `suffixes`, so a rerun replaces
    its own files and never writes among someone else's."""

    def ours(folder) -> bool:
        return all(
            e.is_file(follow_symlinks=False) and e.name.endswith(suffixes)
            for e in os.scandir(folder)
        )

    return ours


def write_file(path, data: bytes, what: str) -> Path:
    """A single output file a user named (--out, --export): checked by `output_file`, then
    written atomically, so a link or a FIFO at that name is never written through."""
    path = output_file(path, what)
    atomic_write(path, data)
    return path


def make_folder(folder, what: str) -> Path:
    """Create `folder` (and its parents) for our files: never a link, never a file."""
    folder = Path(output_folder(folder, what))
    if folder.is_symlink():
        raise FlatformerError(f"{what} {folder} is a symbolic link; give a folder of its own")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FlatformerError(f"cannot create {what} {folder} ({exc.strerror})") from None
    return folder


@contextlib.contextmanager
def atomic_path(path, what: str):
    """For a library that writes only to a file name it is given (HDF5): a fresh temporary name
    beside `path` (checked by `output_file`) to write, renamed over `path` when the block ends;
    on an error the temporary is removed and `path` keeps what it held."""
    path = output_file(path, what)
    tmp = f"{path}.{secrets.token_hex(6)}.tmp"  # TEMPORARY's pattern: a kill's is cleared
    try:
        yield tmp
        if os.path.islink(tmp) or not os.path.isfile(tmp):
            raise FlatformerError(f"{what} {path}: the writer left no file")
        os.replace(tmp, path)
    except OSError as exc:
        raise WriteFailed(f"could not write {path} ({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
