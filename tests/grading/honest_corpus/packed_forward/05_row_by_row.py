import torch


def packed_forward(model, batch):
    """One forward of a packed batch that holds only `input_ids` and `position_ids` (R, T),
    with every document attending only to itself."""
    ids = batch["input_ids"]
    positions = batch["position_ids"]
    rows, width = ids.shape
    offsets = []
    for r in range(rows):
        for t in range(width):
            if int(positions[r, t]) == 0:
                offsets.append(r * width + t)
    offsets.append(rows * width)
    cu_seq_lens = torch.tensor(offsets, dtype=torch.int32, device=ids.device)
    return model(input_ids=ids, position_ids=positions, cu_seq_lens=cu_seq_lens)
