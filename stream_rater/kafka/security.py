"""Where the brokers are and how to reach them: bootstrap addresses and the aiokafka security
options (TLS, SASL) built from the ``STREAM_RATER_KAFKA_*`` settings, and the timing every
consumer group member of the service keeps."""

from __future__ import annotations

import ssl
from typing import Any

from stream_rater.config.settings import Settings


def bootstrap_servers(url: str) -> str:
    """A faust broker URL (``kafka://h:p``, ``;``/``,``-separated) as ``h:p,h2:p2``."""
    hosts = []
    for part in url.replace(";", ",").split(","):
        part = part.strip()
        if "://" in part:
            part = part.split("://", 1)[1]
        if part:
            hosts.append(part.rstrip("/"))
    if not hosts:
        raise ValueError(f"no broker address in {url!r}")
    return ",".join(hosts)


def client_options(settings: Settings) -> dict[str, Any]:
    """aiokafka keyword arguments for the configured broker and security settings."""
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers(settings.broker),
        "security_protocol": settings.kafka_security_protocol.upper(),
    }
    if options["security_protocol"] in ("SSL", "SASL_SSL"):
        options["ssl_context"] = ssl.create_default_context(cafile=settings.kafka_ssl_cafile or None)
    if options["security_protocol"].startswith("SASL"):
        options.update(
            sasl_mechanism=settings.kafka_sasl_mechanism or "PLAIN",
            sasl_plain_username=settings.kafka_sasl_username,
            sasl_plain_password=settings.kafka_sasl_password,
        )
    return options


def group_options(settings: Settings) -> dict[str, int]:
    """aiokafka keyword arguments for a member of one of the service's consumer groups: the
    configured session timeout, heartbeats a third of it apart (at most Kafka's default 3 s).
    Every group (the matches', the corrections', the archiver's) moves a dead member's
    partitions within the same time."""
    session_ms = int(settings.session_timeout * 1000)
    return {"session_timeout_ms": session_ms, "heartbeat_interval_ms": max(1, min(3000, session_ms // 3))}
