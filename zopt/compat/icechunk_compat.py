"""Icechunk repositories as zopt destinations and stores to read, on icechunk 1.1 and 2.x.

Everything that differs between the versions is here (icechunk 2 needs Python >= 3.12, so the
3.11 leg gets 1.1.x):

- ``Session.amend`` exists from 2.0 only: ``commit_wave`` amends the job's one commit on 2.x and
  adds a commit per wave on 1.1 (the job's commits then reach the target branch together);
- error classes: 2.x raises ``RepositoryNotFoundError``/``RefNotFoundError`` (``KeyError``
  subclasses), 1.1 a plain ``IcechunkError``; ``open_repository``/``lookup_branch`` turn both
  into zopt errors naming the repository or branch.

The same on both: ``Repository.create_branch``/``reset_branch(from_snapshot_id=…)``,
``Session.fork()`` (a picklable ``ForkSession``) and ``Session.merge(*forks)``.

URLs (``parse_url``): ``icechunk://PATH[@REF]`` for a repository in a local directory, and
``icechunk+s3://BUCKET/PREFIX[@REF]`` on S3 (credentials, region and endpoint from the
environment: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION`` or
``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``). ``REF`` is a branch name (default ``main``) or
``snapshot:ID`` (read only).
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from zopt.errors import OptionError, ZoptError

if TYPE_CHECKING:
    from types import ModuleType

    from icechunk import Repository, Session

__all__ = [
    "BranchMovedError", "IcechunkRef", "RepositoryNotFoundError", "commit_wave", "fresh_fork", "is_icechunk",
    "is_icechunk_url", "lookup_branch", "open_ref", "parse_url", "quiet_logs", "readonly_store", "require", "version",
]

SCHEMES = ("icechunk://", "icechunk+s3://")


class RepositoryNotFoundError(ZoptError, FileNotFoundError):
    """No Icechunk repository at the location named, or no such branch in it (the message names both)."""


class BranchMovedError(ZoptError, ValueError):
    """The target branch moved since the job started: the job's commit is not published."""


def require() -> Any:
    """The ``icechunk`` module, or ImportError saying how to install it."""
    try:
        import icechunk
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise ImportError("an icechunk:// destination needs the icechunk package: pip install 'zopt[icechunk]'") from exc
    return icechunk


def quiet_logs(*locations: object) -> None:
    """For the command line: icechunk's own log shown from errors up when one of ``locations`` is an
    Icechunk repository, unless ``ICECHUNK_LOG`` says otherwise. (A local repository warns that its
    storage is unsafe for concurrent commits; a zopt job commits from its client only.)"""
    global _QUIET
    if any(is_icechunk_url(x) for x in locations) and "ICECHUNK_LOG" not in os.environ:
        require().set_logs_filter("error")
        _QUIET = True


_QUIET = False  # quiet_logs was called: icechunk's log shows errors only for the whole process


def _local_storage(ic: ModuleType, path: str) -> Any:
    """``ic.local_filesystem_storage(path)`` without the warning icechunk logs at each one made (that
    local storage is unsafe for concurrent commits: a zopt job commits from its client only); errors
    still show, and ``ICECHUNK_LOG``, when set, decides as icechunk documents. The filter is then
    set back to icechunk's default (``quiet_logs``: to errors)."""
    if "ICECHUNK_LOG" in os.environ:
        return ic.local_filesystem_storage(path)
    ic.set_logs_filter("error")
    try:
        return ic.local_filesystem_storage(path)
    finally:
        ic.set_logs_filter("error" if _QUIET else None)


def version() -> tuple[int, ...]:
    return tuple(int(p) for p in require().__version__.split(".")[:2])


def is_icechunk_url(x: object) -> bool:
    return isinstance(x, str) and x.startswith(SCHEMES)


def is_icechunk(x: object) -> TypeGuard[str | Repository]:
    """An ``icechunk://…`` URL or an ``icechunk.Repository`` (checked without importing icechunk)."""
    return is_icechunk_url(x) or type(x).__module__.startswith("icechunk") and type(x).__name__ == "Repository"


@dataclass(frozen=True)
class IcechunkRef:
    """A repository (``repo``) and a branch in it, or a snapshot id (read only); ``text`` names them."""

    repo: Repository
    branch: str | None
    snapshot: str | None
    text: str


