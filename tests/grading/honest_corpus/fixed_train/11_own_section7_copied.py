import torch


def accumulate_token_weighted(model, window):
    sizes = [int((mb["labels"][:, 1:] != -100).sum()) for mb in window]
    N = sum(sizes)
    if N == 0:
        raise ValueError("no loss tokens")
    for mb, n in zip(window, sizes):
        if n:
            (model(**mb).loss * (n / N)).backward()
    return N


def fixed_train(model, optimizer, loader, accum):
    window, steps = [], 0
    for mb in loader:
        window.append(mb)
        if len(window) == accum:
            accumulate_token_weighted(model, window)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
            window = []
    return steps
