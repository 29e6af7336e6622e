"""The operating system's page cache around a disk-resident index: drop a tree of files from
it before a cold measurement, and ask how much of them is resident.

A "cold" search time means nothing unless the files it reads were really out of memory when
it started, so ``evict`` uses the strongest method the process is allowed: the per-file
``posix_fadvise(DONTNEED)`` always (it needs no privilege but only drops clean pages, hence the
fsync first), and the kernel-wide ``drop_caches`` as well when this process may write it (root
outside a read-only /proc). It returns the methods used so a result can say which one made it
cold; ``resident_fraction`` checks the effect.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def files_under(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> list[Path]:
    """Every regular file named by ``paths`` or inside a directory among them (recursively)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for path in map(Path, paths):
        if path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            out.append(path)
        else:
            raise FileNotFoundError(f"no file or directory {path}: evict and resident_fraction need existing paths")
    return out


def _fadvise_dontneed(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        # DONTNEED drops clean pages only: written-back first, so a freshly built index goes too
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _drop_caches() -> bool:
    """Write back and drop the whole page cache; False where /proc/sys is not writable to us."""
    os.sync()
    try:
        DROP_CACHES.write_text("1\n")
    except OSError:  # containers mount /proc/sys read-only even for root
        return False
    return True


def evict(paths, *, system_wide: bool = True) -> str:
    """Drop every file under ``paths`` from the page cache; the methods that were used,
    "posix_fadvise" or "posix_fadvise+drop_caches" (``system_wide=False``: never the latter,
    which empties the cache of every process on the machine)."""
    for path in files_under(paths):
        _fadvise_dontneed(path)
    return "posix_fadvise+drop_caches" if system_wide and _drop_caches() else "posix_fadvise"


def resident_fraction(paths) -> float | None:
    """The fraction of the bytes of the files under ``paths`` that sit in the page cache
    (util-linux's fincore), or None where fincore is not installed."""
    fincore = shutil.which("fincore")
    files = files_under(paths)
    if fincore is None:
        return None
    if not files:
        return 0.0
    listing = subprocess.run(
        [fincore, "--bytes", "--noheadings", "--raw", "--output", "RES,SIZE", *map(str, files)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    resident = size = 0
    for line in listing.splitlines():
        res, total = map(int, line.split())
        resident += min(res, total)  # fincore counts whole pages: the last one can pass the file's end
        size += total
    return resident / size if size else 0.0
