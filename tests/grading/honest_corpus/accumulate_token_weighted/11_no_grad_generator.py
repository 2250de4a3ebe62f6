import torch


def accumulate_token_weighted(model, window):
    with torch.no_grad():
        sizes = [int(torch.sum(b["labels"][:, 1:] != -100)) for b in window]
    everything = sum(sizes)
    if everything == 0:
        raise ValueError("window holds zero loss tokens")
    for b in (b for b, s in zip(window, sizes) if s):
        model(**b, num_items_in_batch=torch.tensor(everything)).loss.backward()
    return everything
