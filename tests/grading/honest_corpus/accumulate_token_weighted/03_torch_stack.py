import torch


def accumulate_token_weighted(model, window):
    counts = torch.stack([(mb["labels"][:, 1:] >= 0).sum() for mb in window])
    total = int(counts.sum())
    if total == 0:
        raise ValueError(f"all {len(window)} micro-batches are without loss tokens")
    for mb, count in zip(window, counts.tolist()):
        if count:
            out = model(**mb)
            weight = count / total
            (out.loss * weight).backward()
    return total
