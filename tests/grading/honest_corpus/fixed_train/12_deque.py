from collections import deque

import torch


def fixed_train(model, optimizer, loader, accum):
    queue = deque()
    optimizer_steps = 0
    for micro in loader:
        queue.append(micro)
        if len(queue) < accum:
            continue
        with torch.no_grad():
            n_i = [int(torch.count_nonzero(m["labels"][:, 1:] + 100)) for m in queue]
        N = sum(n_i)
        for m, n in zip(queue, n_i):
            if n > 0:
                model(**m, num_items_in_batch=N).loss.backward()
        queue.clear()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        optimizer_steps += 1
    return optimizer_steps
