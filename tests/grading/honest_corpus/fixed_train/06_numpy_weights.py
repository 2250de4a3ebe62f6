import numpy as np
import torch


def fixed_train(model, optimizer, loader, accum):
    micro_batches = [mb for mb in loader]
    usable = len(micro_batches) - len(micro_batches) % accum
    steps = 0
    for start in range(0, usable, accum):
        group = micro_batches[start:start + accum]
        n = np.array([int((g["labels"][..., 1:] != -100).sum()) for g in group])
        weights = n / n.sum() if n.sum() else np.zeros_like(n, dtype=float)
        for g, w in zip(group, weights):
            if w > 0:
                (model(**g).loss * float(w)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps += 1
    return steps
