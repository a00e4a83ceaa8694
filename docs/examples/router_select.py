"""Protocol selection: which protocol a module described in prose should speak."""

from actorbus.services.router import Module, select

decision = select(
    Module("1", "Settlement", ("Settle orders across organizations under DID/VC identities.",))
)
record = decision.record()  # {"module_id", "selected_protocol", "evidence_spans", "rationale"}
print(record["module_id"], record["selected_protocol"])
