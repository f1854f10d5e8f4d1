"""A real S3 API for the object-store lake tests: moto's server on a free local port, a fresh
bucket per test and the standard AWS_* variables pointing at it (imported as fixtures:
``from tests.helpers.s3 import bucket, s3_endpoint``)."""

from __future__ import annotations

import hashlib
import logging
import socket

import pytest

from pipeline.core import remote

KEY, SECRET, REGION = "testing-key", "testing-secret", "us-east-1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint():
    moto_server = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_endpoint, monkeypatch, request) -> tuple[str, object]:
    """A fresh bucket on the moto server, the AWS_* environment pointing at it, and a
    pyarrow filesystem on it for the test's own looks."""
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http", access_key=KEY,
                           secret_key=SECRET, region=REGION, allow_bucket_creation=True)
    name = "lake-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:12]
    fs.create_dir(name)
    for var, value in (("AWS_ACCESS_KEY_ID", KEY), ("AWS_SECRET_ACCESS_KEY", SECRET),
                       ("AWS_REGION", REGION), ("AWS_ENDPOINT_URL", f"http://{s3_endpoint}")):
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(remote, "LEASE_SETTLE_S", 0.01)
    return name, fs
