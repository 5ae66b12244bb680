"""The local Apache Kafka's JVM class-data-sharing archive: the classes a broker loads, parsed
and verified once and mapped from a file by every later broker JVM (Java's AppCDS).

On the 2-core CI machine a broker's start to ready cost about 8 CPU-seconds with Java's
defaults, 4.4 with C1 alone (`JIT_OPTIONS`) and 2.7 with C1 and this archive; the test suite
starts dozens of brokers beside its other processes.

The archive belongs to one ``java`` binary and one set of jars (a key of both names it), in
``<cache>/cds`` (`kafka_jars.cache_root`). While it does not exist, each broker JVM writes one
at its exit (``-XX:ArchiveClassesAtExit``) into its own work dir; once that JVM has exited by
itself (a SIGTERM ends it through its shutdown hooks, a SIGKILL does not), `ClassArchive.keep`
copies the file into place and renames it there, so a reader never maps half a file. A stale or
damaged archive costs nothing but the speed: the JVM checks it and, if it does not match, warns
in the broker's log and loads its classes as usual.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path

from stream_rater.local.kafka_jars import cache_root

#: C1 alone: a local broker carries test and development loads, where C2's compiling costs
#: more CPU than its faster code saves (about 3.8 CPU-seconds of a broker's start).
JIT_OPTIONS = ("-XX:TieredStopAtLevel=1",)

#: How much longer than its stop timeout a JVM that writes the archive at exit is given: the
#: dump took 5 s on the idle 2-core machine and over 10 s under the test suite's load, and a
#: JVM killed before it ends leaves no archive (so the next broker pays the dump again).
WRITE_SECONDS = 60.0


class ClassArchive:
    """The class-data-sharing archive of `java` running the jars in `libs`: the JVM options
    that map it, or that write it at exit where it does not exist yet."""

    def __init__(self, java: str, libs: Path) -> None:
        binary = Path(os.path.realpath(java))
        stat = binary.stat()
        key = f"{binary}\0{stat.st_size}\0{stat.st_mtime_ns}\0{libs.resolve()}"
        self.path = cache_root() / "cds" / f"kafka-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"

    def mapped(self) -> list[str]:
        """The JVM options that map the archive, if it exists (none otherwise)."""
        return [f"-XX:SharedArchiveFile={self.path}"] if self.path.is_file() else []

    def options(self, workdir: Path) -> tuple[list[str], Path | None]:
        """The JVM options, and the file the JVM writes the archive to at its exit (in
        `workdir`; None where the archive exists and is mapped)."""
        if mapped := self.mapped():
            return mapped, None
        written = workdir / f"classes-{uuid.uuid4().hex}.jsa"
        return [f"-XX:ArchiveClassesAtExit={written}"], written

    def keep(self, written: Path, returncode: int | None) -> None:
        """Put the archive a JVM wrote at `written` in place if that JVM ended by itself
        (`returncode` ≥ 0: its exit wrote the whole file) and none is there yet; `written` is
        removed either way. A file system that refuses (full, read-only) leaves no archive,
        which only costs speed."""
        landing = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex}.part")
        try:
            if returncode is not None and returncode >= 0 and written.is_file() and not self.path.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(written, landing)
                os.replace(landing, self.path)
        except OSError:
            landing.unlink(missing_ok=True)
        finally:
            written.unlink(missing_ok=True)
