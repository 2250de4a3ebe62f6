import torch


def packed_forward(model, batch):
    """One forward of a packed batch that holds only `input_ids` and `position_ids` (R, T),
    with every document attending only to itself."""
    # positions restart at 0 at each document: count the run of each document
    flat = batch["position_ids"].view(-1).tolist()
    doc_lengths = []
    for p in flat:
        if p == 0:
            doc_lengths.append(1)
        else:
            doc_lengths[-1] += 1
    cu = [0]
    for n in doc_lengths:
        cu.append(cu[-1] + n)
    return model(
        input_ids=batch["input_ids"],
        position_ids=batch["position_ids"],
        cu_seq_lens=torch.tensor(cu, dtype=torch.int32, device=batch["input_ids"].device),
    )
