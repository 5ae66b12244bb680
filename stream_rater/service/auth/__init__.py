"""Authentication, scopes and rate limits of the HTTP servers (`guard.protect`), and the API
tokens ``stream-rater token new`` makes (`tokens`)."""

from stream_rater.service.auth.guard import Guard, check_exposure, protect
from stream_rater.service.auth.tokens import new_token

__all__ = ["Guard", "check_exposure", "new_token", "protect"]
