import itertools

import torch


def packed_row(lengths, capacity):
    """Position ids and mask of one packed row (padding tail counted as its own segment)."""
    if any(length <= 0 for length in lengths):
        raise ValueError("all lengths must be positive")
    if sum(lengths) > capacity:
        raise ValueError("the lengths add up to more than the capacity")
    sizes = [*lengths, capacity - sum(lengths)]
    ranges = [range(size) for size in sizes if size]
    positions = list(itertools.chain.from_iterable(ranges))
    doc = list(itertools.chain.from_iterable([i] * len(r) for i, r in enumerate(ranges)))
    doc_t = torch.tensor(doc)
    allowed = torch.eq(doc_t.view(-1, 1), doc_t.view(1, -1)).tril()
    return positions, allowed
