"""What the checks of deploy/ share: its YAML files, the metric names a PromQL expression reads, and
the series the worker exports."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

# registers the worker's and the archive's metrics for `exported_series`
from stream_rater.service import archiver, metrics  # noqa: F401


def load_yaml(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


_PROMQL_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
}


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (label matchers, label lists, ranges,
    strings, functions and keywords removed)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]', " ", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", expr)
    return {n for n in names if n not in _PROMQL_KEYWORDS}


def exported_series() -> dict[str, str]:
    """Series name → metric family, for the service's metrics in the default registry."""
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    return {
        family.name + suffix: family.name
        for family in REGISTRY.collect()
        if family.name.startswith("stream_rater_")
        for suffix in suffixes[family.type]
    }
