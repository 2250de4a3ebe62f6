import torch


def _loss_tokens(mb):
    return int(mb["labels"][:, 1:].ne(-100).sum())


def _backward_window(model, window):
    N = sum(_loss_tokens(mb) for mb in window)
    if N == 0:
        return
    for mb in window:
        n = _loss_tokens(mb)
        if n:
            model(**mb, num_items_in_batch=N).loss.backward()


def fixed_train(model, optimizer, loader, accum):
    taken = 0
    pending = []
    for mb in loader:
        pending.append(mb)
        if len(pending) == accum:
            _backward_window(model, pending)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            taken += 1
            pending.clear()
    return taken
