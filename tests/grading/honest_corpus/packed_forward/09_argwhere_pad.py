import torch
import torch.nn.functional as F


def packed_forward(model, batch):
    pos_ids = batch["position_ids"]
    starts = torch.argwhere(pos_ids.flatten() == 0).flatten().to(torch.int32)
    cu_seq_lens = F.pad(starts, (0, 1), value=pos_ids.numel())
    return model(input_ids=batch["input_ids"], position_ids=pos_ids, cu_seq_lens=cu_seq_lens)
