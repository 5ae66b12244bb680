"""Redis over TLS for the tests: certificates made here (`trustme`: a throwaway CA, a server
certificate for 127.0.0.1 and a client certificate whose key is encrypted with a password), and
``redis-server`` children (single, or a Redis Cluster of three masters) that listen on TLS only,
ask every client for a certificate signed by the CA (``--tls-auth-clients yes``) and are stopped
by PID."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization

from stream_rater.local.demo import stop_process
from stream_rater.local.processes import free_cluster_port, free_port, wait_for_port
from tests.helpers import wait_for

REDIS_SERVER = "/usr/bin/redis-server"
REDIS_CLI = "/usr/bin/redis-cli"
#: The Redis ACL of deploy/README.md "Who may read" for the worker and the commands (`rater`).
RATER_ACL = (
    "resetchannels ~sr:* -@all +@read +@write +@scripting +@transaction +@connection +@keyspace -@dangerous "
    "+cluster|slots +cluster|shards +cluster|nodes"
)


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of a test's CA, server and client, and the secrets' files."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path  # encrypted with `key_password`
    plain_client_key: Path  # the same key unencrypted (redis-py's cluster client takes no password)
    key_password: str
    redis_password: str
    dir: Path

    def secret_file(self, name: str, value: str) -> Path:
        """`value` in the file `name` (as a mounted secret, with a final line end)."""
        path = self.dir / name
        path.write_text(value + "\n")
        path.chmod(0o600)
        return path

    def client_env(self, *, cluster: bool = False) -> dict[str, str]:
        """A client's variables: CA, certificate, key, and for a single Redis its password and
        key password from files (``…_FILE``)."""
        env = {
            "STREAM_RATER_REDIS_TLS_CA_FILE": str(self.ca),
            "STREAM_RATER_REDIS_TLS_CERT_FILE": str(self.client_cert),
        }
        if cluster:
            return {**env, "STREAM_RATER_REDIS_TLS_KEY_FILE": str(self.plain_client_key)}
        return {
            **env,
            "STREAM_RATER_REDIS_TLS_KEY_FILE": str(self.client_key),
            "STREAM_RATER_REDIS_TLS_KEY_PASSWORD_FILE": str(
                self.secret_file("key-password", self.key_password)
            ),
            "STREAM_RATER_REDIS_PASSWORD_FILE": str(self.secret_file("redis-password", self.redis_password)),
        }

    def cli_tls(self) -> list[str]:
        """redis-cli's TLS flags (with the unencrypted key)."""
        return [
            "--tls",
            "--cacert",
            str(self.ca),
            "--cert",
            str(self.client_cert),
            "--key",
            str(self.plain_client_key),
        ]


def make_tls_files(directory: Path) -> TlsFiles:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, as files."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("stream-rater-client")
    key_password = "kp-" + trustme.__name__ + "-7d1f2a"  # a value no log should hold
    files = {
        "ca.pem": ca.cert_pem.bytes(),
        "server.pem": server.cert_chain_pems[0].bytes(),
        "server.key": server.private_key_pem.bytes(),
        "client.pem": client.cert_chain_pems[0].bytes(),
        "client-plain.key": client.private_key_pem.bytes(),
        "client.key": _encrypted(client.private_key_pem.bytes(), key_password),
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return TlsFiles(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server.key",
        directory / "client.pem",
        directory / "client.key",
        directory / "client-plain.key",
        key_password,
        "rp-9c41e0b7f3a8",
        directory,
    )


def _encrypted(pem: bytes, password: str) -> bytes:
    key = serialization.load_pem_private_key(pem, password=None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password.encode()),
    )


def _server_argv(tls: TlsFiles, port: int, workdir: Path) -> list[str]:
    return [
        REDIS_SERVER,
        *("--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1"),
        *("--tls-cert-file", str(tls.server_cert), "--tls-key-file", str(tls.server_key)),
        *("--tls-ca-cert-file", str(tls.ca), "--tls-auth-clients", "yes"),
        *("--save", "", "--appendonly", "no", "--dir", str(workdir)),
    ]


@contextlib.contextmanager
def tls_redis(tls: TlsFiles, workdir: Path) -> Iterator[str]:
    """A TLS-only redis-server whose only user is ``rater`` with `RATER_ACL` and the password
    `tls.redis_password`; its ``rediss://`` URL (with the user, without the password)."""
    port = free_port()
    users = [
        "--user",
        "default",
        "off",
        "--user",
        "rater",
        "on",
        f">{tls.redis_password}",
        *RATER_ACL.split(),
    ]
    process = subprocess.Popen(
        [*_server_argv(tls, port, workdir), *users],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port("127.0.0.1", port, 10, alive=lambda: process.poll() is None)
        yield f"rediss://rater@127.0.0.1:{port}/0"
    finally:
        stop_process(process)


@contextlib.contextmanager
def tls_redis_cluster(tls: TlsFiles, workdir: Path, masters: int = 3) -> Iterator[str]:
    """A Redis Cluster of `masters` TLS-only nodes (cluster bus on TLS too); its
    ``rediss+cluster://`` URL."""
    ports = [free_cluster_port() for _ in range(masters)]
    processes = []
    try:
        for port in ports:
            node_dir = workdir / f"node-{port}"
            node_dir.mkdir()
            argv = [*_server_argv(tls, port, node_dir), "--cluster-enabled", "yes", "--tls-cluster", "yes"]
            processes.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port, process in zip(ports, processes):
            wait_for_port("127.0.0.1", port, 10, alive=lambda p=process: p.poll() is None)
        nodes = [f"127.0.0.1:{port}" for port in ports]
        create = [REDIS_CLI, *tls.cli_tls(), "--cluster", "create", *nodes, "--cluster-yes"]
        done = subprocess.run(create, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stdout + done.stderr

        def ok() -> bool:
            return all(
                "cluster_state:ok"
                in subprocess.run(
                    [REDIS_CLI, *tls.cli_tls(), "-p", str(port), "cluster", "info"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout
                for port in ports
            )

        wait_for(ok, "the TLS cluster's state ok", 60)
        yield "rediss+cluster://" + ",".join(nodes)
    finally:
        for process in processes:
            stop_process(process)
