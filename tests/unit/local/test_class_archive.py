"""The local broker's class-data-sharing archive: written by a JVM at its exit, kept only from
a JVM that ended by itself, never half a file, one per java binary and set of jars."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from stream_rater.local.class_archive import ClassArchive
from stream_rater.local.kafka_jars import KAFKA_CACHE_ENV


@pytest.fixture
def archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ClassArchive:
    """An archive of this interpreter's binary (any file names a `java`) in a cache of its own."""
    monkeypatch.setenv(KAFKA_CACHE_ENV, str(tmp_path / "cache"))
    libs = tmp_path / "libs"
    libs.mkdir()
    return ClassArchive(str(Path(pytest.__file__)), libs)


def written_by_a_jvm(archive: ClassArchive, workdir: Path) -> Path:
    """What a JVM started with `archive`'s options writes at its exit."""
    options, written = archive.options(workdir)
    assert written is not None and options == [f"-XX:ArchiveClassesAtExit={written}"]
    written.write_bytes(b"classes")
    return written


def test_an_archive_a_jvm_wrote_at_its_own_exit_is_kept_and_then_mapped(archive, tmp_path):
    written = written_by_a_jvm(archive, tmp_path)
    archive.keep(written, 128 + signal.SIGTERM)  # a JVM ended by SIGTERM through its hooks
    assert archive.path.read_bytes() == b"classes" and not written.exists()
    assert archive.options(tmp_path) == ([f"-XX:SharedArchiveFile={archive.path}"], None)
    assert archive.mapped() == [f"-XX:SharedArchiveFile={archive.path}"]
    assert [p.name for p in archive.path.parent.iterdir()] == [archive.path.name]  # no part left


@pytest.mark.parametrize("returncode", [-signal.SIGKILL, None], ids=["killed", "running"])
def test_the_file_of_a_killed_jvm_is_dropped_never_kept(archive, tmp_path, returncode):
    written = written_by_a_jvm(archive, tmp_path)
    archive.keep(written, returncode)
    assert not archive.path.exists() and not written.exists()
    assert archive.mapped() == []


def test_an_archive_in_place_is_not_replaced(archive, tmp_path):
    archive.keep(written_by_a_jvm(archive, tmp_path), 0)
    late = tmp_path / "late.jsa"
    late.write_bytes(b"other")
    archive.keep(late, 0)
    assert archive.path.read_bytes() == b"classes" and not late.exists()


def test_another_java_or_other_jars_name_another_archive(archive, tmp_path):
    libs = tmp_path / "other-libs"
    libs.mkdir()
    assert ClassArchive(str(Path(pytest.__file__)), libs).path != archive.path
    assert ClassArchive(str(Path(signal.__file__)), tmp_path / "libs").path != archive.path
    assert archive.path.parent == tmp_path / "cache" / "cds"
