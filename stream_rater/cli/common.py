"""What every command shares: exit codes and the one-line failure (with why a Kafka broker
could not be reached), ``--debug``, flags that mirror `Settings` fields, the settings and
ladders a command runs with, and the store.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import fields
from typing import TYPE_CHECKING, NoReturn, TypeAlias, TypeVar

from stream_rater.config.ladders import (
    DEFAULT_LADDER,
    DEFAULT_MODEL,
    Ladder,
    Ladders,
    ParamError,
    check_params,
    load_ladders,
    parse_param,
)
from stream_rater.config.settings import Settings, env_name, read_secret, secret_names

if TYPE_CHECKING:
    from stream_rater.store import StateStore

T = TypeVar("T")

#: What ``add_subparsers`` returns; each command module's ``register`` adds its commands to it.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

EXIT_BAD_INPUT = 2
EXIT_RUNTIME = 1

#: The `Settings` fields of a TLS/SASL Kafka connection, for every command that talks to Kafka.
KAFKA_SECURITY = [
    "kafka_security_protocol",
    "kafka_sasl_mechanism",
    "kafka_sasl_username",
    "kafka_sasl_password",
    "kafka_ssl_cafile",
]

#: The `Settings` fields of the HTTP servers' authentication (`service.auth`).
API_AUTH = [f.name for f in fields(Settings) if f.name.startswith("api_")]

#: The `Settings` fields of a Redis connection's password and TLS, for every command that opens the store.
REDIS_SECURITY = [
    "redis_password",
    "redis_tls_ca_file",
    "redis_tls_cert_file",
    "redis_tls_key_file",
    "redis_tls_key_password",
]


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr, naming the command and
    the flag (argparse's own prints the whole usage block first), with exit code 2. Its
    subcommands' parsers are of this class too (`add_subparsers` makes them so)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def debug_flag(parser: argparse.ArgumentParser, *, on_command: bool = False) -> None:
    """``--debug``: before the command, or after it (``on_command``: not given there leaves the
    value given before it)."""
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS if on_command else False,
        help="show the traceback of a failure",
    )


class KafkaConnectFailures(logging.Handler):
    """Takes aiokafka's log while a command runs. aiokafka logs why it could not connect to a
    bootstrap broker (refused, TLS verification, SASL credentials) and then raises a bare
    ``Unable to bootstrap``: this keeps the last broker address and error, for `failure`."""

    def __init__(self) -> None:
        """Keep nothing yet; take records of level ERROR and above."""
        super().__init__(logging.ERROR)
        self.last: tuple[str, BaseException] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        """Keep a record's broker and error if it has them (``host, port, error`` arguments)."""
        args = record.args
        if isinstance(args, tuple) and len(args) == 3 and isinstance(args[2], BaseException):
            self.last = (f"{args[0]}:{args[1]}", args[2])

    def install(self) -> None:
        """Route the ``aiokafka`` log here only (it reaches the user as exceptions)."""
        log = logging.getLogger("aiokafka")
        log.setLevel(logging.ERROR)
        log.propagate = False
        log.addHandler(self)


def _unreachable(address: str, error: BaseException) -> str:
    """Why the Kafka broker at ``address`` could not be used, naming the settings to check."""
    from aiokafka.errors import SaslAuthenticationFailed

    if isinstance(error, SaslAuthenticationFailed):
        return (
            f"Kafka broker {address} refused the SASL credentials "
            f"({setting_names('kafka_sasl_username')}, {setting_names('kafka_sasl_password')}): {error}"
        )
    if isinstance(error, ssl.SSLCertVerificationError):
        return (
            f"Kafka broker {address}: TLS certificate verification failed ({error.verify_message}): "
            f"is {setting_names('kafka_ssl_cafile')} the CA that signed the broker's certificate?"
        )
    return f"Kafka broker {address}: {error}"


