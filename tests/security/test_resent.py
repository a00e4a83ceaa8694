"""The Ab-Resent stamp: a recorded message sent again is checked by when it was
sent again, and only a stamp its sender's key signed for its id counts."""

from __future__ import annotations

import pytest

from actorbus import AuthError
from actorbus.security.identity import Identity
from actorbus.security.resent import RESENT_HEADER, resent_at, resent_stamp, stamped_at


def test_a_stamp_verifies_for_its_sender_and_message_only() -> None:
    sender, other = Identity.generate(), Identity.generate()
    stamp = resent_stamp(sender, "msg-1", 1_700_000_000_000)
    assert resent_at(stamp, "msg-1", sender.public) == 1_700_000_000_000
    with pytest.raises(AuthError, match="is not"):
        resent_at(stamp, "msg-1", other.public)  # someone else's key
    with pytest.raises(AuthError, match="is not"):
        resent_at(stamp, "msg-2", sender.public)  # moved onto another message
    at, _, sig = stamp.partition(".")
    with pytest.raises(AuthError, match="is not"):
        resent_at(f"{int(at) + 60_000}.{sig}", "msg-1", sender.public)  # a later time


@pytest.mark.parametrize("value", ["", "123", "abc.def", "123.", "123.!!!", ".sig"])
def test_a_malformed_stamp_is_an_auth_error(value: str) -> None:
    with pytest.raises(AuthError, match=f"malformed {RESENT_HEADER}"):
        resent_at(value, "msg-1", Identity.generate().public)


def test_without_a_stamp_the_envelope_s_own_time_counts() -> None:
    sender = Identity.generate()
    assert stamped_at("m", 42, {}, sender.public) == ("m", 42)
    headers = {RESENT_HEADER: resent_stamp(sender, "m", 99)}
    # each signed sending is taken once by the replay window: its id with its time
    assert stamped_at("m", 42, headers, sender.public) == ("m+99", 99)


def test_a_resent_message_is_taken_once_per_signed_sending() -> None:
    """A dead letter's replay, stamped by its sender's key, is taken although its
    first delivery took its id; a copy of that replay is not, nor the original."""
    from actorbus.codecs.errors import ReplayError
    from actorbus.security.replay import ReplayWindow

    sender, window = Identity.generate(), ReplayWindow(skew_ms=30_000)
    window.check(*stamped_at("m", 1_000, {}, sender.public), now_ms=1_000)
    resent = {RESENT_HEADER: resent_stamp(sender, "m", 5_000)}
    window.check(*stamped_at("m", 1_000, resent, sender.public), now_ms=5_000)
    for headers in (resent, {}):
        with pytest.raises(ReplayError):
            window.check(*stamped_at("m", 1_000, headers, sender.public), now_ms=6_000)
