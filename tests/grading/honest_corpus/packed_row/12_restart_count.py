import torch


def packed_row(lengths, capacity):
    """Position ids (list of `capacity` ints) and block-diagonal causal mask ((capacity, capacity)
    bool tensor) of one packed row holding documents of `lengths` tokens, then a padding tail."""
    # validate
    for i, n in enumerate(lengths):
        if n <= 0:
            raise ValueError(f"document {i} has length {n}; lengths must be positive")
    if sum(lengths) > capacity:
        raise ValueError(f"lengths {list(lengths)} need {sum(lengths)} slots, capacity is "
                         f"{capacity}")
    # positions restart at every document and at the padding tail
    pos = torch.zeros(capacity, dtype=torch.long)
    offset = 0
    for n in list(lengths) + [capacity - sum(lengths)]:
        pos[offset:offset + n] = torch.arange(n)
        offset += n
    # segment number = how many restarts so far
    seg = torch.cumsum((pos == 0).long(), dim=0)
    keep = (seg.unsqueeze(1) == seg.unsqueeze(0)) & torch.ones(capacity, capacity).tril().bool()
    return pos.tolist(), keep
