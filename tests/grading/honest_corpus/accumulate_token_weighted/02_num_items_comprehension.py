def accumulate_token_weighted(model, window):
    IGNORE = -100
    per_batch = [(b["labels"][..., 1:] != IGNORE).sum().item() for b in window]
    N = int(sum(per_batch))
    if not N:
        raise ValueError("window has no tokens to learn from")
    for b, n in zip(window, per_batch):
        if n > 0:
            model(**b, num_items_in_batch=N).loss.backward()
    return N
