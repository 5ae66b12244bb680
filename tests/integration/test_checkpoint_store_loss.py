"""Store loss recovered from the latest checkpoint on Apache Kafka: the ladder's keys are gone
(Redis restarted without persistence) while matches kept arriving; the recovery writes the
checkpoint into the store, replays only the matches after it, and then the states equal a
replay of everything, and every match's events are on ``rating-updates`` — the worker's before
the loss, the recovery's for the matches the group had not acknowledged — equal to a replay's."""

from __future__ import annotations

import json

import pytest

from stream_rater.checkpoints import KafkaSink
from stream_rater.config.ladders import Ladder, Ladders
from stream_rater.contracts import parse_match
from stream_rater.corrections.history import apply_correction
from stream_rater.corrections.rerate import Correction
from stream_rater.kafka import read_log
from stream_rater.offline.recovery import recover
from stream_rater.processor import Processor
from stream_rater.store.memory import MemoryStore
from tests.integration.checkpointing import Lab, checkpointed, discard, duels, exact, new_lab

pytestmark = [pytest.mark.integration, pytest.mark.apache_kafka(only=True)]


@pytest.fixture
async def lab(kafka_bootstrap, broker_url, redis_url, unique_name):
    async for made in new_lab(broker_url, redis_url, unique_name):
        yield made


async def lose(lab: Lab) -> None:
    """Delete every key of the ladder, as a Redis restarted without persistence has none."""
    client = lab.store.client  # type: ignore[attr-defined]
    keys = [k async for k in client.scan_iter(match=f"sr:{{{lab.ladder}}}*")]
    await client.unlink(*keys)
    assert not await lab.store.players(lab.ladder)


async def test_a_lost_store_is_rebuilt_from_the_latest_checkpoint(lab: Lab):
    await lab.publish(duels(lab.ladder, 300))
    await lab.work(produce=True)
    async with KafkaSink(lab.settings) as sink:
        written = await checkpointed(lab, sink)
        await lab.publish(duels(lab.ladder, 100, first=300))
        await lab.work(produce=True)
        await lose(lab)
        await lab.publish(duels(lab.ladder, 50, first=400))  # arrive while the store is lost
        summary, produced, start, history = await recover(
            lab.settings, lab.ladders, lab.ladder, lab.store, sink
        )
    assert start is not None and start.id == written.id and len(history.matches) == 150
    assert summary.applied == 150 and produced == 100  # two players per match, the last 50
    assert exact(await lab.store.players(lab.ladder)) == exact(await lab.oracle())
    records, _ = await read_log(lab.settings, lab.settings.topic_updates)
    sent = {}
    for record in records:
        event = json.loads(record.value)
        sent.setdefault(event["event_id"], event)
    replay = MemoryStore()
    result = await Processor(lab.ladders, replay).process(
        [parse_match(e, lab.ladders) for e in lab.published]
    )
    expected = {e["event_id"]: e for r in result.results for e in r.events}
    assert sent.keys() == expected.keys() and len(expected) == 900
    assert all(
        sent[i]["after"] == expected[i]["after"] and sent[i]["before"] == expected[i]["before"]
        for i in expected
    )
    again = await lab.store.read(lab.ladder, [], [], ["m0", "m299", "m449"])
    assert set(again.applied) == {"m0", "m299", "m449"}, "redeliveries stay duplicates"


async def test_a_lost_store_gets_back_the_parameter_overrides_of_its_checkpoint(lab: Lab):
    """A ladder re-rated with new parameters, checkpointed, then lost: rebuilt into the empty
    store from that checkpoint, it gets the parameters back, and the matches after it are
    rated with them: the states are those before the loss."""
    await lab.publish(duels(lab.ladder, 200))
    await lab.work(produce=True)
    params = {"beta": 2.0}
    correction = Correction("rerate", lab.ladder, params=params)
    await apply_correction(correction, lab.settings, lab.ladders, lab.store, send=discard)
    async with KafkaSink(lab.settings) as sink:
        await checkpointed(lab, sink)
        await lab.publish(duels(lab.ladder, 50, first=200))
        await lab.work(produce=True)
        before = exact(await lab.store.players(lab.ladder))
        await lose(lab)
        _, _, start, history = await recover(lab.settings, lab.ladders, lab.ladder, lab.store, sink)
    assert start is not None and start.params == params and len(history.matches) == 50
    assert (await lab.store.generations(lab.ladder)).params == params
    assert exact(await lab.store.players(lab.ladder)) == before


async def test_a_lost_store_whose_checkpoints_are_past_a_season_start_keeps_its_voids(lab: Lab):
    """No checkpoint can seed the store (each is past the season start, without the ended
    season): it is rebuilt from the topic's start, with the voids of the newest checkpoint —
    the voided match stays voided (bench chaos seed 46 found it came back)."""
    seasoned = Ladders([Ladder(lab.ladder, "trueskill", {"season_shrink": 0.5, "season_sigma": 1.0})])
    lab.ladders, lab.processor = seasoned, Processor(seasoned, lab.store)
    season = {"kind": "season", "match_id": "s1", "ladder": lab.ladder, "finished_at": 1.7e9 + 60 * 99.5}
    await lab.publish([*duels(lab.ladder, 100), season, *duels(lab.ladder, 100, first=100)])
    await lab.work(produce=True)
    async with KafkaSink(lab.settings) as sink:
        await checkpointed(lab, sink)
        await lab.publish(duels(lab.ladder, 50, first=200))
        await lab.work(produce=True)
        report = await lab.void("m220", sink)
        assert report.checkpoint is not None, report.line()
        await lose(lab)
        _, _, start, _ = await recover(lab.settings, lab.ladders, lab.ladder, lab.store, sink)
    assert start is None
    assert exact(await lab.store.players(lab.ladder)) == exact(await lab.oracle({"m220"}))


async def test_a_lost_store_rebuilt_from_before_a_season_start_keeps_the_later_voids(lab: Lab):
    """The only checkpoint that can seed the store is before the season start; a match after
    it was voided later, from the checkpoint past the season start. The rebuild from the older
    one takes the newest checkpoint's voids, so the voided match stays voided (bench chaos seed
    51 found it came back)."""
    seasoned = Ladders([Ladder(lab.ladder, "trueskill", {"season_shrink": 0.5, "season_sigma": 1.0})])
    lab.ladders, lab.processor = seasoned, Processor(seasoned, lab.store)
    season = {"kind": "season", "match_id": "s1", "ladder": lab.ladder, "finished_at": 1.7e9 + 60 * 99.5}
    await lab.publish(duels(lab.ladder, 100))
    await lab.work(produce=True)
    async with KafkaSink(lab.settings) as sink:
        before_season = await checkpointed(lab, sink)
        await lab.publish([season, *duels(lab.ladder, 100, first=100)])
        await lab.work(produce=True)
        await checkpointed(lab, sink)
        await lab.publish(duels(lab.ladder, 50, first=200))
        await lab.work(produce=True)
        report = await lab.void("m220", sink)
        assert report.checkpoint is not None and report.checkpoint != before_season.id, report.line()
        await lose(lab)
        _, _, start, _ = await recover(lab.settings, lab.ladders, lab.ladder, lab.store, sink)
    assert start is not None and start.id == before_season.id
    assert exact(await lab.store.players(lab.ladder)) == exact(await lab.oracle({"m220"}))
