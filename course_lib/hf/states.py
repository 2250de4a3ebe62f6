"""The bytes that do not depend on the batch: weights, adapters, gradients, optimiser states.

Each figure is the allocation code's own arithmetic, read from the library that allocates it:

* **weights** ``"16bit"``: ``P x b``. ``"nf4"`` (bitsandbytes ``Params4bit``, QLoRA): every
  projection but the head packed two values a byte (``n / 2``), a quantisation constant per
  block of 64 (fp32, 4 bytes: ``n / 16``), or with double quantisation a uint8 per block plus
  an fp32 constant per 256 blocks and a 256-entry fp32 code per tensor; the other weights
  (embeddings, norms, head) in the model's dtype, or fp32 after
  ``prepare_model_for_kbit_training``. ``"int8"`` (``Int8Params``): one byte per value and an
  fp32 scale per output row.
* **optimisers** (per trainable parameter ``n``): ``"adamw"`` ``torch.optim.AdamW``, two moments
  in the parameter's dtype; ``"adamw-mixed"`` fp32 master weights and fp32 moments (``4 + 8``
  bytes) beside 16-bit weights; ``"adamw-8bit"`` / ``"paged-adamw-8bit"`` bitsandbytes'
  block-wise state: two uint8 states and an fp32 ``absmax`` per 256 values each (tensors under
  4,096 values keep fp32 states) and the two 256-entry quantisation maps; the paged one
  allocates the large tensors' states in CUDA unified memory, outside the PyTorch allocator
  (:func:`paged_state_bytes`); ``"sgd"`` none (``"sgd-momentum"``: one buffer).
* **the optimiser step's temporaries** (:func:`optimizer_step_bytes`): ``foreach`` AdamW
  (CUDA's default) makes ``torch._foreach_sqrt(exp_avg_sq)``, one more copy of the second
  moment, freed after the step; the single-tensor path two of one tensor and one of the one
  before; the fused kernel none.
"""

from __future__ import annotations

from dataclasses import dataclass

OPTIMIZERS = ("adamw", "adamw-mixed", "adamw-8bit", "paged-adamw-8bit", "sgd", "sgd-momentum")
BNB_BLOCK = 256  # bitsandbytes' 8-bit optimiser block
BNB_MIN_8BIT = 4096  # tensors smaller than this keep 32-bit states (min_8bit_size)
BNB_QMAPS = 2 * 256 * 4  # qmap1 and qmap2: 256 fp32 values each, one pair per optimiser
BNB_PAGED_MIN = 10**5  # get_state_buffer pages a tensor's states from this many values
NF4_BLOCK = 64
NF4_NESTED_BLOCK = 256


