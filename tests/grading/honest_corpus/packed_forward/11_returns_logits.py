import torch


def packed_forward(model, batch):
    """One forward of a packed batch that holds only `input_ids` and `position_ids` (R, T),
    with every document attending only to itself."""
    ids, pos = batch["input_ids"], batch["position_ids"]
    flat = pos.reshape(-1)
    cu = [i for i in range(flat.numel()) if flat[i].item() == 0] + [flat.numel()]
    output = model(input_ids=ids, position_ids=pos,
                   cu_seq_lens=torch.tensor(cu, device=ids.device, dtype=torch.int32))
    return output.logits