def parse_url(url: str) -> tuple[str, str, str | None]:
    """``(scheme, location, ref)`` of ``icechunk://PATH[@REF]`` or ``icechunk+s3://BUCKET/PREFIX[@REF]``.
    ValueError naming the URL forms."""
    scheme = next((s for s in SCHEMES if url.startswith(s)), None)
    rest = url[len(scheme):] if scheme else ""
    location, _, ref = rest.rpartition("@") if "@" in rest else (rest, "", None)
    if not scheme or not location or ref == "":
        raise OptionError("dst", f"{url!r} is not icechunk://PATH[@BRANCH] or icechunk+s3://BUCKET/PREFIX[@BRANCH]")
    return scheme, location, ref


def _storage(scheme: str, location: str) -> Any:
    ic = require()
    if scheme == "icechunk://":
        return _local_storage(ic, os.path.abspath(os.path.expanduser(location)))
    bucket, _, prefix = location.partition("/")
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return ic.s3_storage(bucket=bucket, prefix=prefix or None, region=region, endpoint_url=endpoint,
                         allow_http=bool(endpoint and endpoint.startswith("http://")), from_env=True,
                         force_path_style=bool(endpoint))


def open_ref(dst: str | Repository, what: str = "dst") -> IcechunkRef:
    """The repository and branch (or snapshot) of an ``icechunk://…`` URL or an ``icechunk.Repository``
    (its ``main`` branch). RepositoryNotFoundError (one line naming it) when the repository or the
    branch does not exist; nothing is created."""
    ic = require()
    if not isinstance(dst, str):
        return IcechunkRef(dst, "main", None, f"{_repo_text(dst)}@main")
    scheme, location, ref = parse_url(dst)
    repo_text = f"{scheme}{location}"
    # icechunk 1.1 makes the directory of a local storage it is asked about: not there, not asked
    missing = scheme == "icechunk://" and not os.path.isdir(os.path.expanduser(location))
    storage = None if missing else _storage(scheme, location)
    if missing or not ic.Repository.exists(storage):
        raise RepositoryNotFoundError(f"{what}: no Icechunk repository at {repo_text}; create one first "
                                      "(icechunk.Repository.create), zopt does not")
    repo = ic.Repository.open(storage)
    if ref is not None and ref.startswith("snapshot:"):
        return IcechunkRef(repo, None, ref.removeprefix("snapshot:"), dst)
    branch = ref or "main"
    lookup_branch(repo, branch, f"{repo_text}@{branch}", what)
    return IcechunkRef(repo, branch, None, f"{repo_text}@{branch}")


def _repo_text(repo: Repository) -> str:
    return f"icechunk repository {repo.storage!r}".replace("\n", " ")


def lookup_branch(repo: Repository, branch: str, text: str, what: str = "dst") -> str:
    """The tip snapshot id of ``branch``; RepositoryNotFoundError naming it and the branches there."""
    ic = require()
    if branch not in repo.list_branches():
        raise RepositoryNotFoundError(f"{what}: {text}: no branch {branch!r} in the repository "
                                      f"(it has {sorted(repo.list_branches())})")
    try:
        return repo.lookup_branch(branch)
    except (ic.IcechunkError, KeyError) as exc:  # deleted in between
        raise RepositoryNotFoundError(f"{what}: {text}: no branch {branch!r} in the repository") from exc


def readonly_store(dst: str | Repository, what: str = "dst") -> tuple[Any, str]:
    """``(read-only IcechunkStore, text)`` of an ``icechunk://…`` URL or a Repository (a branch's tip or a snapshot).
    (The store is typed Any: callers put it where they held the URL.)"""
    ref = open_ref(dst, what)
    if ref.snapshot is not None:
        return ref.repo.readonly_session(snapshot_id=ref.snapshot).store, ref.text
    return ref.repo.readonly_session(branch=ref.branch).store, ref.text


def commit_wave(session: Session, message: str, metadata: dict[str, Any], amend: bool) -> str:
    """Commit ``session`` with ``metadata``; ``amend``: replace the branch's last commit (the job's
    own) where icechunk can (2.x), else add a commit (1.1). Returns the snapshot id."""
    if amend and hasattr(session, "amend"):
        return session.amend(message, metadata=metadata, allow_empty=True)
    if version() >= (2, 0):
        return session.commit(message, metadata=metadata, allow_empty=True)  # type: ignore[call-arg,unused-ignore]  # icechunk 2.x's keyword; 1.1's stubs lack it
    if not session.has_uncommitted_changes:  # 1.1 refuses an empty commit: the wave wrote only fill chunks
        return session.snapshot_id
    return session.commit(message, metadata=metadata)


def fresh_fork(fork: object) -> Any:
    """A copy of a ``ForkSession`` that nothing has written to (a task's own; merged on the client)."""
    return pickle.loads(pickle.dumps(fork))
