import torch


def packed_row(lengths, capacity):
    """Position ids (list of `capacity` ints) and block-diagonal causal mask ((capacity, capacity)
    bool tensor) of one packed row holding documents of `lengths` tokens, then a padding tail."""
    if min(lengths, default=1) < 1:
        raise ValueError("every length must be at least 1")
    if sum(lengths) > capacity:
        raise ValueError("too many tokens for this row")
    mask = torch.zeros((capacity, capacity), dtype=torch.bool)
    pos = [0] * capacity
    start = 0
    blocks = list(lengths) + [capacity - sum(lengths)]
    for size in blocks:
        if size == 0:
            continue
        end = start + size
        mask[start:end, start:end] = torch.tril(torch.ones(size, size, dtype=torch.bool))
        pos[start:end] = list(range(size))
        start = end
    return pos, mask
