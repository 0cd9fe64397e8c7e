"""A real S3-compatible server for the tests: moto's server mode (`moto[server]`) as a subprocess on 127.0.0.1.

moto answers S3's REST API over HTTP (path-style), keeps its objects in the server process's memory and accepts any
credentials; Hadoop's s3a client talks to it as to AWS. `S3Server` starts it on a free port and stops it; its
`hadoop_conf()` is the s3a configuration a pipeframe.yaml needs for it, and `client()` a boto3 client to look at
the bucket from the test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

from pipeframe.engine.localserver import free_port

ACCESS_KEY = "pipeframe-test"  # moto accepts any keys; these only have to be the same on both sides
SECRET_KEY = "pipeframe-test-secret"
REGION = "us-east-1"



class S3Server:
    """`with S3Server(log) as s3:` runs `python -m moto.server -H 127.0.0.1 -p <free port>` until the block ends."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.port = 0
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        for _ in range(3):  # a port taken between free_port() and the server's bind: try another
            self.port = free_port()
            with open(self.log, "ab") as out:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                    env={**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY})
            if self._wait_ready():
                return self
            self.stop()
        raise RuntimeError(f"moto's S3 server did not start; its output is in {self.log}")

    def _wait_ready(self) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # its own session: the server and nothing else
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY)

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key in `bucket` under `prefix`."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def hadoop_conf(self) -> dict[str, str]:
        """The s3a settings (as `spark.hadoop.*` keys) that point Hadoop at this server."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.access.key": ACCESS_KEY,
            "spark.hadoop.fs.s3a.secret.key": SECRET_KEY,
            "spark.hadoop.fs.s3a.aws.credentials.provider":
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        }
