"""Capability tokens (the A2ACP spec's claims and validation rules) and its rate
limits, without a broker."""

from __future__ import annotations

import pytest

from actorbus.codecs.errors import AuthError, RateLimitedError
from actorbus.security.identity import Identity
from actorbus.security.tokens import RateLimits, TokenIssuer, TokenVerifier

NOW = 1_800_000_000


@pytest.fixture
def issuer() -> TokenIssuer:
    return TokenIssuer(Identity.generate(), "a_domain")


def test_a_token_carries_the_specs_claims_and_passes_its_rules(issuer: TokenIssuer) -> None:
    token, expires = issuer.issue("tester", "datasets", ["read:datasets"], ttl=600, now=NOW)
    assert expires == NOW + 600
    grant = TokenVerifier.of(issuer).check(
        token, "datasets", "fetch", ["read:datasets"], now=NOW + 1
    )
    assert grant.subject == "tester"
    assert grant.domain == "a_domain"
    assert grant.capabilities == {"read:datasets"}


@pytest.mark.parametrize(
    ("target", "intent", "required", "at", "why"),
    [
        ("datasets", "fetch", ["read:datasets"], NOW + 601, "expired"),
        ("billing", "fetch", ["read:datasets"], NOW + 1, "is for 'datasets'"),
        ("datasets", "drop", ["write:datasets"], NOW + 1, "lacks the capability"),
        ("datasets", "drop", None, NOW + 1, "lacks the capability for 'drop'"),
    ],
)
def test_each_broken_rule_is_named(
    issuer: TokenIssuer,
    target: str,
    intent: str,
    required: list[str] | None,
    at: int,
    why: str,
) -> None:
    token, _ = issuer.issue("tester", "datasets", ["read:datasets"], ttl=600, now=NOW)
    with pytest.raises(AuthError, match=why):
        TokenVerifier.of(issuer).check(token, target, intent, required, now=at)


def test_forged_and_foreign_tokens_do_not_verify(issuer: TokenIssuer) -> None:
    verifier = TokenVerifier.of(issuer)
    rogue = TokenIssuer(Identity.generate(), "a_domain")  # same names, other key
    forged, _ = rogue.issue("tester", "datasets", ["*"])
    with pytest.raises(AuthError, match="does not verify"):
        verifier.check(forged, "datasets", "anything")
    good, _ = issuer.issue("tester", "datasets", ["*"])
    head, _, sig = good.split(".")
    with pytest.raises(AuthError, match="does not verify"):  # claims swapped under a real signature
        verifier.check(f"{head}.{forged.split('.')[1]}.{sig}", "datasets", "anything")
    with pytest.raises(AuthError, match="compact JWT"):
        verifier.check("not-a-token", "datasets", "x")
    assert verifier.check(good, "datasets", "anything").capabilities == {"*"}
    other = TokenIssuer(issuer.identity, "b_domain")  # the right key, the wrong issuer name
    renamed, _ = other.issue("tester", "datasets", ["*"])
    with pytest.raises(AuthError, match="issuer"):
        verifier.check(renamed, "datasets", "x")


def test_the_rate_limits_refuse_with_retry_after() -> None:
    limits = RateLimits(per_agent=5, per_collaboration=3, global_limit=8, span=60)
    for i in range(3):
        limits.take("a", "x", now=100 + i)
    with pytest.raises(RateLimitedError, match="a -> x collaboration") as info:
        limits.take("a", "x", now=110)
    assert info.value.retry_after == 50  # the first of the three leaves at 160
    limits.take("a", "y", now=111)
    limits.take("a", "y", now=112)
    with pytest.raises(RateLimitedError, match="a's rate limit"):
        limits.take("a", "z", now=113)
    for i in range(3):
        limits.take("b", f"t{i}", now=114)
    with pytest.raises(RateLimitedError, match="global"):
        limits.take("c", "x", now=115)
    limits.take("a", "x", now=161)  # a minute on, the window has moved
