"""An S3 API for the lake's and the views' tests: moto's server (from PyPI) started per test module
on 127.0.0.1, with one bucket, and the settings that put a warehouse (Iceberg's S3FileIO) or a
checkpoint (Hadoop's S3A) there as a deployment would on S3: the credentials from ``${VAR}`` and
``file:``, path-style addressing.

Port: runtime.base_port - 3 (the session's PostgreSQL takes - 2, Redis - 1)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

BUCKET = "conveyor-lake"
REGION = "us-east-1"
#: moto takes any credentials; the tests give these through the variable and the file below.
ACCESS_KEY, SECRET_KEY = "conveyor-test-key", "conveyor-test-secret"
KEY_VARIABLE = "CONVEYOR_TEST_S3_ACCESS_KEY"


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    secret_file: Path

    def warehouse(self, folder: str) -> str:
        return f"s3://{BUCKET}/{folder}"

    def catalog_options(self) -> dict[str, str]:
        """pipeline.catalog.options for a warehouse on this server."""
        return {"io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "s3.endpoint": self.endpoint,
                "s3.path-style-access": "true", "client.region": REGION,
                "s3.access-key-id": f"${{{KEY_VARIABLE}}}", "s3.secret-access-key": f"file:{self.secret_file}"}

    def s3a_conf(self) -> dict[str, str]:
        """pipeline.spark.conf for Hadoop's S3A on this server (the views' checkpoint), secrets as the
        catalog's are given."""
        return {"spark.hadoop.fs.s3a.endpoint": self.endpoint, "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.endpoint.region": REGION,
                "spark.hadoop.fs.s3a.access.key": f"${{{KEY_VARIABLE}}}",
                "spark.hadoop.fs.s3a.secret.key": f"file:{self.secret_file}"}

    def reader_properties(self) -> dict[str, str]:
        """pyiceberg's file system settings for a warehouse on this server (tests.lakekit.sql_catalog)."""
        return {"s3.endpoint": self.endpoint, "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY,
                "s3.region": REGION}

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY)

    def keys(self, prefix: str) -> list[str]:
        """Every object's key under ``prefix`` of the bucket."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]


@pytest.fixture(scope="module")
def s3_server(platform_data: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """The server for one test module."""
    port = platform_data["runtime"]["base_port"] - 3
    folder = tmp_path_factory.mktemp("s3")
    secret_file = folder / "secret-key"
    secret_file.write_text(SECRET_KEY)
    log = (folder / "moto.log").open("ab")
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=log, stderr=log)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, f"moto's server exited: {(folder / 'moto.log').read_text()[-2000:]}"
            try:
                httpx.get(f"{endpoint}/moto-api/", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "moto's server did not answer within 60 s"
                time.sleep(0.2)
        s3 = S3Server(endpoint, secret_file)
        s3.client().create_bucket(Bucket=BUCKET)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(KEY_VARIABLE, ACCESS_KEY)
            yield s3
    finally:
        server.terminate()
        server.wait(30)
        log.close()
