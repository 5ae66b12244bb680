"""Kafka plumbing shared by the service, the corrections, the offline tools, the local runtime
and the benches: plain aiokafka clients, no faust.

- `security` — bootstrap addresses, TLS/SASL client options and group members' timing from
  the settings;
- `admin` — create topics, list partitions, a consumer group's committed offsets;
- `produce` — keyed, batched producing (`send_batched`, `send_records`); `publish` match
  events; rating-changed records; correction requests;
- `log` — read a topic back in log order (`LogReader`, `read_log`); `subscribe` to updates;
- `history` — one ladder's matches among records read back from the matches topic, decoded
  and validated as a worker does (`ladder_history`): the history `verify` and re-rates use;
- `retention` — whether the matches topic still holds a ladder's whole history
  (`deleted_heads`), and the refusal when it does not (`HistoryTruncated`).
"""

from stream_rater.kafka.admin import (
    TopicError,
    committed_offsets,
    create_service_topics,
    create_topics,
    partition_count,
    topic_partitions,
)
from stream_rater.kafka.history import LadderHistory, ladder_history
from stream_rater.kafka.log import ISOLATION_LEVEL, LogReader, LogRecord, read_log, read_partition, subscribe
from stream_rater.kafka.produce import (
    PUBLISH_LINGER,
    PublishSummary,
    Record,
    home_partition,
    match_record,
    publish,
    send_batched,
    send_records,
    send_request,
    update_record,
    update_sender,
)
from stream_rater.kafka.retention import DeletedHead, HistoryTruncated, deleted_heads, refuse_truncated
from stream_rater.kafka.security import bootstrap_servers, client_options, group_options

__all__ = [
    "DeletedHead",
    "HistoryTruncated",
    "ISOLATION_LEVEL",
    "LadderHistory",
    "LogReader",
    "LogRecord",
    "PUBLISH_LINGER",
    "PublishSummary",
    "Record",
    "TopicError",
    "bootstrap_servers",
    "client_options",
    "committed_offsets",
    "create_service_topics",
    "create_topics",
    "deleted_heads",
    "group_options",
    "home_partition",
    "ladder_history",
    "match_record",
    "partition_count",
    "publish",
    "read_log",
    "read_partition",
    "refuse_truncated",
    "send_batched",
    "send_records",
    "send_request",
    "subscribe",
    "topic_partitions",
    "update_record",
    "update_sender",
]