def failure(exc: Exception, kafka_connect: KafkaConnectFailures | None = None) -> tuple[int, str]:
    """The exit code and the one-line message of a command's failure: 2 for bad usage or input
    (a flag, a parameter, a file line, an unknown ladder), 1 when a service cannot be reached or
    something else fails; an unreachable Kafka broker says why, from ``kafka_connect``."""
    import redis.exceptions
    from aiokafka.errors import KafkaConnectionError, KafkaError

    from stream_rater.kafka.retention import HistoryTruncated
    from stream_rater.processor import StoreLost
    from stream_rater.store.base import LockLost, RerateRunning
    from stream_rater.store.deployment import StoreRefused

    if isinstance(exc, (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)):
        return EXIT_RUNTIME, f"Redis: {exc}"
    if isinstance(exc, KafkaConnectionError) and kafka_connect is not None and kafka_connect.last:
        return EXIT_RUNTIME, _unreachable(*kafka_connect.last)
    if isinstance(exc, KafkaError):
        return EXIT_RUNTIME, f"Kafka broker: {exc}"
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return EXIT_RUNTIME, str(exc) or type(exc).__name__
    if isinstance(exc, (RerateRunning, LockLost, StoreLost, HistoryTruncated, StoreRefused)):
        return EXIT_RUNTIME, str(exc)
    if isinstance(exc, KeyError):  # config.ladders.UnknownLadderError says which ladders exist
        return EXIT_BAD_INPUT, str(exc)
    if isinstance(exc, (ValueError, OSError)):
        return EXIT_BAD_INPUT, str(exc)
    return EXIT_RUNTIME, f"{type(exc).__name__}: {exc} (run with --debug for the traceback)"


class _DeprecatedBrokerChoice(argparse.Action):
    """``--broker tansu|apache-kafka`` where `embedded_broker_flag` is meant: still taken, with
    one deprecation line on stderr (everywhere else ``--broker`` is a Kafka URL)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(
            f"{parser.prog}: --broker {values} is deprecated here (--broker is a Kafka URL elsewhere): "
            f"use --embedded-broker {values}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def embedded_broker_flag(
    parser: argparse.ArgumentParser, *, dest: str, choices: Sequence[str], default: str, help: str
) -> None:
    """``--embedded-broker``: which broker a command's embedded runtime starts (`dev`, the
    benches), and ``--broker`` as its deprecated alias (hidden from ``--help``)."""
    parser.add_argument("--embedded-broker", dest=dest, choices=choices, default=default, help=help)
    parser.add_argument(
        "--broker",
        dest=dest,
        choices=choices,
        default=argparse.SUPPRESS,
        action=_DeprecatedBrokerChoice,
        help=argparse.SUPPRESS,
    )


def settings_flags(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    """Flags for the named `Settings` fields, e.g. ``--redis-url`` (alias ``--redis``); not
    given, they leave the field to its ``STREAM_RATER_*`` variable."""
    by_name = {f.name: f for f in fields(Settings)}
    aliases = {"redis_url": ["--redis"], "broker": ["--kafka"]}
    for name in names:
        f = by_name[name]
        parser.add_argument(
            "--" + name.replace("_", "-"),
            *aliases.get(name, []),
            dest=name,
            type=type(f.default),
            default=None,
            help=f"{f.metadata['help']} [env {env_name(name)}, default {f.default!r}]",
        )
        if f.metadata.get("secret"):
            parser.add_argument(
                f"--{name.replace('_', '-')}-file",
                dest=name + "_file",
                default=None,
                metavar="PATH",
                help=f"file holding the {name.replace('_', ' ')} [env {env_name(name)}_FILE]",
            )


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings from the environment, overridden by the settings flags given."""
    flags = {f.name: getattr(args, f.name) for f in fields(Settings) if hasattr(args, f.name)}
    for name in secret_names():
        path = getattr(args, name + "_file", None)
        if path:
            flags[name] = read_secret(path, f"--{name.replace('_', '-')}-file")
    return Settings.from_env().override(**flags)


def setting_names(name: str) -> str:
    """How a user gives the `Settings` field ``name``: ``--flag / STREAM_RATER_VARIABLE``."""
    return f"--{name.replace('_', '-')} / {env_name(name)}"


def require(settings: Settings, *names: str) -> None:
    """A usage error naming the flag and the variable of each named setting left empty."""
    missing = [n for n in names if not getattr(settings, n)]
    if missing:
        raise ValueError("not configured: " + ", ".join(setting_names(n) for n in missing))


