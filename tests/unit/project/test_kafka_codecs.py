"""Every compression codec of the Kafka protocol decodes in the worker's Kafka client: producers
we do not write (librdkafka, the Java client) compress with gzip, snappy, lz4 or zstd, and one
batch aiokafka cannot decompress stops its fetcher (`UnsupportedCodecError`). The broker
tests (tests/e2e/test_producers.py) publish each codec to a worker; this checks the install
and the image declare the libraries."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

ROOT = Path(__file__).resolve().parents[3]
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_compressed_with_each_codec_reads_back(codec: str):
    """A record batch compressed with `codec` (as any producer writes it) reads back whole."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODECS[codec],
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    values = [b'{"match_id": "m%d", "ladder": "l"}' % i for i in range(20)]
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=None, key=b"l", value=value, headers=[("h", b"v")])
    batch = DefaultRecordBatch(bytes(builder.build()))
    assert batch.compression_type == CODECS[codec]
    assert [record.value for record in batch] == values


def test_the_codec_libraries_are_runtime_dependencies_and_in_the_image():
    """pyproject requires aiokafka with its snappy, lz4 and zstd extras (cramjam), and the image
    build fails if any codec is missing."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [aiokafka] = [d for d in dependencies if re.match(r"aiokafka\b", d)]
    extras = set(re.search(r"\[(.*?)\]", aiokafka).group(1).split(","))  # type: ignore[union-attr]
    assert {"snappy", "lz4", "zstd"} <= extras, aiokafka
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert re.search(
        r"^RUN python -c .*aiokafka import codec.*'gzip', 'snappy', 'lz4', 'zstd'", dockerfile, re.M
    )
