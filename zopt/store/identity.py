"""What identifies a source file for a resumed job: its size, modification time and a sample of its bytes.

Size and modification time alone miss a file edited in place whose size and mtime were put
back (``touch -r``, ``rsync --times``, a restore that keeps times): a resumed job would mix
shards of the old file with shards of the new one. ``content_sample(path)`` adds a digest of
``SAMPLES`` fixed ranges of ``SAMPLE_BYTES`` (the first, the last, and evenly spaced between;
the whole file when it is at most ``SAMPLES * SAMPLE_BYTES``): one open and a few reads per
file, a few tens of microseconds on a warm file (docs/archives.md has the measurement). An
edit that touches none of the ranges, with size and mtime put back, is still not seen.

``files_table`` / ``changed_files`` keep a compact table of every file's identity in a
journal's fingerprint, so that a refused resume names the files that changed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import zlib
from collections.abc import Mapping

__all__ = ["SAMPLES", "SAMPLE_BYTES", "changed_files", "content_sample", "file_identity", "files_table"]

SAMPLES = 8
SAMPLE_BYTES = 4096
_ID_BYTES = 6  # per file in the table: enough to tell which file changed (the job's digest is the check)


def content_sample(path: str | os.PathLike[str]) -> str:
    """A hex digest of ``SAMPLES`` fixed ranges of ``SAMPLE_BYTES`` of the local file ``path``
    (where each starts depends only on the file's size), or of the whole file when it is small.
    Raises OSError when the file cannot be read."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size <= SAMPLES * SAMPLE_BYTES:
            h.update(f.read())
        else:
            last = size - SAMPLE_BYTES
            for i in range(SAMPLES):
                f.seek(last * i // (SAMPLES - 1))
                h.update(f.read(SAMPLE_BYTES))
    return h.hexdigest()


def file_identity(path: str | os.PathLike[str]) -> str:
    """``"SIZE MTIME_NS SAMPLE"`` of the local file ``path`` (see ``content_sample``)."""
    st = os.stat(path)
    return f"{st.st_size} {st.st_mtime_ns} {content_sample(path)}"


def _short(identity: str) -> bytes:
    return hashlib.blake2b(identity.encode(), digest_size=_ID_BYTES).digest()


def files_table(identities: Mapping[str, str]) -> str:
    """``{path: identity text}`` as compact text for a fingerprint (JSON-able; zlib + base64):
    the paths, and a short digest of each identity."""
    paths = list(identities)
    blob = json.dumps(paths).encode() + b"\0" + b"".join(_short(identities[p]) for p in paths)
    return base64.b64encode(zlib.compress(blob, 9)).decode()


def _read_table(text: str) -> dict[str, bytes]:
    blob = zlib.decompress(base64.b64decode(text))
    head, ids = blob.split(b"\0", 1)
    paths = json.loads(head)
    return {p: ids[i * _ID_BYTES:(i + 1) * _ID_BYTES] for i, p in enumerate(paths)}


def changed_files(old: str, new: str, most: int = 3) -> str | None:
    """Which files differ between two ``files_table`` texts, in words (the first ``most`` of each
    kind: modified, added, removed), or None when the tables cannot tell (unreadable, or equal)."""
    try:
        a, b = _read_table(old), _read_table(new)
    except (ValueError, TypeError, zlib.error):
        return None
    parts = []
    for what, found in (("modified", [p for p in b if p in a and a[p] != b[p]]),
                        ("added", [p for p in b if p not in a]), ("removed", [p for p in a if p not in b])):
        if found:
            more = f" and {len(found) - most} more" if len(found) > most else ""
            parts.append(f"{what}: {', '.join(found[:most])}{more}")
    return "; ".join(parts) or None
