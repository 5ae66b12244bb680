"""``verify``'s flags: bad usage is one line naming the flag, exit 2, before anything is contacted."""

from __future__ import annotations

import pytest

from stream_rater.cli import main


@pytest.mark.parametrize("tolerance", ["-1", "nan"])
def test_a_negative_or_nan_tolerance_is_refused(tolerance: str, capsys: pytest.CaptureFixture[str]):
    argv = ["verify", "--ladder", "default", "--tolerance", tolerance, "--broker", "kafka://127.0.0.1:1"]
    assert main(argv) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"stream-rater verify: --tolerance: must be >= 0, got {float(tolerance)}"
    )
