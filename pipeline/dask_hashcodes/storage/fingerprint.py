"""Cheap fingerprints of what is stored at a path or URL, to tell whether it changed.

A fingerprint does not read any content: it lists the files (local) or objects (object
stores) under a location and records how many there are, their total size and when they
last changed. A scheduled pipeline compares the fingerprints of a step's inputs and
outputs with those recorded after the step last ran, and skips the step while they are
equal (``dhash run``). Equal fingerprints mean "nothing was written since", not "same
bytes": a rewrite that keeps every size and modification time is not seen, which is why a
fingerprint decides only whether to redo work, never whether data can be trusted (that is
the commit records' job, see dask_hashcodes.storage.atomic).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from dask_hashcodes.storage.location import Location, resolve


def fingerprint(paths) -> dict:
    """``{str(path): fingerprint}`` of each path, local path, URL or ``Location``.

    A local file is ``[1, size, mtime_ns]``; a local directory ``[files, bytes, newest
    mtime_ns]`` over everything below it; a URL ``[objects, bytes, digest]`` where the digest
    covers each object's name, size and ETag (or modification time); anything absent is
    None. A ``Location`` is listed with its own storage options; a URL given as text with
    the options ``resolve`` applies."""
    out = {}
    for path in paths:
        key = str(path)
        if isinstance(path, Location) and not path.is_local:
            out[key] = remote_fingerprint(path)
        elif "://" in key and not isinstance(path, Location):
            out[key] = remote_fingerprint(resolve(key))
        else:
            out[key] = local_fingerprint(Path(path.url if isinstance(path, Location) else key))
    return out


def local_fingerprint(path: Path) -> list[int] | None:
    """``[files, bytes, newest mtime_ns]`` of a local file or directory tree, None when absent
    (a link to a file counts as its target)."""
    if path.is_file():
        st = path.stat()
        return [1, st.st_size, st.st_mtime_ns]
    if not path.is_dir():
        return None
    files = size = newest = 0
    for root, _, names in os.walk(path):
        for name in names:
            st = os.stat(os.path.join(root, name))
            files, size, newest = files + 1, size + st.st_size, max(newest, st.st_mtime_ns)
    return [files, size, newest]


def remote_fingerprint(loc: Location) -> list | None:
    """``[objects, bytes, digest]`` of the objects under (or at) a URL, None when there are none.
    The digest is over names, sizes and the store's change stamp (ETag, else a modification
    time), so an object rewritten with the same size is still seen."""
    try:
        infos = loc.fs.find(loc.fs_path, detail=True) or (
            {loc.fs_path: loc.fs.info(loc.fs_path)} if loc.is_file() else {}
        )
    except FileNotFoundError:
        return None
    if not infos:
        return None
    digest = hashlib.sha256()
    for name in sorted(infos):
        info = infos[name]
        stamp = (
            info.get("ETag") or info.get("etag") or info.get("LastModified") or info.get("mtime") or info.get("updated")
        )
        digest.update(f"{name}|{info.get('size')}|{stamp}\n".encode())
    return [len(infos), int(sum(i.get("size") or 0 for i in infos.values())), digest.hexdigest()[:16]]
