import itertools

import torch


def fixed_train(model, optimizer, loader, accum):
    it = iter(loader)
    n_steps = 0
    while True:
        window = list(itertools.islice(it, accum))
        if len(window) < accum:
            break
        sizes = [int((w["labels"][:, 1:] != -100).sum()) for w in window]
        denom = sum(sizes)
        for w, size in zip(window, sizes):
            if size:
                loss = model(**w).loss * (size / denom)
                loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        n_steps += 1
    return n_steps
