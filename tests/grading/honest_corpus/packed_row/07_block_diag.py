import torch


def packed_row(lengths, capacity):
    """Position ids (list of `capacity` ints) and block-diagonal causal mask ((capacity, capacity)
    bool tensor) of one packed row holding documents of `lengths` tokens, then a padding tail."""
    if not all(n > 0 for n in lengths):
        raise ValueError("lengths must all be > 0")
    rest = capacity - sum(lengths)
    if rest < 0:
        raise ValueError("row too short for these documents")
    parts = [n for n in lengths] + ([rest] if rest > 0 else [])
    tri = [torch.ones(n, n).tril() for n in parts]
    allowed = torch.block_diag(*tri).bool()
    positions = torch.cat([torch.arange(n) for n in parts]).tolist()
    return positions, allowed
