"""``stream-rater bench chaos`` end to end: a fixed-seed nemesis run on Apache Kafka passes every
oracle, and its schedule injected every kind of fault.

One broker, not three: on the CI machine (2 cores) three KRaft nodes beside the workers take
longer to start and fail over than the run lasts; the faults are the same (a killed broker is
then a full outage, which the workers and the publisher wait out)."""

from __future__ import annotations

import json

import pytest

from stream_rater.bench.chaos_schedule import KINDS
from tests.helpers import cli

pytestmark = [pytest.mark.e2e, pytest.mark.apache_kafka(only=True)]


def test_a_fixed_seed_nemesis_run_passes_every_oracle_with_every_kind_of_fault(tmp_path):
    failure = tmp_path / "failure.json"
    done = cli(
        *("bench", "chaos", "--minutes", "2", "--seed", "7", "--brokers", "1", "--workers", "2"),
        *("--json", "--failure-file", str(failure)),
        timeout=600,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    oracles = {name: o["passed"] for name, o in report["oracles"].items()}
    print(report["faults_by_kind"], report["matches_applied"], report["records"], oracles)
    failed = {name: o["detail"] for name, o in report["oracles"].items() if not o["passed"]}
    assert done.returncode == 0 and not failed, f"{failed}; {done.stderr[-3000:]}"
    assert set(report["oracles"]) == {
        "states",
        "events",
        "dead-letters",
        "corrections",
        "readiness",
        "checkpoints",
    }
    assert set(report["faults_by_kind"]) == set(KINDS)
    assert report["seed"] == 7 and report["matches_applied"] > 10_000
    assert not failure.exists()
