"""The results folder's own files: its row files, its schema file (``+schema.parquet``: every column of the folder,
zero rows, sorted before every row file, so readers that take the first file's columns see all of them), and
file-name components made of any text (host names, study names).

A schema file that is unreadable, missing beside row files, or that lacks columns of rows copied in from elsewhere
is rebuilt from every row file's footer (one warning names it), never from the one row being written.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import unicodedata
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.results.readers import first_line, read_schema, unify, warn_unreadable

SCHEMA_FILE = "+schema.parquet"  # zero rows; the folder's columns and their types (see ``update_schema``)


def file_safe(text: str, limit: int = 60, empty: str = "_") -> str:
    """``text`` (a host name, a study name: any text) as one file-name component: ASCII letters, digits, ``_``
    and ``-`` only (a ``/`` or ``..`` would leave the folder), at most ``limit`` characters, never empty."""
    ascii_text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode()
    return re.sub(r"[^A-Za-z0-9_-]+", "_", ascii_text).strip("_-")[:limit] or empty


def host_name() -> str:
    """This host's name as a file-name component (a host name may hold a ``/``, see ``file_safe``)."""
    return file_safe(socket.gethostname())


def trial_files(trials_dir: Path) -> list[Path]:
    """The folder's row files (not hidden, not the schema file)."""
    d = Path(trials_dir)
    if not d.is_dir():
        return []
    return sorted(p for p in d.glob("*.parquet") if not p.name.startswith((".", "_")) and p.name != SCHEMA_FILE)


def folder_schema(trials_dir: Path) -> pa.Schema:
    """The columns of the folder: ``+schema.parquet``'s, or, when that file is unreadable (one warning names it) or
    missing beside row files, every row file's columns (``rebuilt_schema``); empty for a folder without rows."""
    return _stored_schema(Path(trials_dir))[0]


def _stored_schema(trials_dir: Path) -> tuple[pa.Schema, bool]:
    """(the folder's columns, whether ``+schema.parquet`` holds them: False when they were rebuilt)."""
    path = trials_dir / SCHEMA_FILE
    try:
        return pq.read_schema(path), True
    except FileNotFoundError:
        files = trial_files(trials_dir)
        return (rebuilt_schema(files), False) if files else (pa.schema([]), True)
    except (OSError, pa.ArrowException, ValueError) as e:
        warn_unreadable(
            path,
            f"{path} is not readable Parquet ({first_line(e)}): the folder's columns are rebuilt from every row file",
        )
        return rebuilt_schema(trial_files(trials_dir)), False


def rebuilt_schema(files: list[Path]) -> pa.Schema:
    """Every column of ``files`` (their footers; unreadable files skipped with one warning each), one type each."""
    return unify(s for p in files if (s := read_schema(p)) is not None)


def heal_schema(trials_dir: Path, columns: pa.Schema) -> None:
    """After a read of the folder's rows (``columns``): add to ``+schema.parquet`` the columns it lacks (row files
    copied in from another folder), so readers that take its columns see them too. A folder that cannot be
    written (a read-only copy) is left as it is, with one warning naming the file."""
    trials_dir = Path(trials_dir)
    stored, sound = _stored_schema(trials_dir)
    missing = [f for f in columns if f.name not in stored.names]
    if sound and not missing:
        return
    try:
        update_schema(trials_dir, pa.schema(missing))
    except OSError as e:
        path = trials_dir / SCHEMA_FILE
        if not path.exists():
            return  # no schema file to mislead a reader: each reads the row files themselves
        warn_unreadable(
            path,
            f"{path} lacks columns of the folder's rows and cannot be rewritten ({e.strerror}): "
            "readers that take its columns miss " + ", ".join(f.name for f in missing[:5]),
        )


def update_schema(trials_dir: Path, schema: pa.Schema) -> None:
    """Add ``schema``'s columns to the folder's schema file (under a file lock; written to a temporary name and
    renamed into place). Columns it has keep their type; a null-typed one takes the first real type."""
    trials_dir = Path(trials_dir)

    def known(current: pa.Schema) -> bool:
        return all(
            f.name in current.names and (f.type == pa.null() or current.field(f.name).type != pa.null()) for f in schema
        )

    current, sound = _stored_schema(trials_dir)
    if sound and known(current):
        return
    with open(trials_dir / f".{SCHEMA_FILE}.lock", "a") as lock:
        with contextlib.suppress(OSError):
            fcntl.flock(lock, fcntl.LOCK_EX)
        current, sound = _stored_schema(trials_dir)  # unsound (unreadable, missing): rewritten from every row
        if sound and known(current):
            return
        fields = {f.name: f for f in current}
        for f in schema:
            if f.name not in fields or (fields[f.name].type == pa.null() and f.type != pa.null()):
                fields[f.name] = pa.field(f.name, f.type)
        merged = pa.schema(list(fields.values()))
        tmp = trials_dir / f".{SCHEMA_FILE}.{os.getpid()}.tmp"
        pq.write_table(merged.empty_table(), tmp)
        os.replace(tmp, trials_dir / SCHEMA_FILE)
