"""deploy/prometheus/alerts.yml: the rules are valid, each has a summary and a one-line runbook,
reads only metrics the worker exports, and behaves as `promtool test rules` on synthetic
series says (alerts_test.yml: every alert both fires and stays quiet there)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.project.deploy_files import exported_series, load_yaml, promql_metric_names

PROMETHEUS = Path(__file__).resolve().parents[3] / "deploy" / "prometheus"
#: Metrics the rules read that the worker does not export: `up` is Prometheus's own.
NOT_EXPORTED = {"up"}
#: Commands a runbook may name to recover.
RECOVERY_COMMANDS = ("stream-rater ", "kubectl ", "docker compose ")


def rules() -> list[dict]:
    [doc] = load_yaml(PROMETHEUS / "alerts.yml")
    return [rule for group in doc["groups"] for rule in group["rules"]]


def promtool(*args: str) -> subprocess.CompletedProcess:
    """Run promtool in deploy/prometheus (skipped without it; CI installs it, and a skip
    fails there)."""
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    return subprocess.run(
        [binary, *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_checks_the_rules_and_the_config_that_loads_them():
    """`promtool check rules` accepts alerts.yml, and prometheus.yml loads it."""
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = promtool("check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr
    assert "1 rule files found" in config.stdout + config.stderr


def test_promtool_unit_tests_of_the_rules_pass():
    """`promtool test rules alerts_test.yml` passes: each alert fires where it should and
    nowhere else on the synthetic series."""
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_quiet():
    """Each alert of alerts.yml has a case in alerts_test.yml where it fires and one where it
    does not, so no rule goes untested."""
    [doc] = load_yaml(PROMETHEUS / "alerts_test.yml")
    checks = [check for test in doc["tests"] for check in test["alert_rule_test"]]
    fires = {c["alertname"] for c in checks if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in checks if not c.get("exp_alerts")}
    names = {rule["alert"] for rule in rules()}
    assert names - fires == set() and names - quiet == set()


def test_every_alert_has_a_summary_and_a_one_line_runbook_naming_a_command():
    """Each alert says what is wrong and, in one line, which command recovers."""
    for rule in rules():
        annotations = rule["annotations"]
        assert annotations["summary"], rule["alert"]
        runbook = annotations["runbook"]
        assert "\n" not in runbook and any(c in runbook for c in RECOVERY_COMMANDS), rule["alert"]
        assert rule["labels"]["severity"] in ("page", "warning")


def test_alerts_read_only_metrics_the_worker_exports():
    """Every metric a rule reads is exported by the worker (or is Prometheus's `up`, or one
    of the named metrics still to come), so no alert watches a name that never appears."""
    read = {name for rule in rules() for name in promql_metric_names(rule["expr"])}
    assert read - set(exported_series()) <= NOT_EXPORTED
    assert read >= {
        "stream_rater_ladders_stopped",
        "stream_rater_store_losses_total",
        "stream_rater_consumer_lag",
        "stream_rater_dead_letters_total",
        "stream_rater_ready",
        "stream_rater_partitions_assigned",
        "stream_rater_topic_partitions",
        "stream_rater_worker_up",
    }
