import torch  # noqa: F401  (yours to use: the grader runs this cell alone)


def accumulate_token_weighted(model, window):
    """Forward/backward every micro-batch of `window` so that .grad gains the gradient of one big
    batch of the whole window (mean over all its shifted loss tokens); return that count N (int).
    """
    n_tokens = []
    for mb in window:
        lab = mb["labels"][:, 1:]
        n_tokens.append(int((lab != -100).sum()))
    N = sum(n_tokens)
    if N == 0:
        raise ValueError("no loss tokens in the window")
    for mb, n in zip(window, n_tokens):
        if n == 0:
            continue
        loss = model(**mb).loss
        (loss * n / N).backward()
    return N
