import torch


def packed_row(lengths, capacity):
    """Position ids (list of `capacity` ints) and block-diagonal causal mask ((capacity, capacity)
    bool tensor) of one packed row holding documents of `lengths` tokens, then a padding tail."""
    lens = torch.as_tensor(list(lengths), dtype=torch.long)
    if (lens <= 0).any():
        raise ValueError(f"lengths must be positive: {lengths}")
    used = int(lens.sum())
    if used > capacity:
        raise ValueError(f"{used} > capacity {capacity}")
    if used < capacity:
        lens = torch.cat([lens, torch.tensor([capacity - used])])
    seg_id = torch.repeat_interleave(torch.arange(len(lens)), lens)
    starts = torch.cumsum(lens, 0) - lens
    pos = torch.arange(capacity) - starts[seg_id]
    same = seg_id.unsqueeze(0) == seg_id.unsqueeze(1)
    causal = torch.tril(torch.ones(capacity, capacity, dtype=torch.bool))
    return pos.tolist(), same & causal
