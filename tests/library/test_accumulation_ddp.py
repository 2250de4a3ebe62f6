"""Two gloo ranks on the CPU: DDP + token-weighted accumulation equals one process's full batch.

Rank 0 sees 3 + 12 loss tokens, rank 1 sees 400 + 150. DDP averages the two ranks' gradients;
``accumulate_gradients`` sums the window's tokens over ranks and multiplies by the world size, so
the average is the mean over all 565 tokens, exactly as one process with every row would get.
"""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import micro_batch, tiny_model
from torch.nn.parallel import DistributedDataParallel

from course_lib.accumulation import accumulate_gradients, concatenate_micro_batches
from course_lib.model import TinyGPT
from course_lib.token_log import TokensPerStepLogger

WORLD_SIZE = 2
ROWS_PER_RANK = [  # per rank, per micro-batch: rows of (prompt_len, completion_len)
    [[(20, 3)], [(5, 12), (30, 0)]],
    [[(10, 200), (50, 200)], [(8, 150)]],
]


pytestmark = pytest.mark.usefixtures("one_thread")


def windows() -> list[list[dict]]:
    gen = torch.Generator().manual_seed(0)
    return [[micro_batch(gen, rows) for rows in rank_rows] for rank_rows in ROWS_PER_RANK]


def model() -> TinyGPT:
    return tiny_model()


def flat_grad(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.detach().double().flatten() for p in module.parameters()])


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD_SIZE
    )
    try:
        ddp = DistributedDataParallel(model())
        window = windows()[rank]
        result = {}
        for mode in ("token_weighted", "mean"):
            ddp.zero_grad(set_to_none=True)
            stats = accumulate_gradients(ddp, window, mode)
            result[mode] = (flat_grad(ddp.module), stats)
        logger = TokensPerStepLogger()
        for mb in window:
            logger.log_micro_batch(mb)
        result["step"] = logger.end_step()
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="torch.distributed with gloo is not built in",
)
def test_two_gloo_ranks_match_the_single_process_full_batch(tmp_path):
    # fork: the children reuse the imported torch instead of paying 2-4 s each to import it
    mp.start_processes(
        _worker,
        args=(str(tmp_path / "init"), str(tmp_path)),
        nprocs=WORLD_SIZE,
        join=True,
        start_method="fork",
    )
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD_SIZE)]

    single = model()
    every_row = [mb for window in windows() for mb in window]
    full_loss = single(**concatenate_micro_batches(every_row)).loss
    full_loss.backward()
    g_full = flat_grad(single)

    g0, stats0 = ranks[0]["token_weighted"]
    g1, stats1 = ranks[1]["token_weighted"]
    assert torch.equal(g0, g1)  # DDP left both ranks with the same averaged gradient
    error = float((g0 - g_full).norm() / g_full.norm())
    assert error <= 1e-6, f"2-rank token-weighted gradient is {error:.2e} off the full batch"
    assert (stats0.total_loss_tokens, stats1.total_loss_tokens) == (15, 550)
    assert stats0.window_loss_tokens == stats1.window_loss_tokens == 565
    assert stats0.world_size == 2
    assert stats0.loss_per_token == pytest.approx(float(full_loss.detach()), rel=1e-5)
    assert stats1.loss_per_token == pytest.approx(stats0.loss_per_token, rel=1e-12)

    # the plain `loss / accum` loop: each of the 4 micro-batches weighs 1/4
    g_mean, _ = ranks[0]["mean"]
    assert float((g_mean - g_full).norm() / g_full.norm()) > 0.1

    step = ranks[0]["step"]
    assert (step.n_devices, step.examples, step.micro_batches, step.loss_tokens) == (2, 6, 2, 565)
