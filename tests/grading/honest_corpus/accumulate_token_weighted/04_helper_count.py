import torch


def count_targets(labels):
    # position t predicts labels[t+1]; the first label is never a target
    shifted = labels[..., 1:]
    return int(shifted.ne(-100).sum().item())


def accumulate_token_weighted(model, window):
    """Forward/backward every micro-batch of `window` so that .grad gains the gradient of one big
    batch of the whole window (mean over all its shifted loss tokens); return that count N (int).
    """
    sizes = [count_targets(micro["labels"]) for micro in window]
    grand_total = sum(sizes)
    if grand_total == 0:
        raise ValueError("nothing to train on: the window has no loss token")
    for micro, size in zip(window, sizes):
        if size == 0:
            continue  # 0/0 would be NaN
        loss = model(**micro, num_items_in_batch=grand_total).loss
        loss.backward()
    return grand_total
