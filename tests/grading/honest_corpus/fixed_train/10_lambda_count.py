import torch


def fixed_train(model, optimizer, loader, accum):
    count_loss = lambda mb: int((mb["labels"][..., 1:] != -100).sum())  # noqa: E731
    data = list(loader)
    full_windows = len(data) // accum
    for w in range(full_windows):
        chunk = data[w * accum : w * accum + accum]
        N = sum(map(count_loss, chunk))
        for mb in chunk:
            n = count_loss(mb)
            if n:
                (model(**mb).loss * n / N).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return full_windows
