import numpy as np


def accumulate_token_weighted(model, window):
    counts = np.array([(mb["labels"][..., 1:] != -100).sum().item() for mb in window],
                      dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        raise ValueError("no shifted label is a loss token in this window")
    for share, mb in zip(counts / total, window):
        if share > 0:
            (model(**mb).loss * float(share)).backward()
    return total
