"""Sharding measured per rank: one training step of a tiny model in ``devices`` gloo processes on
the CPU, counted by the meter, for each way of dividing the work.

* ``"ddp"``: ``DistributedDataParallel`` (its gradient buckets are made when it wraps the model);
* ``"zero1"``: DDP with ``torch.distributed.optim.ZeroRedundancyOptimizer`` (each rank keeps the
  AdamW states of the whole tensors PyTorch's greedy partition gives it);
* ``"fsdp"``: FSDP2 ``fully_shard`` on every decoder layer and the root (parameters, gradients and
  states divided on dim 0; each layer's parameters gathered for its forward and backward);
* ``"fsdp-bf16"`` and ``"fsdp-bf16-reduce-bf16"``: the same with FSDP2's mixed precision, the
  recipe most multi-GPU fine-tunes run (fp32 parameters, gradients and AdamW states sharded;
  ``MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=...)``: each layer gathered
  and computed in bf16, its gradients reduce-scattered in fp32 or in bf16).

Per rank it reports the bytes the wrapping allocated (``wrap``), the counted peak of a steady
step (``zero_grad``, forward, backward, ``optimizer.step()``; the parameters, the batch, the
optimiser's states and DDP's rebuilt buckets already exist: two steps made them), what that
step leaves (the gradients), and the optimiser's state bytes on the rank (``states``). Torch
is imported inside the functions: ``course_lib.hf`` stays free of it.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

MODES = ("ddp", "zero1", "fsdp", "fsdp-bf16", "fsdp-bf16-reduce-bf16")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wrap(mode: str, model, rank: int):
    """Wrap ``model`` for ``mode``; returns ``(model, optimizer)`` (AdamW, foreach)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    if mode.startswith("fsdp"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
        policy = MixedPrecisionPolicy()  # none: compute in the parameters' dtype
        if mode != "fsdp":
            reduce = torch.bfloat16 if mode.endswith("reduce-bf16") else torch.float32
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        return model, torch.optim.AdamW(model.parameters(), foreach=True)
    ddp = DistributedDataParallel(model)
    if mode == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        opt = ZeroRedundancyOptimizer(
            ddp.parameters(), optimizer_class=torch.optim.AdamW, foreach=True
        )
        return ddp, opt
    return ddp, torch.optim.AdamW(ddp.parameters(), foreach=True)


def counted(fn: Callable[[], object], timeline: list | None = None) -> dict:
    """Run ``fn()`` under a live-bytes counter like the meter's that also sees what FSDP2 does
    outside dispatched ops: a ``DTensor``'s bytes are its local shard's (the wrapper reports
    the global size and holds nothing), and storages resized in place count (FSDP2 frees a
    layer's gathered parameters with ``untyped_storage().resize_(0)``). Returns ``peak`` and
    ``retained`` bytes.

    Args:
        fn: the step (or wrap) to count.
        timeline: a list to append ``(op, live bytes)`` to, or ``None``.

    Returns:
        ``{"peak": ..., "retained": ...}`` in bytes.
    """
    import weakref

    import torch
    from torch.utils._pytree import tree_flatten

    from ..memory.meter import LiveBytesTracker

    def local(t):
        return t._local_tensor if hasattr(t, "_local_tensor") else t

    class Tracker(LiveBytesTracker):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            seen = tree_flatten((args, kwargs))[0]
            inputs = {local(a).untyped_storage()._cdata for a in seen if torch.is_tensor(a)}
            for t in tree_flatten(out)[0]:
                if not torch.is_tensor(t):
                    continue
                storage = local(t).untyped_storage()
                key, nbytes = storage._cdata, storage.nbytes()
                if key in inputs or key in self._live:
                    continue
                self._live[key] = nbytes
                self.live_bytes += nbytes
                self.peak_bytes = max(self.peak_bytes, self.live_bytes)
                weakref.finalize(storage, self._release, key, nbytes)
                if timeline is not None:
                    timeline.append((str(func), nbytes, self.live_bytes))
            return out

    tracker = Tracker()
    original = torch.UntypedStorage.resize_

    def resize(storage, nbytes):
        key, before = storage._cdata, storage.nbytes()
        out = original(storage, nbytes)
        if tracker._live.get(key, before) == before:  # tracked, or made before: count it here
            tracker._live[key] = nbytes
            tracker.live_bytes += nbytes - before
            tracker.peak_bytes = max(tracker.peak_bytes, tracker.live_bytes)
            if timeline is not None:
                timeline.append(("resize_", nbytes - before, tracker.live_bytes))
        return out

    torch.UntypedStorage.resize_ = resize  # type: ignore[method-assign]
    try:
        with tracker:
            fn()
    finally:
        torch.UntypedStorage.resize_ = original  # type: ignore[method-assign]
    return {"peak": tracker.peak_bytes, "retained": tracker.live_bytes}


def _worker(rank: int, devices: int, port: int, config: dict, shape, out: str) -> None:
    import torch
    import torch.distributed as dist
    import transformers

    from ..memory.hf_check import build_model

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=devices)
    torch.set_num_threads(1)
    results = {}
    try:
        cfg = transformers.AutoConfig.for_model(**config)
        for mode in MODES:
            model = build_model(cfg, dtype=torch.float32, attn_impl="sdpa", seed=0)
            holder: dict = {}

            def wrap_it(m=model, mode=mode, holder=holder):
                holder.update(zip(("m", "o"), _wrap(mode, m, rank)))

            wrap = counted(wrap_it)
            wrapped, opt = holder["m"], holder["o"]
            gen = torch.Generator().manual_seed(rank)
            ids = torch.randint(cfg.vocab_size, shape, generator=gen)

            def step(m=wrapped, o=opt, ids=ids):
                o.zero_grad(set_to_none=True)
                m(input_ids=ids, labels=ids, use_cache=False).loss.backward()
                o.step()

            # the first step makes the optimiser's states, and DDP rebuilds its buckets in the
            # order gradients came (at the second forward): the third step is the steady one
            step()
            step()
            report = counted(step)
            inner = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer's local AdamW
            states = sum(v.to_local().untyped_storage().nbytes() if hasattr(v, "to_local") else
                         v.untyped_storage().nbytes() for s in inner.state.values()
                         for v in s.values() if torch.is_tensor(v) and v.dim() > 0)  # fmt: skip
            results[mode] = {"wrap": wrap["retained"], "peak": report["peak"],
                             "retained": report["retained"], "states": states}  # fmt: skip
            dist.barrier()
    finally:
        Path(out, f"rank{rank}.json").write_text(json.dumps(results))
        dist.destroy_process_group()


def measure_sharded(config: dict, batch_size: int, seq_len: int, devices: int = 2) -> list[dict]:
    """Per rank, per mode (:data:`MODES`): ``wrap``, ``peak``, ``retained`` and ``states``
    bytes of one step (module docstring). ``config``: a small config dict (``model_type`` and
    its fields). Raises ``RuntimeError`` when a rank fails (its error is in the message).

    Args:
        config: a tiny config dict.
        batch_size: rows per rank.
        seq_len: tokens per row.
        devices: gloo processes.

    Returns:
        One dict per rank, mode -> ``wrap``, ``peak``, ``retained``, ``states``.
    """
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_worker, args=(devices, _free_port(), config, (batch_size, seq_len), out),
                 nprocs=devices)  # fmt: skip
        return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(devices)]
