import torch


def packed_row(lengths, capacity):
    """Position ids (list of `capacity` ints) and block-diagonal causal mask ((capacity, capacity)
    bool tensor) of one packed row holding documents of `lengths` tokens, then a padding tail."""
    docs = [int(x) for x in lengths]
    if any(d <= 0 for d in docs):
        raise ValueError("zero or negative length in " + str(docs))
    n_real = sum(docs)
    if n_real > capacity:
        raise ValueError("cannot pack %d tokens into %d slots" % (n_real, capacity))
    if n_real != capacity:
        docs.append(capacity - n_real)
    label = torch.cat([torch.full((d,), j) for j, d in enumerate(docs)])
    first = torch.tensor([0] + docs[:-1]).cumsum(0)
    position = torch.arange(capacity) - torch.repeat_interleave(first, torch.tensor(docs))
    future = torch.ones(capacity, capacity, dtype=torch.bool).triu(diagonal=1)
    mask = (label[:, None] == label[None, :]) & ~future
    return position.tolist(), mask