def nf4_bytes(n: int, double_quant: bool = True) -> int:
    """Storage of one ``n``-value weight in NF4: the packed values and its constants.

    Args:
        n: values in the weight.
        double_quant: with the second-level constants.

    Returns:
        Bytes stored.
    """
    blocks = -(-n // NF4_BLOCK)
    packed = -(-n // 2)
    if not double_quant:
        return packed + blocks * 4
    return packed + blocks + -(-blocks // NF4_NESTED_BLOCK) * 4 + 256 * 4 + 4


def int8_bytes(n_in: int, n_out: int) -> int:
    """Storage of one ``n_out x n_in`` LLM.int8 weight: the values and a scale per row.

    Args:
        n_in: input features.
        n_out: output features.

    Returns:
        Bytes stored.
    """
    return n_in * n_out + n_out * 4


def optimizer_state_bytes(shapes: list[int], optimizer: str, param_b: int) -> int:
    """Optimiser state for trainable tensors of ``shapes`` (module docstring).

    Args:
        shapes: the element count of each trainable tensor.
        optimizer: one of :data:`OPTIMIZERS`.
        param_b: bytes per element of the trainable parameters (``torch.optim`` keeps its
            moments and momentum in the parameters' dtype).

    Returns:
        Bytes of state, all of it (for the paged optimiser, :func:`paged_state_bytes` of it
        lives in CUDA unified memory).

    Raises:
        ValueError: an optimiser not in :data:`OPTIMIZERS`.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r} is not one of {OPTIMIZERS}")
    total = 0
    for n in shapes:
        if optimizer == "adamw":
            total += 2 * n * param_b
        elif optimizer == "adamw-mixed":
            total += 4 * n + 8 * n  # fp32 master copy + two fp32 moments
        elif optimizer in ("adamw-8bit", "paged-adamw-8bit"):
            if n < BNB_MIN_8BIT:
                total += 2 * n * 4
            else:
                total += 2 * (n + -(-n // BNB_BLOCK) * 4)
        elif optimizer == "sgd-momentum":
            total += n * param_b
    eight_bit = optimizer in ("adamw-8bit", "paged-adamw-8bit")
    if eight_bit and any(n >= BNB_MIN_8BIT for n in shapes):
        total += BNB_QMAPS  # the two quantisation maps, shared by every tensor
    return total


def paged_state_bytes(shapes: list[int], optimizer: str) -> int:
    """The part of :func:`optimizer_state_bytes` a paged optimiser keeps in CUDA unified memory
    (``cudaMallocManaged``, outside PyTorch's allocator, paged out to the CPU when the card is
    full): bitsandbytes' ``get_state_buffer`` pages only the two states of tensors of at least
    :data:`BNB_PAGED_MIN` values; their ``absmax``, the quantisation maps and smaller tensors'
    states stay in device memory.

    Args:
        shapes: the element count of each trainable tensor.
        optimizer: one of :data:`OPTIMIZERS` (only ``"paged-adamw-8bit"`` pages anything).

    Returns:
        Bytes in unified memory.
    """
    if optimizer != "paged-adamw-8bit":
        return 0
    return sum(2 * n for n in shapes if n >= BNB_PAGED_MIN)


def optimizer_step_bytes(
    shapes: list[int], optimizer: str, param_b: int, foreach: bool, fused: bool = False
) -> int:
    """The optimiser step's own temporaries, in bytes (checked on the CPU with the meter).

    ``torch.optim.AdamW``: ``foreach`` (CUDA's default) makes ``torch._foreach_sqrt(exp_avg_sq)``,
    one more copy of the second moment; the single-tensor path computes ``denom =
    (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` tensor by tensor, so at its widest
    the square root, the quotient and the previous tensor's ``denom`` (still bound to the
    local) are alive; the fused kernel (``fused=True``, the Trainer's default
    ``adamw_torch_fused``) updates in place. With fp32 master weights, the fp32 copy of each
    gradient. SGD and the bitsandbytes optimisers update in place.

    Args:
        shapes: the element count of each trainable tensor, in the optimiser's order.
        optimizer: one of :data:`OPTIMIZERS`.
        param_b: bytes per element of the trainable parameters.
        foreach: the multi-tensor path.
        fused: the fused kernel (wins over ``foreach``).

    Returns:
        Bytes at the step's widest moment, above its states and gradients.
    """
    n = sum(shapes)
    if optimizer == "adamw":
        if fused:
            return 0
        if foreach:
            return n * param_b
        prev = [0, *shapes[:-1]]
        return max((2 * m + p for m, p in zip(shapes, prev)), default=0) * param_b
    if optimizer == "adamw-mixed":
        return n * 4 + (n * 4 if foreach and not fused else 0)
    return 0


# DeepSpeed ZeRO-3 steps its optimiser one sub-group of this rank's partitions at a time
# (``DeepSpeedZeroOptimizer_Stage3.step``): ``_prepare_fp32_grad_for_sub_group`` flattens the
# group's gradients (``torch.cat``: a copy in their dtype) and casts that to fp32, the fp32 copy
# lives through the group's update and ``_release_sub_group`` drops it. A group closes once it
# holds ``sub_group_size`` elements (``_create_fp16_sub_groups``); DeepSpeed's default is 1e9
# (``runtime/zero/config.py``), read at commit edaa722 (August 2026).
DEEPSPEED_SUB_GROUP = 10**9


def largest_sub_group(shapes: list[int], size: int = DEEPSPEED_SUB_GROUP) -> int:
    """The elements of the largest of DeepSpeed ZeRO-3's optimiser sub-groups on this rank.

    Args:
        shapes: this rank's partition of each trained tensor, in the optimiser's order.
        size: ``sub_group_size``.

    Returns:
        The largest group's elements (a group closes at the first tensor that takes it to
        ``size`` or more, so it can pass ``size`` by one tensor).
    """
    best = group = 0
    for n in shapes:
        group += n
        if group >= size:
            best, group = max(best, group), 0
    return max(best, group)


def zero3_step_bytes(shapes: list[int], grad_b: int, size: int = DEEPSPEED_SUB_GROUP) -> int:
    """DeepSpeed ZeRO-3's step temporaries with fp32 master weights (``adamw-mixed``): the
    largest sub-group's gradients flattened in their dtype and cast to fp32, both alive for a
    moment (its FusedAdam makes nothing more).

    Args:
        shapes: this rank's partition of each trained tensor, in order.
        grad_b: bytes per gradient element (the model's dtype).
        size: ``sub_group_size``.

    Returns:
        Bytes.
    """
    return largest_sub_group(shapes, size) * (grad_b + 4)


def greedy_partition(shapes: list[int], devices: int) -> list[list[int]]:
    """``torch.distributed.optim.ZeroRedundancyOptimizer``'s partition: whole tensors, largest
    first, each to the rank holding the fewest elements so far (the first such rank).

    Args:
        shapes: the element count of each tensor.
        devices: ranks.

    Returns:
        Each rank's tensors (element counts).
    """
    ranks: list[list[int]] = [[] for _ in range(devices)]
    sizes = [0] * devices
    for n in sorted(shapes, reverse=True):  # sorted() is stable, as the optimiser's is
        r = sizes.index(min(sizes))
        ranks[r].append(n)
        sizes[r] += n
    return ranks


@dataclass
class Sharding:
    """How states, gradients and weights divide over ``devices`` (per rank).

    ``"none"``: data parallel (``DistributedDataParallel``). ``"zero1"`` / ``"zero2"``: the
    optimiser states (and for zero2 the gradients) divided; states as PyTorch's
    ``ZeroRedundancyOptimizer`` divides them (:func:`greedy_partition`; the most loaded rank
    counts), gradients as an even flat split. ``"zero3"`` / ``"fsdp"``: everything divided as
    FSDP2's ``fully_shard`` does: each tensor on dim 0, padded so every rank holds
    ``ceil(rows / devices)`` rows.

    Raises:
        ValueError: a mode not in :data:`SHARDING`, or ``devices`` not a positive int.
    """

    devices: int = 1
    mode: str = "none"  # "none" (DDP), "zero1", "zero2", "zero3", "fsdp"
    offload: bool = False  # optimizer states (and master weights) kept on the CPU

    def __post_init__(self) -> None:
        if self.mode not in SHARDING:
            raise ValueError(f"sharding={self.mode!r} is not one of {SHARDING}")
        if isinstance(self.devices, bool) or not isinstance(self.devices, int) or self.devices < 1:
            raise ValueError(f"devices must be a positive int, got {self.devices!r}")

    @property
    def dim0(self) -> bool:
        return self.mode in ("zero3", "fsdp") and self.devices > 1

    def local(self, dims: list[tuple[int, int]]) -> list[int]:
        """The elements of each tensor this rank holds.

        Args:
            dims: ``(rows, row length)`` per tensor.

        Returns:
            Elements per tensor on this rank.
        """
        if self.dim0:
            return [-(-rows // self.devices) * cols for rows, cols in dims]
        return [rows * cols for rows, cols in dims]

    def weights(self, total: int) -> int:
        """Stored bytes that cannot be split by tensor (4/8-bit storage): an even split.

        Args:
            total: bytes over every rank.

        Returns:
            This rank's bytes.
        """
        return -(-total // self.devices) if self.dim0 else total

    def gradients(self, dims: list[tuple[int, int]], b: int) -> int:
        """Bytes of this rank's gradients of the tensors ``dims`` at ``b`` bytes an element:
        ZeRO-2 keeps an even share of them, FSDP its dim-0 shards, the rest every one.

        Args:
            dims: ``(rows, row length)`` per tensor.
            b: bytes per element.

        Returns:
            This rank's gradient bytes.
        """
        if self.mode == "zero2" and self.devices > 1:
            return -(-sum(r * c for r, c in dims) * b // self.devices)
        return sum(self.local(dims)) * b

    def state_shapes(self, dims: list[tuple[int, int]]) -> list[int]:
        """The tensors whose optimiser state this rank keeps (the most loaded rank).

        Args:
            dims: ``(rows, row length)`` per tensor.

        Returns:
            The element counts whose state this rank keeps.
        """
        if self.mode in ("zero1", "zero2") and self.devices > 1:
            ranks = greedy_partition([r * c for r, c in dims], self.devices)
            return max(ranks, key=sum)
        return self.local(dims)

    def ddp_buckets(self, grad_bytes: int) -> int:
        """``DistributedDataParallel`` (data parallel, and under a ZeRO-1 optimiser) keeps its
        gradient buckets beside the gradients (``gradient_as_bucket_view=False``, the
        default): one more copy of every trainable gradient, made when it wraps the model.

        Args:
            grad_bytes: every trainable gradient's bytes.

        Returns:
            The buckets' bytes (0 where DDP does not wrap).
        """
        return grad_bytes if self.devices > 1 and self.mode in ("none", "zero1") else 0

    def gathered(
        self, root_bytes: int, layer_bytes: int, layer_grad_bytes: int,
        reduce_bytes: int | None = None, root_module_bytes: int | None = None,
    ) -> int:  # fmt: skip
        """What FSDP2 (``fully_shard`` on each decoder layer and the root) holds unsharded in
        the backward, by its design (``torch/distributed/fsdp/_fully_shard``): the root's
        parameters (embeddings, final norm, head: gathered at the first forward, resharded only
        after the backward), the current layer and the one prefetched for the backward, and for
        a full fine-tune that layer's unsharded gradients and its reduce-scatter input. Checked
        per rank against counted bytes (``tests/library/test_hf_sharding.py``): conservative,
        since not all of them are live at once. With a mixed-precision policy
        (``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=...)`` on fp32 parameters)
        the gathered parameters and their gradients are in the compute dtype and the
        reduce-scatter input in ``reduce_dtype`` (``reduce_bytes``). DeepSpeed's ZeRO-3
        (``"zero3"``) gathers each module in its pre-forward (and pre-backward) hook and
        releases it after: at most the largest module running (a layer, the embedding or the
        head) and the next layer prefetched, never the whole root at once.

        Args:
            root_bytes: the root's parameters, unsharded.
            layer_bytes: one layer's parameters, unsharded.
            layer_grad_bytes: one layer's gradients, unsharded (0: none held).
            reduce_bytes: one layer's reduce-scatter input (``None``: as its gradients).
            root_module_bytes: the largest root module (the embedding or the head).

        Returns:
            Bytes held unsharded at once (0 without dim-0 sharding).
        """
        if not self.dim0:
            return 0
        scatter = layer_grad_bytes if reduce_bytes is None else reduce_bytes
        if self.mode == "zero3":  # DeepSpeed: each module gathered as it runs, freed after it
            root = max(root_module_bytes or 0, layer_bytes)
            return root + layer_bytes + layer_grad_bytes + scatter
        return root_bytes + 2 * layer_bytes + layer_grad_bytes + scatter


SHARDING = ("none", "zero1", "zero2", "zero3", "fsdp")
