"""Apache Kafka's jars for `stream_rater.local.apache_kafka`: ``java`` and the broker's (or its
tools') jars, resolved from Maven Central once with ``mvn`` into ``$STREAM_RATER_KAFKA_CACHE``
(default ``~/.cache/stream_rater``) as ``kafka-<version>/libs``; ``STREAM_RATER_KAFKA_HOME``
may instead name an unpacked Kafka distribution (its ``libs/`` is used as is).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

from stream_rater.local.processes import LocalRuntimeError

KAFKA_VERSION = "4.1.1"
#: The log4j 2 that Kafka KAFKA_VERSION depends on; its SLF4J 1.7 binding is added beside it.
LOG4J_VERSION = "2.24.3"
KAFKA_HOME_ENV = "STREAM_RATER_KAFKA_HOME"
KAFKA_CACHE_ENV = "STREAM_RATER_KAFKA_CACHE"
RESOLVE_TIMEOUT = 900.0
#: What `kafka_libs` resolves: the broker or its command-line tools, as Maven artifacts.
KafkaPart = Literal["broker", "tools"]
_ARTIFACTS: dict[KafkaPart, str] = {"broker": "kafka_2.13", "tools": "kafka-tools"}

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.stream-rater</groupId>
  <artifactId>apache-{name}-libs</artifactId>
  <version>{kafka}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>{artifact}</artifactId><version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""


class JavaToolMissing(LocalRuntimeError):
    """``java`` or ``mvn`` is not installed (Apache Kafka runs on the JVM, resolved by Maven)."""


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` if it exists, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home, "bin", "java"), os.X_OK):
        return str(Path(home, "bin", "java"))
    found = shutil.which("java")
    if not found:
        raise JavaToolMissing("Apache Kafka needs java 17+ (JAVA_HOME or PATH), and none was found")
    return found


def apache_kafka_missing(version: str = KAFKA_VERSION) -> str | None:
    """Why `LocalRuntime` could not start Apache Kafka ``version`` here (no java; no mvn and
    the jars not resolved yet), or None when it could."""
    try:
        java_binary()
    except JavaToolMissing as exc:
        return str(exc)
    resolved = os.environ.get(KAFKA_HOME_ENV) or (cache_root() / f"kafka-{version}").is_dir()
    if not resolved and not shutil.which("mvn"):
        return f"resolving Apache Kafka {version} needs Maven (mvn on PATH), and none was found"
    return None


def cache_root() -> Path:
    """Where resolved Kafka versions live: ``$STREAM_RATER_KAFKA_CACHE`` or the user cache."""
    explicit = os.environ.get(KAFKA_CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base, "stream_rater")


def kafka_libs(version: str = KAFKA_VERSION, part: KafkaPart = "broker") -> Path:
    """The directory of Apache Kafka ``version``'s jars, resolved with Maven on first use: the
    broker's, or with ``part="tools"`` its command-line tools' (console producer and consumer;
    only tests use them, so a broker-only cache never resolves them).

    ``$STREAM_RATER_KAFKA_HOME/libs`` if that variable is set (a distribution holds both).
    Otherwise ``<cache>/kafka-<version>/libs`` (``kafka-tools-<version>`` for the tools): a
    generated pom and ``mvn dependency:copy-dependencies`` fill a temp dir that is renamed into
    place, under a lock file, so concurrent callers resolve once and never see half a directory.
    """
    home = os.environ.get(KAFKA_HOME_ENV)
    if home:
        libs = Path(home, "libs")
        if not any(libs.glob("kafka_*.jar")):
            raise LocalRuntimeError(f"{KAFKA_HOME_ENV}={home} has no libs/kafka_*.jar")
        return libs
    root = cache_root()
    name = "kafka" if part == "broker" else f"kafka-{part}"
    target = root / f"{name}-{version}"
    if target.is_dir():
        return target / "libs"
    mvn = shutil.which("mvn")
    if not mvn:
        raise JavaToolMissing(
            f"resolving Apache Kafka {version} needs Maven (mvn on PATH), and none was found"
        )
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_dir():
            pom = _POM.format(name=name, artifact=_ARTIFACTS[part], kafka=version, log4j=LOG4J_VERSION)
            _resolve(mvn, pom, f"{name}-{version}", root, target)
    return target / "libs"


def _resolve(mvn: str, pom: str, name: str, root: Path, target: Path) -> None:
    """Copy the runtime jars of `pom`'s dependencies into ``target/libs`` with Maven (lock
    held); `name` (``kafka-<version>``) names the temp dir and the log."""
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    log_path = root / f"{name}-mvn.log"
    try:
        (staging / "pom.xml").write_text(pom)
        argv = [
            mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(staging / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging / 'libs'}", "-DincludeScope=runtime",
        ]  # fmt: skip
        with open(log_path, "wb") as log:
            try:
                done = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=RESOLVE_TIMEOUT,
                )
            except subprocess.TimeoutExpired:
                raise LocalRuntimeError(
                    f"resolving {name} with Maven took over {RESOLVE_TIMEOUT:.0f}s; see {log_path}"
                ) from None
        if done.returncode != 0:
            plain = re.sub(r"\x1b\[[0-9;]*m", "", log_path.read_text(errors="replace"))  # Maven's colours
            errors = [line for line in plain.splitlines() if "ERROR" in line]
            raise LocalRuntimeError(
                f"resolving {name} with Maven failed (exit {done.returncode}): "
                f"{errors[0].strip() if errors else 'no error line'}; see {log_path}"
            )
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
