"""The local Apache Kafka's cluster ids: valid for its storage tool."""

from __future__ import annotations

import uuid
from unittest.mock import patch

from stream_rater.local.apache_kafka import _cluster_id


def test_a_cluster_id_never_starts_with_a_dash():
    """An id whose base64 starts with '-' (first byte 0xF8) would be read as an option by
    ``kafka-storage format -t``; another is drawn instead, as Kafka's own ``Uuid`` does."""
    dashed, plain = uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=bytes(16))
    with patch("stream_rater.local.apache_kafka.uuid.uuid4", side_effect=[dashed, plain]):
        assert _cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"
    assert all(not _cluster_id().startswith("-") for _ in range(500))
