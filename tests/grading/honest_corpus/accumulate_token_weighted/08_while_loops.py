import torch  # noqa: F401  (yours to use: the grader runs this cell alone)


def accumulate_token_weighted(model, window):
    """Forward/backward every micro-batch of `window` so that .grad gains the gradient of one big
    batch of the whole window (mean over all its shifted loss tokens); return that count N (int).
    """
    n_per = []
    i = 0
    while i < len(window):
        n_per.append(int((window[i]["labels"][..., 1:] != -100).sum()))
        i += 1
    big_n = sum(n_per)
    if big_n == 0:
        raise ValueError("cannot weight an empty window (no loss tokens)")
    i = 0
    while i < len(window):
        if n_per[i] > 0:
            model(**window[i], num_items_in_batch=big_n).loss.backward()
        i += 1
    return big_n
