"""The value types that cross the state store's interface (`store.base`, `store.roles`).

A batch is processed as: one read (states + "match applied" markers of every player and
match in the batch), pure computation, one commit — per ladder, and for a batch that spans
several ladders `read_many` and `commit_many` do every ladder's part in one round trip. `commit` is atomic: it verifies that
every state is still at the version that was read and that no match of the batch has been
applied meanwhile, then writes all states, markers, leaderboard scores and history entries —
or writes nothing and raises `CommitConflict`, after which the caller re-reads and recomputes.
Every commit that writes applies at least one match, so the ladder's watermark moves with every
change of its states: a commit that carries the generation and watermark it was computed from
(`Commit.read_at`), and finds the generation it writes to be that one with that watermark still,
knows that no state changed since its read without looking at them one by one.

A "match applied" marker holds the match's rating-changed events until they are known to be
with the broker, so that a batch committed but never produced (the worker died in between)
re-emits them when it is redelivered. Once they are produced, a later commit of the ladder
drops the marker's events (`Commit.produced`): the marker itself stays, with its expiry, so the
match stays a duplicate for the whole idempotency window, but no longer holds its events (an
empty list — nothing left to re-emit); stream_rater/bench/README.md "Capacity"
gives both sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack

from stream_rater.config.settings import Settings
from stream_rater.store.packing import pack


@dataclass(frozen=True)
class RedisTimeouts:
    """How a Redis client connects and how long it waits, in seconds (0 = forever): for a reply
    (`socket`), for a connection to open (`connect`); and after how long idle a connection is
    checked with a PING before its next use (`health_check`, 0 = never). TCP keepalive is
    always on. So a network partition — packets dropped, no connection reset — ends in an error
    the worker retries rather than in a wait without end. With them, the password of the ACL
    user and, for a ``rediss://`` URL, the TLS files (`RedisTLS`)."""

    socket: float = Settings.redis_socket_timeout
    connect: float = Settings.redis_connect_timeout
    health_check: float = Settings.redis_health_check_interval
    password: str = field(default="", repr=False)
    tls: RedisTLS = field(default_factory=lambda: RedisTLS())

    @classmethod
    def of(cls, settings: Settings) -> RedisTimeouts:
        """The timeouts, password and TLS files `settings` configure."""
        return cls(
            settings.redis_socket_timeout,
            settings.redis_connect_timeout,
            settings.redis_health_check_interval,
            settings.redis_password,
            RedisTLS(
                settings.redis_tls_ca_file,
                settings.redis_tls_cert_file,
                settings.redis_tls_key_file,
                settings.redis_tls_key_password,
            ),
        )

    def client_options(self, url: str = "") -> dict[str, Any]:
        """The redis-py client (or connection pool) keyword arguments for these settings and
        the Redis at `url` (TLS options only for a ``rediss`` one)."""
        options: dict[str, Any] = {
            "socket_timeout": self.socket or None,
            "socket_connect_timeout": self.connect or None,
            "health_check_interval": self.health_check,
            "socket_keepalive": True,
        }
        if self.password:
            options["password"] = self.password
        return {**options, **self.tls.client_options(url)}


