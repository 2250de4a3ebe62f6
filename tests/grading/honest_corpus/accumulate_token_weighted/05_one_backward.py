import torch  # noqa: F401  (yours to use: the grader runs this cell alone)


def accumulate_token_weighted(model, window):
    """Forward/backward every micro-batch of `window` so that .grad gains the gradient of one big
    batch of the whole window (mean over all its shifted loss tokens); return that count N (int).
    """
    def loss_tokens(batch):
        return int(torch.count_nonzero(batch["labels"][:, 1:] != -100))

    sizes = list(map(loss_tokens, window))
    N = sum(sizes)
    if N <= 0:
        raise ValueError("the window holds no loss token")
    objective = 0.0
    for batch, n in zip(window, sizes):
        if n:
            objective = objective + model(**batch).loss * (n / N)
    objective.backward()
    return N
