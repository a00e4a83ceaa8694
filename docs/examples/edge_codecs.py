"""The edge codecs: one envelope inside, each protocol's own shape outside."""

from actorbus.codecs.edge import bridge, codec

acp_run_request = {
    "agent_name": "summarizer",
    "input": [{"role": "user", "parts": [{"content_type": "text/plain", "content": "hi"}]}],
    "mode": "sync",
}
envelope = codec("acp").decode(acp_run_request)  # ACP -> envelope
print(envelope.dst, envelope.intent, repr(envelope.content))

a2a_message = codec("a2a").encode(envelope)  # envelope -> A2A 1.0 message
agora_request = bridge(a2a_message, "a2a", "agora")  # decode, then encode
print(agora_request["body"])
