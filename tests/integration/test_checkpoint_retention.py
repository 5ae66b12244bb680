"""A bounded matches topic: once ``delete_records`` (as retention does) removed the head of the
ladder's partition, a void after the newest checkpoint still works from it, and a void older
than every checkpoint kept is refused in one line, changing nothing. Needs ``delete_records``:
Apache Kafka."""

from __future__ import annotations

import pytest

from stream_rater.checkpoints import KafkaSink
from stream_rater.corrections.starting import TooOld
from tests.e2e.e2e_support import delete_head
from tests.integration.checkpointing import Lab, checkpointed, duels, exact, new_lab

pytestmark = [pytest.mark.integration, pytest.mark.apache_kafka(only=True)]


@pytest.fixture
async def lab(kafka_bootstrap, broker_url, redis_url, unique_name):
    async for made in new_lab(broker_url, redis_url, unique_name):
        yield made


async def test_a_void_inside_the_window_works_and_one_outside_is_refused(lab: Lab):
    await lab.publish(duels(lab.ladder, 300))
    await lab.work()
    async with KafkaSink(lab.settings) as sink:
        written = await checkpointed(lab, sink)
        await lab.publish(duels(lab.ladder, 100, first=300))
        await lab.work()
        await delete_head(lab.settings, lab.ladder, 250)
        before = exact(await lab.store.players(lab.ladder))
        with pytest.raises(TooOld) as refused:
            await lab.void("m100", sink)
        assert str(refused.value) == (
            f"ladder {lab.ladder!r}: partition 0 of topic {lab.settings.topic_matches!r} starts at offset "
            "250; offsets 0..249 were deleted (retention?), and no checkpoint kept is older than the "
            "void of 'm100': it is outside the correction window (STREAM_RATER_CORRECTION_WINDOW_HOURS); "
            "give the deleted matches with --history FILE"
        )
        assert exact(await lab.store.players(lab.ladder)) == before, "a refused void changed the ladder"
        report = await lab.void("m380", sink)
    assert report.checkpoint == written.id and report.voided == ["m380"]
    assert exact(await lab.store.players(lab.ladder)) == exact(await lab.oracle({"m380"}))
