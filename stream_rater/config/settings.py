"""Service configuration: environment variables with the ``STREAM_RATER_`` prefix, each
mirrored by a CLI flag (flags win). Every field documents itself in ``metadata["help"]``,
which the CLI's ``--help`` and the README's configuration table show.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from stream_rater.contracts import Limits

ENV_PREFIX = "STREAM_RATER_"

#: Rating changes Redis keeps per player where there is no archive (`Settings.redis_history`).
DEFAULT_HISTORY = 2
#: The archive's Kafka consumer group (``stream-rater archive --group``), its own beside the
#: workers' `Settings.consumer_group`.
ARCHIVE_GROUP = "stream-rater-archive"

#: The values of ``on_store_loss``: hold a lost ladder for the operator, or rebuild it.
ON_STORE_LOSS = ("halt", "rebuild")
#: The values of ``api_auth``: authentication where it is configured, or none on purpose.
API_AUTH = ("auto", "none")
#: The values of ``checkpoint_sink`` (a PostgreSQL sink would be one more: `CheckpointSink`).
CHECKPOINT_SINKS = ("kafka", "none")


def _field(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


def _secret(help: str) -> Any:
    """A secret setting: also read from the file ``STREAM_RATER_<NAME>_FILE`` names (or
    ``--<name>-file``), the convention of Kubernetes and Docker secrets; never in a repr."""
    return field(default="", repr=False, metadata={"help": help, "secret": True})


@dataclass(frozen=True)
class Settings:
    """Everything a worker or CLI command needs to know about its environment.

    ``broker``/``redis_url`` empty means "not configured": `dev` and `demo` then start the
    embedded local runtime.
    """

    broker: str = _field(
        "", "Kafka bootstrap URL, e.g. kafka://host:9092 (empty: embedded runtime for dev/demo)"
    )
    redis_url: str = _field(
        "",
        "Redis URL, e.g. redis://host:6379/0, rediss:// for TLS, "
        "redis+cluster://host:port[,host:port…] for a Redis Cluster (empty: embedded)",
    )
    redis_password: str = _secret("password of the Redis ACL user (the URL's, if it has one, wins)")
    redis_tls_ca_file: str = _field("", "CA bundle that signed Redis's certificate (rediss:// URLs)")
    redis_tls_cert_file: str = _field(
        "", "client certificate (PEM) presented to a Redis that asks for one (tls-auth-clients)"
    )
    redis_tls_key_file: str = _field("", "private key (PEM) of the Redis client certificate")
    redis_tls_key_password: str = _secret("password of the Redis client certificate's private key")
    redis_socket_timeout: float = _field(
        10.0,
        "seconds a Redis command may wait for its reply before the connection is given up and the "
        "batch retried (ends the wait of a network partition; 0 = forever)",
    )
    redis_connect_timeout: float = _field(5.0, "seconds a connection to Redis may take to open (0 = forever)")
    redis_health_check_interval: float = _field(
        10.0,
        "seconds a Redis connection may stay idle before it is checked with a PING on its next use (0 = never)",
    )
    redis_prefix: str = _field(
        "sr",
        "first part of every Redis key, so that deployments sharing one Redis each use their own "
        "(letters, digits, _ - .); the store is bound to one matches topic",
    )
    archive_url: str = _field(
        "",
        "PostgreSQL URL of the archive, e.g. postgresql://user@host:5432/db: stream-rater archive writes it; "
        "history and explain read beyond Redis's window from it (empty: no archive)",
    )
    web_port: int = _field(6066, "port of the worker's web server (metrics, health, dashboard)")
    web_host: str = _field(
        "127.0.0.1",
        "address the web server binds to; another than loopback needs authentication (API tokens or "
        "JWKS) or api_auth=none",
    )
    api_auth: str = _field(
        "auto",
        "auto: the API and dashboard ask for a token or JWT when a tokens file or JWKS is configured, and "
        "may only be open on loopback; none: open to anyone who reaches the port, on any address",
    )
    api_tokens_file: str = _field(
        "",
        "file of API tokens (one line each, as `stream-rater token new` prints: name, SHA-256 of the token, "
        "scopes, rate); reloaded when it changes",
    )
    api_jwks: str = _field(
        "",
        "JWKS of the identity provider: a file path or an https URL (cached; fetched again on an unknown kid)",
    )
    api_issuer: str = _field("", "the JWTs' required iss")
    api_audience: str = _field("", "the JWTs' required aud")
    api_jwt_algorithms: str = _field(
        "RS256,RS384,RS512,PS256,PS384,PS512,ES256,ES384,ES512,EdDSA",
        "JWT signature algorithms accepted (asymmetric only: none and HS* are always refused)",
    )
    api_jwks_refresh: float = _field(
        10.0, "fewest seconds between two fetches of the JWKS URL for a token of an unknown kid"
    )
    api_jwt_leeway: float = _field(30.0, "seconds of clock skew allowed on a JWT's exp and nbf")
    api_oidc_authorize_url: str = _field(
        "",
        "the identity provider's authorization endpoint: the dashboard then offers to sign in there "
        "(authorization code flow with PKCE; redirect URI <scheme>://<host>/auth/callback)",
    )
    api_oidc_token_url: str = _field(
        "", "the identity provider's token endpoint, for the dashboard's sign-in"
    )
    api_oidc_client_id: str = _field("", "the dashboard's client id at the identity provider")
    api_oidc_client_secret: str = _secret(
        "the dashboard's client secret at the identity provider (none: a public client, PKCE alone)"
    )
    api_oidc_scope: str = _field(
        "openid dashboard", "scopes the dashboard's sign-in asks the identity provider for"
    )
    api_rate: float = _field(
        20.0, "requests per second one token or JWT subject may make, per process (a token's own rate wins)"
    )
    api_burst: int = _field(40, "requests one token or JWT subject may make at once above its rate")
    api_metrics_networks: str = _field(
        "", "networks that may scrape /metrics without a credential, e.g. 10.0.0.0/8,127.0.0.1/32"
    )
    ladders_file: str = _field("", "TOML file of ladders (model and parameters per ladder)")
    topic_matches: str = _field("matches", "topic of match-finished events (in)")
    topic_updates: str = _field("rating-updates", "topic of rating-changed events (out)")
    topic_dlq: str = _field("matches-dlq", "dead-letter topic for invalid events")
    topic_corrections: str = _field(
        "rating-corrections", "topic of correction requests (void, unvoid, rerate) the workers carry out"
    )
    partitions: int = _field(8, "partition count used when the worker creates missing topics")
    replication_factor: int = _field(1, "replication factor used when the worker creates missing topics")
    batch_size: int = _field(500, "largest batch of matches processed together")
    batch_seconds: float = _field(
        0.05,
        "longest wait to fill a batch while the one before is committed, in seconds (an idle worker does not wait)",
    )
    consumer_group: str = _field("stream-rater", "Kafka consumer group of the workers")
    session_timeout: float = _field(10.0, "Kafka consumer-group session timeout, in seconds")
    stop_timeout: float = _field(
        30.0,
        "seconds a worker told to stop (SIGTERM/SIGINT) may take to finish the batches in hand "
        "before it exits anyway, non-zero (what it had not committed is redelivered)",
    )
    stall_after: float = _field(
        60.0,
        "seconds a partition assigned here may have records waiting with none applied before the worker "
        "logs a warning and /readyz answers 503 (0 = never)",
    )
    #: Kafka's own default (``fetch.max.wait.ms``). Apache Kafka answers a held fetch as soon as
    #: a record arrives, so this bounds only the fetches that find nothing: each costs the worker
    #: and the broker CPU (10 ms made an idle worker use 15 % of a core and its broker 26 %).
    fetch_max_wait: float = _field(
        0.5,
        "longest time the broker may hold a fetch that found no new records, in seconds "
        "(Apache Kafka answers as soon as one arrives; Tansu holds the fetch this long)",
    )
    #: faust's Kafka consumer runs in a thread of its own: each fetched batch crosses to the
    #: agent's thread and back, and a thread that wants the GIL waits for the one holding it
    #: up to this long (Python's ``sys.setswitchinterval``, 5 ms by default).
    switch_interval: float = _field(
        0.001,
        "longest time, in seconds, the worker's computing thread keeps the GIL while its Kafka consumer "
        "thread waits for it with a fetched batch (Python's switch interval), non-zero",
    )
    #: One hour: a redelivery by Kafka is recognised by the ladder's stored positions, whatever
    #: the markers; a marker only has to catch a producer sending a match again as a new record,
    #: which happens within its retries (``delivery.timeout.ms``, 2 minutes by default) or an
    #: application's retry (minutes). Longer costs memory per match (bench README "Capacity").
    marker_ttl: float = _field(
        3600.0,
        "seconds a 'match applied' marker is kept, the window within which a match a producer sends again "
        "(as a new record) is recognised (0 = forever); Kafka redeliveries are recognised by the stored "
        "positions, whatever this window",
    )
    #: Redis keeps the present (design "The present and the past"): without an archive, a
    #: player's last two changes — enough to explain a match within the marker window and to show
    #: recent form, at about 125 bytes a change per player (1.25 GB per ten million players per
    #: change kept; bench README "Capacity"); with an archive, none: the archive answers history
    #: and explain, and a ten-million-player ladder keeps within 4 GB.
    history_limit: int = _field(
        -1,
        "rating changes Redis keeps per player (-1: 2 without an archive, none with one, whose "
        "database then answers history and explain)",
    )
    known_states: int = _field(
        200_000,
        "rating states a worker holds between batches, so that a batch reads from Redis only the players "
        "it does not hold, and leaderboard scores its Redis store's commits left, so that a commit does "
        "not ask Redis for them (0: none; about 250 and 200 bytes each)",
    )
    max_query_players: int = _field(
        100, "most players one read-API query (players, predict, balance) may name"
    )
    max_event_bytes: int = _field(64 * 1024, "largest accepted match-finished event, in bytes")
    max_clock_skew: float = _field(
        300.0,
        "seconds a match's finished_at may lie after its record's Kafka timestamp (the broker's clock); "
        "a later one is dead-lettered, and replay --from-topic and verify skip it alike (0 = no check)",
    )
    inflation_interval: float = _field(
        300.0,
        "seconds between two checks of a ladder's rating totals (read in O(1) at every scrape) against an "
        "exact recount, by the worker holding its home partition, which also trims players gone idle off "
        "its leaderboard (the recount reads the whole leaderboard in steps: about a second of Redis time "
        "per million ranked players; 0 = every scrape)",
    )
    kafka_security_protocol: str = _field("PLAINTEXT", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    kafka_sasl_mechanism: str = _field("", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    kafka_sasl_username: str = _field("", "SASL user name")
    kafka_sasl_password: str = _secret("SASL password")
    kafka_ssl_cafile: str = _field("", "CA bundle for SSL/SASL_SSL")
    log_level: str = _field("info", "debug, info, warning or error")
    topic_checkpoints: str = _field(
        "ladder-checkpoints",
        "compacted topic of ladder checkpoints (states + the offsets they stand for) that voids, "
        "verify and store-loss recovery start from",
    )
    checkpoint_sink: str = _field(
        "kafka",
        "where ladder checkpoints are kept and read: kafka (the checkpoints topic) or none (voids "
        "and recoveries replay from the topic's start)",
    )
    checkpoint_every_matches: int = _field(
        100_000,
        "a ladder is checkpointed once this many of its matches were applied since its last checkpoint "
        "(a void then replays at most this many matches more than those after the voided one)",
    )
    checkpoint_every_hours: float = _field(
        6.0, "a ladder with new matches is checkpointed at least this often, in hours"
    )
    correction_window_hours: float = _field(
        7 * 24.0, "how far back a void must be possible, in hours (with the cadence: the matches retention)"
    )
    matches_retention_hours: float = _field(
        0.0,
        "retention of the matches topic it is created with, in hours (0: the correction window plus "
        "the checkpoint cadence; -1: forever, as before checkpoints)",
    )
    on_store_loss: str = _field(
        "halt",
        "what a worker does with a ladder the store lost: halt (hold it until an operator rebuilds it) "
        "or rebuild (rebuild it from the matches topic by itself, if the topic still holds its whole history)",
    )

    def __post_init__(self) -> None:
        if self.checkpoint_sink not in CHECKPOINT_SINKS:
            raise ValueError(
                f"{env_name('checkpoint_sink')} (--checkpoint-sink) = {self.checkpoint_sink!r}: "
                f"expected {' or '.join(CHECKPOINT_SINKS)}"
            )
        if self.api_auth not in API_AUTH:
            raise ValueError(
                f"{env_name('api_auth')} (--api-auth) = {self.api_auth!r}: expected {' or '.join(API_AUTH)}"
            )
        if self.switch_interval <= 0:
            raise ValueError(
                f"{env_name('switch_interval')} (--switch-interval) = {self.switch_interval!r}: expected a "
                "positive number of seconds"
            )
        if self.on_store_loss not in ON_STORE_LOSS:
            raise ValueError(
                f"{env_name('on_store_loss')} (--on-store-loss) = {self.on_store_loss!r}: "
                f"expected {' or '.join(ON_STORE_LOSS)}"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``STREAM_RATER_<FIELD>`` variables; unset ones keep their defaults."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = environ.get(env_name(f.name))
            secret_file = environ.get(env_name(f.name) + "_FILE") if f.metadata.get("secret") else None
            if secret_file:
                if raw:
                    raise ValueError(f"{env_name(f.name)} and {env_name(f.name)}_FILE: set one, not both")
                raw = read_secret(secret_file, env_name(f.name) + "_FILE")
            if raw is not None and raw != "":
                values[f.name] = _convert(f.name, raw, type(f.default))
        return cls(**values)

    def redis_history(self) -> int:
        """The rating changes Redis keeps per player: `history_limit`, or where it is -1
        `DEFAULT_HISTORY` without an archive and none with one."""
        if self.history_limit >= 0:
            return self.history_limit
        return 0 if self.archive_url else DEFAULT_HISTORY

    def topics(self) -> dict[str, int]:
        """The service's topics and their partition counts, as the worker creates them; the
        corrections topic has one partition: its requests are carried out one at a time."""
        return {
            self.topic_matches: self.partitions,
            self.topic_updates: self.partitions,
            self.topic_dlq: self.partitions,
            self.topic_corrections: 1,
        }

    def topic_configs(self) -> dict[str, dict[str, str]]:
        """The topic configurations `topics` are created with: the matches topic is the source
        of truth, kept for the correction window plus the checkpoint cadence (voids and
        recoveries start from a checkpoint: `matches_retention_ms`), and its records carry the broker's append time (``LogAppendTime``), not a producer's
        clock, for the ``max_clock_skew`` check; the others keep the broker's defaults."""
        return {
            self.topic_matches: {
                "retention.ms": str(self.matches_retention_ms()),
                "message.timestamp.type": "LogAppendTime",
            }
        }

    def matches_retention_ms(self) -> int:
        """The matches topic's ``retention.ms``: `matches_retention_hours`, by default the
        correction window plus the checkpoint cadence (a void of the window's oldest match
        starts from the checkpoint before it, at most a cadence older); -1 keeps it forever."""
        hours = self.matches_retention_hours
        if hours < 0:
            return -1
        if hours == 0:
            hours = self.correction_window_hours + self.checkpoint_every_hours
        return int(hours * 3600 * 1000)

    def limits(self) -> Limits:
        """The limits every reader of the matches topic validates its records with (the worker,
        ``replay --from-topic``, ``verify``, re-rates), so that they decide alike."""
        return Limits(max_event_bytes=self.max_event_bytes, max_clock_skew=self.max_clock_skew)

    def override(self, **flags: Any) -> Settings:
        """A copy with the CLI flags that were given (None = not given)."""
        return replace(self, **{k: v for k, v in flags.items() if v is not None})


def env_name(field_name: str) -> str:
    """The environment variable for a settings field, e.g. ``STREAM_RATER_REDIS_URL``."""
    return ENV_PREFIX + field_name.upper()


def secret_names() -> list[str]:
    """The `Settings` fields that are secrets (`_secret`)."""
    return [f.name for f in fields(Settings) if f.metadata.get("secret")]


def read_secret(path: str, where: str) -> str:
    """The secret in the file at `path` without its trailing line end; `where` names the
    setting in the one-line error of a file that cannot be read."""
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().rstrip("\r\n")
    except OSError as exc:
        raise ValueError(f"{where}={path}: {exc.strerror or exc}") from None


def _convert(name: str, raw: str, kind: type) -> Any:
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{env_name(name)}={raw!r}: expected {kind.__name__}") from None
