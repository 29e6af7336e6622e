"""Atomic outputs, on local disks and on object stores.

Every artifact (dataset, split, ground truth, model, codes, report, checkpoint) is a
directory that becomes visible only when it is complete:

* **local disk / shared mount:** written under a temporary sibling ``.NAME.tmp-<hex>``
  and renamed into place; an older output is moved aside first, so there is never a
  moment with neither;
* **object stores** (no rename): written in place, and committed by a small marker
  ``.dhash-commit.json`` written last. Readers refuse a prefix without it
  (``require_committed``), so a killed writer's half-written prefix is never read.

The marker is written on local disks too, so readers check one thing everywhere. It
names the artifact's kind and holds its manifest: per zarr array, the shape and the
checksum of every chunk (``manifest.array_manifest``), from which the artifact's content
id is derived.

``--overwrite`` replaces only an artifact of the same kind (recognised by its marker);
any other existing path is refused. The next writer of an output removes temporaries
left by killed writers on this host. SIGTERM is turned into an exception by the CLI, so
the ``except`` below removes the temporary on ``kill`` too.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid

from pipeline.errors import InputError
from pipeline.storage.location import Location, resolve

COMMIT_FILE = ".dhash-commit.json"
WRITER_FILE = ".dhash-writer.json"
COMMIT_SCHEMA = "dhash.commit/1"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ------------------------------------------------------------------ reading markers ---


def read_commit(loc: Location) -> dict | None:
    """The commit record of an artifact directory, None when there is none (or it is damaged)."""
    try:
        record = json.loads(loc.child(COMMIT_FILE).read_bytes())
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) and record.get("schema") == COMMIT_SCHEMA else None


def require_committed(loc: Location, kind: str, remedy: str) -> dict:
    """The commit record of ``loc``, which must be a complete ``kind``; else a one-line error."""
    record = read_commit(loc)
    if record is None:
        if not loc.exists():
            raise InputError(f"{loc} does not exist; {remedy}")
        if loc.child(COMMIT_FILE).exists():
            raise InputError(f"{loc} has a damaged commit record ({COMMIT_FILE}); {remedy}")
        raise InputError(
            f"{loc} is not a complete dhash {kind} (no {COMMIT_FILE}: its writer was killed, is still "
            f"running, or it was made by another tool or an older dhash); {remedy}"
        )
    if record.get("kind") != kind:
        raise InputError(f"{loc} is a dhash {record.get('kind')}, not a {kind}; {remedy}")
    return record


def existing_kind(loc: Location) -> str | None:
    """The kind of the dhash artifact at ``loc`` (None: nothing, or something not ours)."""
    record = read_commit(loc)
    if record is not None:
        return record.get("kind")
    if loc.is_file():
        return _parquet_kind(loc)
    return None


def _parquet_kind(loc: Location) -> str | None:
    """The kind of a single-file artifact: our parquet files name it in their schema
    metadata ("dhash.KIND/VERSION"); anything else (or unreadable) is not ours."""
    import pyarrow.parquet as pq

    try:
        with loc.open("rb") as f:
            schema = (pq.ParquetFile(f).schema_arrow.metadata or {}).get(b"schema", b"").decode()
    except Exception:  # noqa: BLE001 - anything unreadable is simply not ours
        return None
    return schema[len("dhash.") :].rpartition("/")[0] or None if schema.startswith("dhash.") else None


def check_output(final, *, kind: str, overwrite: bool) -> Location:
    """Refuse an output path we may not write, before any work: an existing path unless
    ``overwrite`` and it is our own ``kind``; a local parent that cannot be written."""
    final = resolve(final)
    if final.exists() and _uncommitted_write(final, overwrite):
        return final  # a killed writer's prefix (object stores): atomic_output replaces it
    if final.exists():
        if not overwrite:
            raise InputError(f"output {final} already exists; choose another path or pass --overwrite")
        found = existing_kind(final)
        if found != kind and kind != "file":  # "file": the library's own small files (stamps, logs)
            what = f"a dhash {found}" if found else "not a dhash artifact"
            raise InputError(
                f"output {final} exists and is {what}; --overwrite only replaces a dhash {kind}. "
                "Choose another path or remove it yourself"
            )
    if final.is_local:
        parent = final.parent.url
        while not os.path.exists(parent) and os.path.dirname(parent) != parent:
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(f"cannot write {final}: {parent} is not a writable directory; choose another --out")
    return final


def _read_writer(loc: Location) -> dict | None:
    try:
        writer = json.loads(loc.child(WRITER_FILE).read_bytes())
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError, UnicodeDecodeError):
        return None
    return writer if isinstance(writer, dict) else None


def _writer_dead(writer: dict) -> bool:
    """True when the writer ran on this host and its process is gone (elsewhere: unknown)."""
    return writer.get("host") == socket.gethostname() and not _pid_alive(int(writer.get("pid", -1)))


def writer_alive(writer: dict) -> bool:
    """True when the writer runs on this host and its process is alive (not this process)."""
    pid = int(writer.get("pid", -1))
    return writer.get("host") == socket.gethostname() and pid != os.getpid() and _pid_alive(pid)


def _uncommitted_write(final: Location, overwrite: bool) -> bool:
    """An output written in place (object stores) that never got its commit marker: its
    writer was killed, or still runs. It may be replaced when its writer is known to be
    dead, or with --overwrite (the writer may be on another host; the user decides)."""
    if read_commit(final) is not None:
        return False
    writer = _read_writer(final)
    if writer is None:
        return False
    if overwrite or _writer_dead(writer):
        return True
    raise InputError(
        f"output {final} is an unfinished write (started {writer.get('started')} by pid {writer.get('pid')} "
        f"on {writer.get('host')}, never committed); if that job is gone pass --overwrite to replace it"
    )


# ------------------------------------------------------------------ writing -----------


def writer_record() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": _now()}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(final: Location) -> list[str]:
    """Remove ``.NAME.tmp-*`` siblings whose writer (on this host) is dead; returns their names."""
    if not final.is_local:
        return []
    removed = []
    prefix = f".{final.name}.tmp-"
    for name in final.parent.list_names():
        if not name.startswith(prefix):
            continue
        tmp = final.sibling(name)
        writer = _read_writer(tmp)
        if writer is not None:
            stale = _writer_dead(writer)
        else:  # no writer record: a file temporary, or the writer died before writing it
            stale = time.time() - os.path.getmtime(tmp.url) > 3600
        if stale:
            tmp.remove()
            removed.append(name)
    return removed


def _remote_uncommit(final: Location) -> None:
    """Object stores: make an old output unreadable (marker first), then delete it."""
    final.child(COMMIT_FILE).remove()
    final.remove()


@contextlib.contextmanager
def atomic_output(final, *, kind: str, overwrite: bool = False, manifest=None, file: bool = False):
    """Yield a Location to write ``kind`` into; it appears at ``final`` only on success.

    ``manifest(location) -> dict`` is called on the finished temporary before the commit
    and stored in the marker. ``file=True``: a single file (no marker; a rename on local
    disk, a single PUT on object stores: both all-or-nothing).
    """
    final = check_output(final, kind=kind, overwrite=overwrite)
    if final.is_local:
        remove_stale_temporaries(final)
        os.makedirs(final.parent.url, exist_ok=True)
        tmp = final.sibling(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
        if not file:
            tmp.child(WRITER_FILE).write_text(json.dumps(writer_record()))
    else:
        if final.exists() and not file:  # an older output, or a killed writer's prefix
            _remote_uncommit(final)
        tmp = final
        if not file:
            tmp.child(WRITER_FILE).write_text(json.dumps(writer_record()))
    try:
        yield tmp
        if not file:
            record = {
                "schema": COMMIT_SCHEMA,
                "kind": kind,
                "committed": _now(),
                "manifest": manifest(tmp) if manifest is not None else {},
            }
            tmp.child(WRITER_FILE).remove()
            tmp.child(COMMIT_FILE).write_text(json.dumps(record, indent=1) + "\n")
    except BaseException:
        tmp.remove()
        raise
    if final.is_local:
        _rename_into_place(tmp, final)


def _rename_into_place(tmp: Location, final: Location) -> None:
    if os.path.lexists(final.url):
        # move the old output aside first so there is never a moment with neither
        old = final.sibling(f".{final.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(final.url, old.url)
        os.replace(tmp.url, final.url)
        old.remove()
    else:
        os.replace(tmp.url, final.url)


def write_text_atomic(path, text: str) -> None:
    """A small local or remote text file replaced atomically (logs, stamps, JSON results)."""
    with atomic_output(path, kind="file", overwrite=True, file=True) as tmp:
        tmp.write_text(text)
