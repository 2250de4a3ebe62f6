def accumulate_token_weighted(model, window):
    """Token-weighted: each micro-batch's mean loss times n_i / N."""
    token_counts = {}
    for i in range(len(window)):
        labels = window[i]["labels"]
        token_counts[i] = int((labels[:, 1:] != -100).sum())
    total_tokens = sum(token_counts.values())
    if total_tokens == 0:
        raise ValueError("window without loss tokens")
    for i in range(len(window)):
        if token_counts[i] == 0:
            continue
        mean_loss = model(**window[i]).loss
        scaled = mean_loss * (token_counts[i] / total_tokens)
        scaled.backward()
    return total_tokens
