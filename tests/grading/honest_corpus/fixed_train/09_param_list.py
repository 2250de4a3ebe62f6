import torch


def fixed_train(model, optimizer, loader, accum):
    """The recipe's loop with the bug fixed: every optimiser step uses the gradient of one big
    batch of its `accum` micro-batches (mean over all their loss tokens), clipped to norm 1; return
    the number of optimiser steps taken. A last window of fewer than `accum` micro-batches takes
    no step (the recipe drops it); a micro-batch without a loss token adds nothing to the gradient
    but still counts as one of its window's `accum` (the grade's loaders have a loss token in
    every window)."""
    params = [p for p in model.parameters() if p.requires_grad]
    held = []
    done = 0
    for piece in loader:
        held.append(piece)
        if len(held) == accum:
            counts = []
            for h in held:
                counts.append((h["labels"][:, 1:] != -100).sum().item())
            everything = sum(counts)
            for h, c in zip(held, counts):
                if c:
                    model(**h, num_items_in_batch=everything).loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            held = []
            done = done + 1
    return done
