import torch


def fixed_train(model, optimizer, loader, accum):
    collected, steps = [], 0
    for batch in loader:
        collected.append(batch)
        if len(collected) != accum:
            continue
        n_tok = [int(torch.sum(b["labels"][:, 1:] != -100)) for b in collected]
        window_tokens = sum(n_tok)
        window_loss = sum(model(**b).loss * (k / window_tokens)
                          for b, k in zip(collected, n_tok) if k)
        window_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps += 1
        collected = []
    return steps
