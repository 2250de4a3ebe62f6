import torch


def _segments(lengths, capacity):
    bad = [n for n in lengths if n <= 0]
    if bad:
        raise ValueError(f"documents need a positive length, got {bad}")
    free = capacity - sum(lengths)
    if free < 0:
        raise ValueError(f"the documents need {sum(lengths)} slots, the row has {capacity}")
    return list(lengths) + ([free] if free else [])


def packed_row(lengths, capacity):
    """Position ids (list of `capacity` ints) and block-diagonal causal mask ((capacity, capacity)
    bool tensor) of one packed row holding documents of `lengths` tokens, then a padding tail."""
    segments = _segments(lengths, capacity)
    owner = [i for i, n in enumerate(segments) for _ in range(n)]
    positions = [p for n in segments for p in range(n)]
    allowed = torch.tensor(
        [[owner[q] == owner[k] and k <= q for k in range(capacity)] for q in range(capacity)],
        dtype=torch.bool,
    )
    return positions, allowed
