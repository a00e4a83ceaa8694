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
    assert stamped_at("m", 42, {}, sender.public) == 42
    headers = {RESENT_HEADER: resent_stamp(sender, "m", 99)}
    assert stamped_at("m", 42, headers, sender.public) == 99
