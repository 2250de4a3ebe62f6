import torch  # noqa: F401  (yours to use: the grader runs this cell alone)


def accumulate_token_weighted(model, window):
    """Forward/backward every micro-batch of `window` so that .grad gains the gradient of one big
    batch of the whole window (mean over all its shifted loss tokens); return that count N (int).
    """
    # The big batch's loss is (S_1 + ... + S_k) / N, where S_i is the summed loss of micro-batch i
    # and N the loss tokens of the whole window. model(**mb).loss gives S_i / n_i, so multiplying
    # by n_i / N gives S_i / N, and the gradients add up in .grad.
    label_counts = [(micro_batch["labels"][:, 1:] != -100).sum().item() for micro_batch in window]
    N = int(sum(label_counts))
    if N == 0:
        raise ValueError("the window has no loss token; refusing to back-propagate NaN")
    for micro_batch, n_i in zip(window, label_counts):
        if n_i == 0:
            continue
        S_i_over_n_i = model(**micro_batch).loss
        (S_i_over_n_i * n_i / N).backward()
    return N