def store_flag(parser: argparse.ArgumentParser, *, default: str | None = None) -> None:
    """``--store``: the state store, by default `Settings.redis_url` (``STREAM_RATER_REDIS_URL``)
    unless the command has a `default` of its own; and ``--redis-prefix``, its key prefix."""
    where = f"default {default}" if default else f"default {env_name('redis_url')}"
    parser.add_argument(
        "--store",
        default=default,
        help="'memory' or a Redis URL (redis://host:port/db, or "
        f"redis+cluster://host:port[,host:port…] for a Redis Cluster) [{where}]",
    )
    settings_flags(parser, ["redis_prefix", *REDIS_SECURITY])


def store_url(args: argparse.Namespace) -> str:
    """``--store``, else the settings' Redis URL; neither is a usage error naming both."""
    url = args.store or settings_of(args).redis_url
    if not url:
        raise ValueError(f"no store: give --store URL or set {env_name('redis_url')}")
    return url


@asynccontextmanager
async def store_for(args: argparse.Namespace) -> AsyncIterator[StateStore]:
    """The store of `store_url`, closed on the way out, after `bound_store` checked it."""
    from stream_rater.store import RedisTimeouts, open_store

    settings = settings_of(args)
    store = open_store(
        store_url(args),
        timeouts=RedisTimeouts.of(settings),
        prefix=settings.redis_prefix,
        marker_ttl=settings.marker_ttl,  # the markers' window: where a read finds them (`keys`)
        history_limit=settings.redis_history(),
    )
    try:
        await bound_store(args, store)
        yield store
    finally:
        await store.close()


async def bound_store(args: argparse.Namespace, store: StateStore) -> None:
    """Refuse `store` if it is in a newer stored format or, for a command that reads a ladder's
    matches from the topic (it has ``--topic-matches`` and ``--ladder``, and for ``replay``
    ``--from-topic``), if the ladder is recorded with another matches topic; such a command
    records its topic for a ladder that has none (`store.deployment.bind`)."""
    from stream_rater.store.deployment import bind

    if getattr(args, "upgrading", False):
        await bind(store, upgrading=True)  # `migrate`: an earlier format is what it upgrades
        return
    ladder = getattr(args, "ladder", None)  # ``checkpoint --ladder`` is repeatable: a list
    if hasattr(args, "topic_matches") and ladder and getattr(args, "from_topic", True):
        await bind(store, settings_of(args).topic_matches, ladder if isinstance(ladder, list) else [ladder])
    else:
        await bind(store)


def with_store(args: argparse.Namespace, job: Callable[[StateStore], Awaitable[T]]) -> T:
    """Run ``job(store)`` on the command's store (`store_for`) and return what it returns."""

    async def run() -> T:
        async with store_for(args) as store:
            return await job(store)

    return asyncio.run(run())


def configured_ladders(args: argparse.Namespace) -> Ladders:
    """The ladders of the ladders file (``--ladders-file``) and the environment."""
    settings = Settings.from_env().override(ladders_file=getattr(args, "ladders_file", None))
    return load_ladders(settings.ladders_file or None, os.environ)


def ladders_of(args: argparse.Namespace) -> Ladders:
    """The configured ladders, with ``--ladder``'s model and parameters replaced by
    ``--model`` / ``--param`` when given (each checked: a bad one is one line naming it)."""
    ladders = configured_ladders(args)
    model = getattr(args, "model", None)
    params = dict(parse_param(p) for p in getattr(args, "param", []))
    if not (model or params):
        return ladders
    name = getattr(args, "ladder", None) or DEFAULT_LADDER
    base = ladders.get(name, None)
    keep = base is not None and model in (None, base.model)
    ladder = Ladder(
        name,
        model or (base.model if base else DEFAULT_MODEL),
        {**(base.params if keep and base else {}), **params},
        modes=base.modes if keep and base else {},
    )
    try:
        check_params(ladder.model, ladder.params)  # a bad parameter fails before any input is read
    except ParamError as exc:
        raise ValueError(f"--param {exc}" if exc.name else f"--model {ladder.model}: {exc}") from None
    return Ladders([*(lad for lad in ladders.values() if lad.name != name), ladder], source=ladders.source)
