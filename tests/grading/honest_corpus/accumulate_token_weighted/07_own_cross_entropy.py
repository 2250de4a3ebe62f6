import torch
import torch.nn.functional as F


def accumulate_token_weighted(model, window):
    targets = [mb["labels"][:, 1:] for mb in window]
    N = sum(int((t != -100).sum()) for t in targets)
    if N == 0:
        raise ValueError("no loss tokens")
    for mb, tgt in zip(window, targets):
        if not (tgt != -100).any():
            continue
        inputs = {k: v for k, v in mb.items() if k != "labels"}
        logits = model(**inputs).logits[:, :-1]
        loss_sum = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), tgt.reshape(-1),
                                   ignore_index=-100, reduction="sum")
        (loss_sum / N).backward()
    return N