@dataclass(frozen=True)
class RedisTLS:
    """The files of a TLS connection to Redis: the CA that signed the server's certificate, and
    the client certificate and key (with its password) for a Redis that asks for one."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    key_password: str = field(default="", repr=False)

    def client_options(self, url: str) -> dict[str, Any]:
        """redis-py's ``ssl_*`` keyword arguments; `ValueError` naming the settings when they
        are given for a Redis URL without TLS (they would be ignored)."""
        given = {
            "ssl_ca_certs": self.ca_file,
            "ssl_certfile": self.cert_file,
            "ssl_keyfile": self.key_file,
            "ssl_password": self.key_password,
        }
        given = {name: value for name, value in given.items() if value}
        if not given:
            return {}
        scheme = url.split("://", 1)[0]
        if not scheme.startswith("rediss"):
            raise ValueError(
                "STREAM_RATER_REDIS_TLS_* settings are given but the Redis URL is not rediss:// "
                "(or rediss+cluster://)"
            )
        if scheme.endswith("+cluster") and self.key_password:
            raise ValueError(
                "STREAM_RATER_REDIS_TLS_KEY_PASSWORD: redis-py's Redis Cluster client takes no key "
                "password; give an unencrypted key file (mounted as a secret)"
            )
        return given


#: The `Settings` defaults: what a client made without settings waits.
DEFAULT_TIMEOUTS = RedisTimeouts()

#: A rating-changed event in its wire form (`stream_rater.contracts.rating_changed`).
Event = dict[str, Any]
#: Why a match was voided: ``{"reason", "at"}``.
Void = dict[str, Any]


class PlayerState(NamedTuple):
    """A stored rating state. ``version`` counts commits that changed it (0 = never stored).

    ``peak`` is the player's highest display rating after a match so far, ``peak_at`` the
    ``finished_at`` of that match (None until the player's first match).

    A named tuple rather than a dataclass: the processor creates one per player per match.
    """

    mu: float
    sigma: float | None
    games: int = 0
    last_played: float | None = None
    version: int = 0
    #: The model's extra per-player number (`Rating.extra`: Glicko-2's volatility), else None.
    extra: float | None = None
    peak: float | None = None
    peak_at: float | None = None

    def pack(self, packer: Callable[[Any], bytes] = pack) -> bytes:
        """Compact msgpack form (by `packer`, `packing.pack` or what `packing.packing_with`
        hands in): ``[mu, sigma, games, last_played, version]``, then
        ``extra`` and then ``peak, peak_at`` only as far as they are set (so that states
        written before these fields existed read back as they were). A float field whose
        value is integral (``last_played``, ``peak_at`` in whole epoch seconds, a rounded
        ``mu``) is packed as an int, and a ``peak_at`` equal to ``last_played`` as ``true``:
        `unpack` turns both back into the same floats, and the value stays within Redis's
        64-byte listpack limit (`PACKED_LIMIT`) whenever that is possible."""
        mu, sigma, games, last, version, extra, peak, peak_at = self
        small = _small
        # A fractional float is packed as it is: `_small` is called only where it may change it.
        if type(last) is not float:
            played = small(last)
        elif last.is_integer():  # a positive one (a time) is the int `_small` makes of it
            played = int(last) if 0.0 < last < 2.0**63 else small(last)
        else:
            played = last
        m = mu if type(mu) is float and not mu.is_integer() else small(mu)
        s = sigma if type(sigma) is float and not sigma.is_integer() else small(sigma)
        if peak is not None:
            at = True if peak_at is not None and peak_at == last else small(peak_at)
            peak = peak if type(peak) is float and not peak.is_integer() else small(peak)
            return packer((m, s, games, played, version, None if extra is None else small(extra), peak, at))
        if extra is not None:
            return packer((m, s, games, played, version, small(extra)))
        return packer((m, s, games, played, version))  # tuples pack as arrays

    @classmethod
    def unpack(cls, raw: bytes) -> PlayerState:
        """Inverse of `pack`."""
        return cls.of(msgpack.unpackb(raw, raw=False))

    @classmethod
    def of(cls, fields: list[Any]) -> PlayerState:
        """The state from its packed fields: five, six with ``extra``, eight with the peak;
        integral floats packed as ints become floats again (see `pack`)."""
        n = len(fields)
        if n == 8 and fields[7] is True:
            fields[7] = fields[3]
        for i in _FLOATS:
            if i < n and type(fields[i]) is int:
                fields[i] = float(fields[i])
        return cls._make(fields if n == 8 else (*fields, *_MISSING[n - 5 :]))


#: The packed fields that hold floats (or None): mu, sigma, last_played, extra, peak, peak_at.
_FLOATS = (0, 1, 3, 5, 6, 7)
#: Bytes a packed state stays within (Redis's default ``hash-max-listpack-value``).
PACKED_LIMIT = 64


def _small(value: float | None) -> float | int | None:
    """`value` as an int if it is an integral float that reads back bit-identical (not -0.0,
    within msgpack's int range), else as it is."""
    if not isinstance(value, float) or not value.is_integer():
        return value
    if abs(value) < 2**63 and (value or math.copysign(1.0, value) > 0):
        return int(value)
    return value


_MISSING = (None, None, None)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one `read` returns: stored states (absent = never rated), applied matches, and the
    ladder's watermark — how many matches were applied to it so far (0 for a new ladder). The
    watermark only grows within a generation; a store that shows less than was committed has
    lost data.

    `applied` maps each applied match to the events a redelivery must re-emit: its stored
    events while they may not have reached the broker, none once its marker was shrunk.

    `generation` is the generation read (see `Generations`), `voided` the match ids of the
    read that an operator voided (they are not applied), `params` the model parameters the
    generation overrides (set by a re-rate; None = the configured ones)."""

    players: dict[str, PlayerState]
    effects: dict[str, PlayerState]
    applied: dict[str, list[Event]]
    watermark: int = 0
    generation: int = 0
    voided: frozenset[str] = frozenset()
    params: dict[str, Any] | None = None


class ReadRequest(NamedTuple):
    """One ladder's part of a `StateStore.read_many`: the arguments of `StateStore.read`."""

    ladder: str
    player_ids: Sequence[str]
    effect_ids: Sequence[str]
    match_ids: Sequence[str]
    generation: int | None = None
    #: Per match id its (partition, offset) in the matches topic, or None (not from there): a
    #: match whose record is below the ladder's position in its partition is applied already
    #: (a redelivery after a crash), whether or not its marker is still there.
    records: Sequence[tuple[int, int] | None] | None = None


class StateWrite(NamedTuple):
    """A new state for one player or effect, valid only if the stored one is still at
    ``expected_version`` (0 = must not exist yet).

    A player's `leaderboard_score` None takes them off the leaderboard (the ladder's rules do
    not rank them yet); effects are never on it. `active` (the player's last match) is set on
    ladders that rank only recently active players, for ranked players."""

    player_id: str
    state: PlayerState
    expected_version: int
    is_effect: bool = False
    leaderboard_score: float | None = None
    active: float | None = None


@dataclass(frozen=True, slots=True)
class Commit:
    """Everything one batch of one ladder writes, atomically.

    `positions` (partition → offset after the batch's last record of the ladder) records how
    far into the matches topic the ladder's states go; a re-rate catches up to it.
    `generation` None writes the live generation (refused while a re-rate switches it);
    a number writes that staging generation of a re-rate.

    `produced` names applied matches (of earlier commits) whose events are now with the
    broker: their markers are left holding an empty event list, keeping their expiry. It
    rides on the next commit of the ladder rather than costing a round trip of its own; a
    marker that no longer exists (expired, or of another generation) is left absent.

    `read_at` is the generation and its watermark in the read the commit was computed from
    (None: not known). A store that writes the commit to that same generation and still shows
    that watermark there may skip the per-write version checks: every commit that writes
    applies a match and so moves the watermark, hence an unchanged one means no state changed
    since that read. (A live commit whose read was of a generation a re-rate has switched away
    from since goes to the new one: its versions are checked, as without `read_at`.) The writes' versions must then be the ones of
    that read, as `plan_batch` makes them. A commit that writes without applying a match
    would break this, so it is refused (`ValueError`) when it is made."""

    ladder: str
    writes: Sequence[StateWrite]
    markers: Mapping[str, list[Event]]
    history: Mapping[str, list[Event]] = field(default_factory=dict)
    positions: Mapping[int, int] = field(default_factory=dict)
    generation: int | None = None
    produced: Sequence[str] = ()
    #: The id of a season-start record this commit applies: before writing, the leaderboard
    #: is kept as the final one of the season that ends (`StateStore.leaderboard` ``season``).
    season: str | None = None
    read_at: tuple[int, int] | None = None
    #: Not None: the commit was computed without a read, from the states its processor holds
    #: since its own last commit (`read_at`); per partition the offset of the batch's first
    #: record in it. The store then refuses it (`HeldStale`) unless the generation still shows
    #: `read_at`'s watermark, no record is below its partition's position, and none of its
    #: matches is marked or voided: what the read would have told.
    unread: Mapping[int, int] | None = None
    #: Match id → ``[player id, team rank]`` of each rated player of that newly applied match:
    #: kept in its marker, so that a match's events can be found (`ReadStore.placings`).
    placings: Mapping[str, list[list[Any]]] = field(default_factory=dict)
    #: Scorer name → (increments of its cumulative prediction-quality sums, the batch's match
    #: scores oldest first): see `processor.quality`; kept per (ladder, scorer).
    quality: Mapping[str, tuple[dict[str, float], list[list[Any]]]] = field(default_factory=dict)
    #: Seconds a ranked player stays on the leaderboard after their last match (the ladder's
    #: ``leaderboard_active_days``; None: no activity rule). The commit then trims the players
    #: idle longer than that, as of its newest match, off the leaderboard (a few at a time).
    active_within: float | None = None
    #: A ladder with modes (`contracts.modes`): every player write's id is a stored id
    #: ``<mode>@<player id>``, ranked on its mode's leaderboard under the player id.
    moded: bool = False
    #: ``id(event)`` → the fields of a plain rating-changed event of `markers` and `history`, as
    #: the planner built it (`stored_events.EventFields`): a store that keeps events in their
    #: stored form takes them from here rather than reading each event's map back (events
    #: missing here are read from their map). The events outlive the commit's use.
    event_fields: Mapping[int, tuple[Any, ...]] = field(default_factory=dict, compare=False, repr=False)
    #: A ``finished_at`` text of those events → its stored form (`stored_events.stored_time`), made
    #: from the match's float time, so that such a store need not read the text back.
    stored_times: Mapping[str, int | str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.writes and not self.markers:
            raise ValueError(f"ladder {self.ladder!r}: a commit that writes states must apply a match")


def trim_since(commit: Commit, now: float) -> float | None:
    """The activity cutoff `commit` trims the leaderboard at (None: none): `active_within`
    before its newest last match, or before `now` if that is earlier (a match dated in the
    future trims nobody early). From the matches' own time, so a replay of old matches keeps
    the board they leave, and reads, whose cutoff is their clock's, skip the rest."""
    if commit.active_within is None:
        return None
    latest = max((w.active for w in commit.writes if w.active is not None), default=None)
    return None if latest is None else min(latest, now) - commit.active_within


#: Most recent match scores a store keeps per (ladder, scorer) (`Commit.quality`).
QUALITY_WINDOW = 1000


@dataclass(frozen=True, slots=True)
class Lookup:
    """What one `StateStore.lookup` returns: stored states, each ranked player's 0-based
    place on the leaderboard (best first), and how many players the leaderboard has."""

    players: dict[str, PlayerState]
    places: dict[str, int]
    ranked: int


class BoardRow(NamedTuple):
    """One row of a leaderboard read: the player, the display rating the board is ordered by,
    and their rank, standard competition ranking ("1224": 1 + the players rated strictly
    higher, so tied players share a rank). Inside a tie rows come by player id, descending
    (byte order: Redis's order of equal scores), the same in every read."""

    player_id: str
    score: float
    rank: int


@dataclass(frozen=True, slots=True)
class BoardRanks:
    """What `ReadStore.board_ranks` returns: each ranked player's rank (`BoardRow`; absent:
    not eligible) and how many players are eligible."""

    ranks: dict[str, int]
    total: int


@dataclass(frozen=True, slots=True)
class BoardAround:
    """What `ReadStore.board_around` returns: the rows from `n` above a player to `n` below
    (fewer at the ends), the player's rank and how many players are eligible."""

    rows: list[BoardRow]
    rank: int
    total: int


class BoardBehind(RuntimeError):
    """A leaderboard read refused rather than made slow: more players went idle since the
    leaderboard was last trimmed than a read skips (the ladder had no commit for long and no
    worker trimmed it). It passes once a commit or a worker's trim catches up."""

    def __init__(self, ladder: str, idle: int) -> None:
        super().__init__(
            f"ladder {ladder!r}: more than {idle} players went idle since its leaderboard was last "
            "trimmed; the read is refused rather than made slow until a commit or the worker's "
            "trim (every inflation interval) takes them off"
        )
        self.ladder = ladder


@dataclass(frozen=True, slots=True)
class RatingTotals:
    """The live leaderboard's display ratings added up (`ReadStore.rating_totals`): how many
    players are ranked and the sum of their ratings, and the same of those among them active
    since the read's `since` (every ranked player when no `since` is given). Idle players
    leave the leaderboard, so both are of the eligible players: kept for the gauges' names."""

    ranked: int
    ranked_sum: float
    active: int
    active_sum: float


class CommitConflict(Exception):
    """The commit was refused: a state changed since it was read, or a match was applied."""


class HeldStale(CommitConflict):
    """A commit computed without a read (`Commit.unread`) was refused: the store changed since
    the processor's last commit (another commit, a void, a redelivered record). Read and
    compute again, at once: nobody is racing."""


class LadderFrozen(CommitConflict):
    """The commit was refused because a re-rate is switching the ladder's generation (for
    milliseconds): wait a moment and re-read, the states may be new."""


class GenerationGone(RuntimeError):
    """A staging generation is no longer the ladder's staging one: its re-rate was aborted
    (its lock expired and another re-rate took over)."""


class RerateRunning(RuntimeError):
    """Another re-rate holds the ladder's lock."""

    def __init__(self, ladder: str, owner: str, seconds_left: float) -> None:
        super().__init__(
            f"ladder {ladder!r}: a re-rate is already running ({owner}); its lock "
            f"expires in {seconds_left:.1f} s unless it is renewed"
        )
        self.ladder, self.owner, self.seconds_left = ladder, owner, seconds_left


class LockLost(RuntimeError):
    """The re-rate's lock expired (or was taken over) while it ran; nothing was switched."""


@dataclass(frozen=True, slots=True)
class Generations:
    """A ladder's generations: the live one (0 until a first re-rate switches), the staging
    one a running re-rate builds (None when there is none), how far into the matches topic
    the live one goes (partition → next offset), its parameter overrides, who holds the
    re-rate lock (None: nobody), and whether the voids changed since the live generation was
    built (a re-rate that recorded them was interrupted: the next one completes it)."""

    live: int
    staging: int | None
    positions: dict[int, int]
    params: dict[str, Any] | None
    lock_owner: str | None
    voids_pending: bool = False
