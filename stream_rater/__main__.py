"""``python -m stream_rater`` — same as the ``stream-rater`` command."""

from stream_rater.cli import main

raise SystemExit(main())
