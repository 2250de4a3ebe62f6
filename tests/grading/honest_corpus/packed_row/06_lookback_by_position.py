import torch


def packed_row(lengths, capacity):
    """Position ids (list of `capacity` ints) and block-diagonal causal mask ((capacity, capacity)
    bool tensor) of one packed row holding documents of `lengths` tokens, then a padding tail."""
    if any(length < 1 for length in lengths):
        raise ValueError("a document has no tokens")
    if sum(lengths) > capacity:
        raise ValueError("does not fit")
    positions = []
    for length in lengths:
        positions += list(range(length))
    positions += list(range(capacity - len(positions)))
    # a query sees the keys of its own document up to itself: its position says how far back
    # the document started
    allowed = torch.zeros(capacity, capacity, dtype=torch.bool)
    for q, p in enumerate(positions):
        allowed[q, q - p : q + 1] = True
    return positions, allowed
