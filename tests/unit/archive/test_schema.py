"""Migration files: numbered from one, named NNNN_name.sql."""

from __future__ import annotations

import pytest

from stream_rater.archive import ArchiveSchemaError, migrations


def test_the_shipped_migrations_are_numbered_from_one_without_gaps():
    assert [m.version for m in migrations()] == list(range(1, len(migrations()) + 1))


@pytest.mark.parametrize("name", ["1_events.sql", "0002-events.sql", "0003_Events.sql"])
def test_a_misnamed_migration_is_refused(tmp_path, name):
    (tmp_path / name).write_text("SELECT 1")
    with pytest.raises(ArchiveSchemaError, match=r"NNNN_name\.sql"):
        migrations(tmp_path)
