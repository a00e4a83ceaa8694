"""Identity and signatures: the one home of every piece of security code.

- ``jcs``: RFC 8785 canonical JSON, the bytes that get signed;
- ``multibase``: base58btc, unpadded base64url, Multikey public keys;
- ``did``: ``did:wba`` DIDs, DID documents, the keys they hold and key binding;
- ``signatures``: ``sign`` / ``verify``, the one verifier (Ed25519; ECDSA as raw
  ``r || s`` only, curve checked);
- ``didwba``: the ``Authorization: DIDWba`` header (ANP 1.x);
- ``http_signatures``: RFC 9421 HTTP message signatures;
- ``keys``: key files, 0600, never logged.

The protocol edges (the ANP codec, the gateway) use these; nothing here knows
about actors or NATS. Sealed payloads and signed envelopes build on them.
"""
