"""Pure helpers of the Kafka clients."""

import pytest

from stream_rater.config.settings import Settings
from stream_rater.kafka import bootstrap_servers, client_options


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
