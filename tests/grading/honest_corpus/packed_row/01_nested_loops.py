import torch


def packed_row(lengths, capacity):
    """Position ids (list of `capacity` ints) and block-diagonal causal mask ((capacity, capacity)
    bool tensor) of one packed row holding documents of `lengths` tokens, then a padding tail."""
    for n in lengths:
        if n <= 0:
            raise ValueError(f"length {n} is not positive")
    total = sum(lengths)
    if total > capacity:
        raise ValueError(f"{total} tokens do not fit in {capacity}")
    segs = list(lengths)
    if total < capacity:
        segs.append(capacity - total)
    positions = []
    doc = []
    for i, n in enumerate(segs):
        for p in range(n):
            positions.append(p)
            doc.append(i)
    allowed = torch.zeros(capacity, capacity, dtype=torch.bool)
    for q in range(capacity):
        for k in range(q + 1):
            if doc[q] == doc[k]:
                allowed[q, k] = True
    return positions, allowed
