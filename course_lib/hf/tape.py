"""A paper autograd, part one: a training step recorded as sizes, nodes and lifetimes.

:mod:`~course_lib.hf.models` writes a model's forward pass on a :class:`Tape` as the
autograd nodes PyTorch creates (one per differentiable op, in creation order), each with the
tensors it saves and a short *backward program*: the buffers its backward allocates, in order.
:func:`~course_lib.hf.replay.replay` applies PyTorch's rules to the record.

Backward program instructions, sizes in bytes:

``("new", key, n)``    allocate buffer ``key``        ``("del", key)``       free it early
``("param", pid, n)``  a parameter's gradient          ``("grad", i, key)``   ``key`` is the
gradient of input ``i``; ``"g"`` (``"g1"``, ...) is the incoming gradient of output 0 (1, ...),
passed on without a copy. ``("release", j)``: the node is done with its saved tensor ``j``;
in a checkpointed block, where the node's unpacked copy is its only holder, it dies there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

LOSS = "logits_and_loss"  # the component whose tensors the breakdown reports on their own


@dataclass
class Node:
    """One autograd node: what it saves and what its backward allocates (module docstring)."""

    name: str  # where it is, e.g. "layers.3.mlp.down_proj"
    component: str  # the breakdown bucket its saved tensors count towards
    inputs: tuple[int, ...]  # tensor ids it sends gradients to (-1: none)
    outputs: tuple[int, ...]  # tensor ids it created (their gradients arrive as g, g1, ...)
    saves: tuple[int, ...]
    program: tuple[tuple, ...]
    region: int | None = None  # the checkpointed block it belongs to, if any
    # Tensors the node keeps as attributes of its ctx (``ctx.A = A``), not through
    # ``save_for_backward``: the backward never releases them (they live as long as the graph,
    # which the loss holds through the step) and checkpointing's saved-tensor hooks never see
    # them, so a checkpointed block keeps them from its first forward on.
    held: tuple[int, ...] = ()


@dataclass
class Tape:
    """The forward pass as recorded: tensor sizes and events in creation order.

    Events: ``("new", t)`` a tensor is allocated; ``("drop", t)`` its Python reference is gone;
    ``("node", Node)`` an autograd node is created; ``("keep", t)`` a checkpointed block saves its
    input ``t`` until its backward is over (``"capture"``: holds it the same way, unsaved), or
    (outside a block) ``t`` outlives the step. Each event carries its block (``None``: none).
    """

    nbytes: list[int] = field(default_factory=list)
    needs_grad: list[bool] = field(default_factory=list)
    component: list[str] = field(default_factory=list)
    made_by: list[str] = field(default_factory=list)  # the op that allocated each tensor
    base: dict[int, int] = field(default_factory=dict)  # a view -> the tensor it looks into
    events: list[tuple] = field(default_factory=list)
    region: int | None = None  # the checkpointed block being recorded
    n_regions: int = 0
    loss: int = -1  # the loss scalar: where the backward pass starts
    # reentrant checkpointing (torch.utils.checkpoint(use_reentrant=True): every transformers 4
    # release's default, pinned by its pull request 28538 and changed in 5 by 43203): a block's
    # first forward runs without grad, so no node of it exists to keep
    # anything on its ctx, and its recomputation runs the whole block
    reentrant: bool = False
    # floating-point operations (2 per multiply-add) by phase and element size: "forward@2",
    # "backward@2", "recompute@2" (a checkpointed block's forward, run again), ...
    flops: dict[str, float] = field(default_factory=dict)

    def tensor(self, nbytes: int, grad: bool = True, component: str = "", name: str = "") -> int:
        """A new tensor of ``nbytes`` made by op ``name`` (an event); returns its id.

        Args:
            nbytes: its size.
            grad: it needs a gradient.
            component: its breakdown bucket.
            name: the op that made it.

        Returns:
            Its id.
        """
        self.nbytes.append(int(nbytes))
        self._written("forward", nbytes)
        self.needs_grad.append(grad)
        self.component.append(component)
        self.made_by.append(name)
        self.events.append(("new", len(self.nbytes) - 1, self.region))
        return len(self.nbytes) - 1

    def grad(self, t: int) -> bool:
        """Does tensor ``t`` need a gradient (``-1``, no tensor: no)?

        Args:
            t: a tensor id (-1: none).

        Returns:
            Whether it needs a gradient.
        """
        return t >= 0 and self.needs_grad[t]

    def count(self, forward: float, backward: float, b: int) -> None:
        """Count one op's floating-point operations in ``b``-byte elements: its forward, its
        backward, and its forward again when it is in a checkpointed block (recomputed).

        Args:
            forward: the forward's operations.
            backward: the backward's operations.
            b: bytes per element of what it multiplies (the matmul's dtype).
        """
        again = forward if self.region is not None else 0
        for phase, n in (("forward", forward), ("backward", backward), ("recompute", again)):
            if n:
                key = f"{phase}@{b}"
                self.flops[key] = self.flops.get(key, 0) + n

    def _written(self, phase: str, nbytes: float) -> None:
        """Bytes the step writes (every tensor it makes), the memory traffic of its elementwise
        kernels: ``"forward@written"``, ``"backward@written"``, ``"recompute@written"``."""
        for key in (f"{phase}@written", "recompute@written" if self.region is not None and
                    phase == "forward" else ""):  # fmt: skip
            if key and nbytes:
                self.flops[key] = self.flops.get(key, 0) + nbytes

    def view(self, t: int, of: int) -> int:
        """Mark ``t`` (made with 0 bytes) a view of ``of``: saving it keeps ``of`` alive.

        Args:
            t: the view's id.
            of: the tensor it looks into.

        Returns:
            ``t``.
        """
        self.base[t] = self.base.get(of, of)
        return t

    def op(
        self, name: str, component: str, inputs: list[int], out_bytes: list[int],
        saves: tuple[int | str, ...] = (), program: Iterable[tuple] = (), trainable: bool = False,
        held: tuple[int, ...] = (),
    ) -> list[int]:  # fmt: skip
        """Allocate one op's outputs and record its autograd node, if it gets one.

        PyTorch makes a node only when an input needs a gradient or a trainable parameter is
        used, and then the outputs need gradients too.

        Args:
            name: where the op is (``"layers.3.mlp.down_proj"``).
            component: the breakdown bucket of its outputs and saved tensors.
            inputs: the tensors it reads (those that need a gradient get one).
            out_bytes: the size of each output.
            saves: what ``save_for_backward`` keeps; may name ``"out"`` (output 0) and
                ``"out1"`` (the last output).
            program: the backward program (module docstring).
            trainable: a trainable parameter is used (the node exists even without inputs
                that need a gradient).
            held: tensors kept on the node's ``ctx`` directly (:class:`Node`).

        Returns:
            The output ids.
        """
        needs = trainable or any(self.grad(t) for t in inputs)
        outs = [self.tensor(n, needs, component, name) for n in out_bytes]
        if needs:
            named = {"out": outs[0], "out1": outs[-1]}
            ids = [named[t] if isinstance(t, str) else t for t in saves]
            kept = tuple(self.base.get(t, t) for t in ids)
            ins = tuple(t if self.grad(t) else -1 for t in inputs)
            pinned = tuple(self.base.get(t, t) for t in held)
            node = Node(name, component, ins, tuple(outs), kept, tuple(program), self.region,
                        pinned)  # fmt: skip
            self.events.append(("node", node, self.region))
            self._written("backward", sum(i[2] for i in node.program if i[0] in ("new", "param")))
        return outs

    def keep(self, t: int) -> None:
        """``t`` outlives the step (the loss the caller holds, a leaf's AccumulateGrad node).

        Args:
            t: the tensor's id.
        """
        self.events.append(("keep", t, None))

    def drop(self, *tensors: int) -> None:
        """The Python references to ``tensors`` are gone (what a node saved lives on).

        Args:
            *tensors: their ids.
        """
        self.events.extend(("drop", t, self.region) for t in tensors)

    def begin_checkpoint(self, args: tuple[int, ...], captured: tuple[int, ...] = ()) -> None:
        """Start a checkpointed block. Its positional ``args`` (saved for the recomputation)
        and the tensors its function ``captured`` live until its backward ends.

        Args:
            args: the block's positional tensor arguments.
            captured: tensors its function captured.
        """
        self.region = self.n_regions
        self.n_regions += 1
        self.events.extend(("keep", t, self.region) for t in args)
        self.events.extend(("capture", t, self.region) for t in captured)

    def end_checkpoint(self) -> None:
        """Close the checkpointed region that :meth:`begin_checkpoint` opened."""
        self.region = None
