"""``checkpoint`` and the checkpoint flags of the corrections: bad usage is one line naming the
flag, exit 2, before anything is contacted."""

from __future__ import annotations

import pytest

from stream_rater.cli import main


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["checkpoint", "--ladder", "default", "--interval", "0", "--broker", "kafka://127.0.0.1:1"],
            "stream-rater checkpoint: --interval: must be > 0, got 0.0",
        ),
        (
            [
                "checkpoint",
                "--ladder",
                "default",
                "--checkpoint-every-matches",
                "0",
                "--broker",
                "kafka://127.0.0.1:1",
            ],
            "stream-rater checkpoint: --checkpoint-every-matches: must be > 0, got 0",
        ),
        (
            [
                "rerate",
                "--ladder",
                "default",
                "--since",
                "ck-1",
                "--via-topic",
                "--broker",
                "kafka://127.0.0.1:1",
            ],
            "stream-rater rerate: --since: not with --via-topic (the worker reads the matches topic itself)",
        ),
        (
            ["void", "m1", "--reason", "r", "--ladder", "default", "--checkpoint-sink", "postgres"],
            "stream-rater void: STREAM_RATER_CHECKPOINT_SINK (--checkpoint-sink) = 'postgres': expected kafka or none",
        ),
    ],
)
def test_bad_usage_is_one_line_naming_the_flag(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
):
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == line
