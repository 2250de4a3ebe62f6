import torch


def packed_forward(model, batch):
    """One forward of a packed batch that holds only `input_ids` and `position_ids` (R, T),
    with every document attending only to itself."""
    ids = batch["input_ids"]
    pos = batch["position_ids"]
    flat = pos.flatten().tolist()
    starts = [i for i, p in enumerate(flat) if p == 0]
    cu = torch.tensor(starts + [len(flat)], dtype=torch.int32, device=ids.device)
    return model(input_ids=ids, position_ids=pos, cu_seq_lens=cu)
