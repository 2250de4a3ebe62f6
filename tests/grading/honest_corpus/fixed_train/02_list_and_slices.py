import torch
from torch.nn.utils import clip_grad_norm_


def fixed_train(model, optimizer, loader, accum):
    batches = list(loader)
    n_steps = len(batches) // accum
    for s in range(n_steps):
        window = batches[s * accum:(s + 1) * accum]
        tokens = [(mb["labels"][..., 1:] != -100).sum().item() for mb in window]
        total = sum(tokens)
        for mb, t in zip(window, tokens):
            if t > 0:
                model(**mb, num_items_in_batch=total).loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return n_steps
