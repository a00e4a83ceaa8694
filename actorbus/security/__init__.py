"""Identity and signatures: the one home of every piece of security code.

- ``jcs``: RFC 8785 canonical JSON, the bytes that get signed;
- ``multibase``: base58btc, unpadded base64url, Multikey public keys;
- ``did``: ``did:wba`` DIDs, DID documents, the keys they hold and key binding;
- ``signatures``: ``sign`` / ``verify``, the one verifier (Ed25519; ECDSA as raw
  ``r || s`` only, curve checked);
- ``didwba``: the ``Authorization: DIDWba`` header (ANP 1.x);
- ``http_signatures``: RFC 9421 HTTP message signatures;
- ``keys``: key files, 0600, never logged;
- ``identity``: Ed25519 + X25519 identities, did:key, DID documents;
- ``credentials``: a namespace authority's credentials (Ed25519 JWTs);
- ``sessions``: signed sessions, AES-256-GCM sealing and tags;
- ``replay``: the replay window and the clock-skew check;
- ``tokens``: A2ACP capability tokens and rate limits;
- ``broker``: NATS JWT auth (nkeys, nats-jwt) and the development TLS CA;
- ``resolver``: did:wba documents of outside identities, with a TTL cache.

The protocol edges (the ANP codec, the gateway) and the bus's guard
(``security/guard.py``) use these; nothing here knows about actors or NATS
subjects.
"""
