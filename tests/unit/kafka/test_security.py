"""Pure helpers of the Kafka clients."""

import pytest

from stream_rater.config.settings import Settings
from stream_rater.kafka import bootstrap_servers, client_options, group_options


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("kafka://127.0.0.1:9092", "127.0.0.1:9092"),
        ("127.0.0.1:9092", "127.0.0.1:9092"),
        ("kafka://a:1;kafka://b:2", "a:1,b:2"),
        ("a:1, b:2", "a:1,b:2"),
    ],
)
def test_bootstrap_servers(url: str, expected: str) -> None:
    """Faust broker URLs and bootstrap lists both normalise to a comma-separated host:port list."""
    assert bootstrap_servers(url) == expected


def test_sasl_settings_become_aiokafka_options() -> None:
    """SASL_SSL settings are passed through to the Kafka clients with a TLS context."""
    options = client_options(
        Settings(
            broker="kafka://k:9093",
            kafka_security_protocol="sasl_ssl",
            kafka_sasl_mechanism="SCRAM-SHA-512",
            kafka_sasl_username="u",
            kafka_sasl_password="p",
        )
    )
    assert options["security_protocol"] == "SASL_SSL"
    assert (options["sasl_mechanism"], options["sasl_plain_username"], options["sasl_plain_password"]) == (
        "SCRAM-SHA-512",
        "u",
        "p",
    )
    assert options["ssl_context"] is not None


@pytest.mark.parametrize(
    ("session_timeout", "session_ms", "heartbeat_ms"),
    [(10.0, 10_000, 3_000), (45.0, 45_000, 3_000), (3.0, 3_000, 1_000), (0.002, 2, 1)],
)
def test_a_group_member_keeps_the_configured_session_and_heartbeats_a_third_of_it(
    session_timeout: float, session_ms: int, heartbeat_ms: int
) -> None:
    """Heartbeats a third of the session timeout apart, at most Kafka's default 3 s, never 0."""
    options = group_options(Settings(session_timeout=session_timeout))
    assert options == {"session_timeout_ms": session_ms, "heartbeat_interval_ms": heartbeat_ms}
