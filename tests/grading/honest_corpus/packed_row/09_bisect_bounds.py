import bisect

import torch


def packed_row(lengths, capacity):
    """Position ids (list of `capacity` ints) and block-diagonal causal mask ((capacity, capacity)
    bool tensor) of one packed row holding documents of `lengths` tokens, then a padding tail."""
    if any(n <= 0 for n in lengths):
        raise ValueError("lengths must be positive")
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    if bounds[-1] > capacity:
        raise ValueError("overflow")
    if bounds[-1] < capacity:
        bounds.append(capacity)

    def segment(slot):
        return bisect.bisect_right(bounds, slot) - 1

    positions = [slot - bounds[segment(slot)] for slot in range(capacity)]
    allowed = torch.zeros((capacity, capacity), dtype=torch.bool)
    for q in range(capacity):
        start = bounds[segment(q)]
        allowed[q, start:q + 1] = True
    return positions, allowed
