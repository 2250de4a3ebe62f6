import torch  # noqa: F401  (yours to use: the grader runs this cell alone)


def accumulate_token_weighted(model, window):
    """Forward/backward every micro-batch of `window` so that .grad gains the gradient of one big
    batch of the whole window (mean over all its shifted loss tokens); return that count N (int).
    """
    masks = [batch["labels"][:, 1:].ne(-100) for batch in window]
    n_total = sum(int(m.sum()) for m in masks)
    if n_total < 1:
        raise ValueError(f"window of {len(window)} micro-batches has no loss tokens")
    for idx, batch in enumerate(window):
        n_here = int(masks[idx].sum())
        if n_here:
            loss = model(**batch).loss
            loss.mul(n_here / n_total).backward()
    return n_total
