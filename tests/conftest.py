"""Shared test helpers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# The tests are laid out like the code (tests/codecs, tests/store, tests/job, ...); a few import a
# helper of another folder's test module by name (``from test_multi import write_files``).
_HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(p) for p in sorted(_HERE.iterdir()) if p.is_dir() and p.name.isidentifier() and p.name != "fixtures"
                and any(p.glob("test_*.py"))]


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run the tests marked slow (long loops; also ZOPT_RUN_SLOW=1)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long loop, skipped unless --run-slow or ZOPT_RUN_SLOW=1")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow") or os.environ.get("ZOPT_RUN_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow (or ZOPT_RUN_SLOW=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def failing_decision():
    """``make(after, message) -> (decision, calls)``: a spec-signature decision that applies every
    codec and raises RuntimeError(message) once it has been called more than ``after`` times;
    ``calls`` lists the chunk indices it saw."""

    def make(after: int, message: str):
        calls: list = []

        def decide(chunk_index, codec, unencoded_chunk):
            calls.append(chunk_index)
            if len(calls) > after:
                raise RuntimeError(message)
            return True

        return decide, calls

    return make


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3-compatible server (moto's ``ThreadedMotoServer``) on 127.0.0.1, as zarr-python's
    and s3fs' own tests use; fsspec's ``s3`` config points at it for this test session.
    Yields the endpoint URL; the server stops after the session."""
    import os
    import socket

    pytest.importorskip("s3fs")
    fsspec = pytest.importorskip("fsspec")
    server_mod = pytest.importorskip("moto.server")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved_env = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    saved_conf = fsspec.config.conf.get("s3")
    fsspec.config.conf["s3"] = {"endpoint_url": endpoint}
    try:
        yield endpoint
    finally:
        server.stop()
        if saved_conf is None:
            fsspec.config.conf.pop("s3", None)
        else:
            fsspec.config.conf["s3"] = saved_conf
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def s3_bucket(s3_endpoint, request):
    """A fresh, empty bucket on the session's S3 server; yields ``s3://NAME``."""
    import re

    import fsspec

    fs = fsspec.filesystem("s3", endpoint_url=s3_endpoint, skip_instance_cache=True)
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-") or "bucket"
    fs.mkdir(name)
    yield f"s3://{name}"
    fs.rm(name, recursive=True)


@pytest.fixture(params=["compiled", "python"])
def loops_kind(request, monkeypatch):
    """Runs a test with zopt's compiled batch loops (``zopt.compat.loops``) and again with the
    same loops in Python (as where no C compiler built them); skips the first where they are absent."""
    from zopt.compat import loops

    if request.param == "compiled" and not loops.available():
        pytest.skip("zopt's compiled loops were not built")
    if request.param == "python":
        monkeypatch.setattr(loops, "_lib", False)
    return request.param
