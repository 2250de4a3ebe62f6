import torch


def packed_row(lengths, capacity):
    lengths = list(lengths)
    if any(l <= 0 for l in lengths):  # noqa: E741
        raise ValueError(f"bad lengths {lengths}")
    if sum(lengths) > capacity:
        raise ValueError(f"sum(lengths)={sum(lengths)} exceeds capacity={capacity}")
    doc_of_slot = torch.empty(capacity, dtype=torch.long)
    pos_of_slot = torch.empty(capacity, dtype=torch.long)
    slot = 0
    doc = 0
    for l in lengths + [capacity - sum(lengths)]:  # noqa: E741
        doc_of_slot[slot:slot + l] = doc
        pos_of_slot[slot:slot + l] = torch.arange(l)
        slot += l
        doc += 1
    causal = torch.arange(capacity)[:, None] >= torch.arange(capacity)[None, :]
    same_doc = doc_of_slot[:, None] == doc_of_slot[None, :]
    return pos_of_slot.tolist(), causal & same_doc
