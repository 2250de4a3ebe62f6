import numpy as np
import torch


def packed_row(lengths, capacity):
    lengths = np.asarray(lengths, dtype=np.int64)
    if np.any(lengths <= 0):
        raise ValueError("non-positive document length")
    if lengths.sum() > capacity:
        raise ValueError("documents overflow the row")
    tail = capacity - int(lengths.sum())
    sizes = np.append(lengths, tail) if tail else lengths
    ids = np.concatenate([np.full(s, i) for i, s in enumerate(sizes)])
    positions = np.concatenate([np.arange(s) for s in sizes])
    q = np.arange(capacity)[:, None]
    k = np.arange(capacity)[None, :]
    allowed = (ids[:, None] == ids[None, :]) & (k <= q)
    return [int(p) for p in positions], torch.from_numpy(allowed)
