"""End-to-end security: identities (did:key, did:wba), signatures, sealed payloads.

Reserved for the security layer; nothing here is imported by the bus yet.
"""
