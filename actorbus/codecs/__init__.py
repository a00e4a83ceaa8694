"""The canonical envelope, its wire encodings and the error taxonomy.

Protocol codecs (A2A, ACP, ANP, Agora, A2ACP, AgentAnycast) live beside these
modules and convert at the edges (their shared, protocol-neutral helpers in
:mod:`actorbus.codecs.common`); inside the bus only the envelope travels.
"""

from actorbus.codecs.envelope import Envelope, EnvelopeContext, EnvelopeMeta
from actorbus.codecs.wire import Encoding, SizeLimits, decode_envelope, encode_envelope

__all__ = [
    "Encoding",
    "Envelope",
    "EnvelopeContext",
    "EnvelopeMeta",
    "SizeLimits",
    "decode_envelope",
    "encode_envelope",
]
