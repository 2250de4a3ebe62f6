"""A paper autograd, part two: PyTorch's rules for when each byte of a step lives and dies.

:func:`replay` runs a :class:`~course_lib.hf.tape.Tape` without a single tensor:

* the forward pass allocates every output; a tensor dies when its Python reference is dropped and
  no node saved it (a checkpointed block's nodes save nothing: the block keeps its inputs);
* the backward pass runs the nodes in reverse creation order (what the engine does for one graph
  on one device); a node's incoming gradient and saved tensors are freed when it returns, and
  only then are the gradients it made added into its inputs' buffers: the first one is stolen, a
  second one costs a new buffer for the sum (``old + new``) before both go;
* a parameter's gradient stays (``zero_grad(set_to_none=True)`` before the step); a tied weight's
  second gradient is summed with the first into a new buffer, then both go;
* a checkpointed block (non-reentrant ``torch.utils.checkpoint``) runs its forward again when its
  first saved tensor is needed, and stops once the last one exists (autograd saves an op's
  inputs before running it, so that op's outputs never do).

The most bytes alive at any moment is the step's peak, named by the node that allocated them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .tape import LOSS, Node, Tape


@dataclass
class Replayed:
    """What :func:`replay` found, in bytes above what existed before the step.

    At the peak: ``activations`` (tensors kept for backward or still referenced, loss aside),
    ``logits_and_loss`` (the loss's tensors), ``gradients`` (parameters' gradients made so far)
    and ``transient`` (gradients flowing back and the backward's temporaries) add up to ``peak``.
    """

    peak: int
    peak_at: str
    activations: int
    logits_and_loss: int
    gradients: int
    transient: int
    forward_peak: int
    saved: dict[str, int]  # kept for backward at the end of the forward, by component
    # Per allocation: (where, live bytes after it, parameter gradients finished before its node,
    # then the live bytes by kind: activations, logits_and_loss, gradients, transient). With
    # every gradient already there (accumulation) the live bytes are ``live - finished + all``:
    # a gradient in the making is a buffer until AccumulateGrad adds it in place.
    log: list[tuple[str, int, int, int, int, int, int]] | None = None
    forward_events: int = 0  # the log's entries made by the forward pass
    flops: dict[str, float] | None = None  # the step's operations (Tape.flops)


class _Ledger:
    """Live bytes by kind, and the peak with its split (see :class:`Replayed`)."""

    def __init__(self, tape: Tape, log: bool) -> None:
        self.tape = tape
        self.live = {"activations": 0, LOSS: 0, "gradients": 0, "transient": 0}
        self.total = 0
        self.peak = (0, "", dict(self.live))
        self.holds = [0] * len(tape.nbytes)  # Python reference + saves + keeps
        self.grads: dict[int, list[int]] = {}  # gradient buffer -> [bytes, references]
        self.buffer: dict[int, int] = {}  # tensor -> the gradient accumulating for it
        self.params: set = set()
        self.next_grad = 0
        self.grads_before = 0  # parameter gradients finished by the nodes that already ran
        self.producers: dict = {}  # parameter -> nodes still to make part of its gradient
        self.log: list | None = [] if log else None

    def add(self, kind: str, n: int, where: str) -> None:
        self.live[kind] += n
        self.total += n
        if n > 0 and self.total > self.peak[0]:
            self.peak = (self.total, where, dict(self.live))
        if self.log is not None and n > 0:
            k = self.live
            self.log.append((where, self.total, self.grads_before, k["activations"], k[LOSS],
                             k["gradients"], k["transient"]))  # fmt: skip

    def _kind(self, t: int) -> str:
        return LOSS if self.tape.component[t] == LOSS else "activations"

    def hold(self, t: int, where: str = "") -> None:
        if self.holds[t] == 0:
            self.add(
                self._kind(t), self.tape.nbytes[t], where or self.tape.made_by[t] + " (forward)"
            )
        self.holds[t] += 1

    def release(self, t: int) -> None:
        self.holds[t] -= 1
        if self.holds[t] == 0:
            self.add(self._kind(t), -self.tape.nbytes[t], "")

    def new_grad(self, n: int, where: str) -> int:
        self.add("transient", n, where)
        self.next_grad += 1
        self.grads[self.next_grad] = [n, 1]
        return self.next_grad

    def unref(self, gid: int) -> None:
        entry = self.grads[gid]
        entry[1] -= 1
        if entry[1] == 0:
            self.add("transient", -entry[0], "")
            del self.grads[gid]


def replay(tape: Tape, log: bool = False) -> Replayed:
    """Replay the step recorded on ``tape`` (module docstring); ``log`` keeps every allocation.

    Args:
        tape: the recorded step.
        log: keep every allocation (for :mod:`~course_lib.hf.scaling`).

    Returns:
        The :class:`Replayed` peak and its split.
    """
    r = _Ledger(tape, log)
    nodes, saved = _forward(r, tape)
    forward_peak, forward_events = r.peak[0], len(r.log or ())
    r.buffer[tape.loss] = r.new_grad(tape.nbytes[tape.loss], "loss")  # ones_like(loss)
    for node in nodes:
        for ins in node.program:
            if ins[0] == "param":
                r.producers[ins[1]] = r.producers.get(ins[1], 0) + 1
    regions: dict[int, list[tuple]] = {}  # checkpointed block -> its events
    for kind, item, region in tape.events:
        if region is not None:
            regions.setdefault(region, []).append((kind, item))
    first_of_region = {reg: next(it for k, it in ev if k == "node") for reg, ev in regions.items()}
    keeps = {reg: [it for k, it in ev if k in ("keep", "capture")] for reg, ev in regions.items()}
    # reentrant: the whole block is one node, so its recomputation comes before any of its
    # nodes runs, and what it made lives until the block's backward returns
    later: dict[int, list[int]] = {}
    for node in reversed(nodes):
        events = None
        if node.region is not None and (node.saves or tape.reentrant):
            events = regions.pop(node.region, None)
        if events is not None and node.region is not None:
            if not tape.reentrant:
                _pin(r, events)
            later[node.region] = _recompute(r, events, tape.reentrant)
        _run_node(r, node)
        if node.region is not None and first_of_region[node.region] is node:
            for t in keeps[node.region] + later.pop(node.region, []):  # the block's frame goes
                r.release(t)
    total, where, split = r.peak
    return Replayed(total, where, split["activations"], split[LOSS], split["gradients"],
                    split["transient"], forward_peak, saved, r.log, forward_events,
                    dict(tape.flops))  # fmt: skip


def _forward(r: _Ledger, tape: Tape) -> tuple[list[Node], dict[str, int]]:
    nodes: list[Node] = []
    saved: dict[str, int] = {}
    counted: set[int] = set()
    dropped: set[int] = set()

    def count(component: str, t: int) -> None:
        if t not in counted:
            counted.add(t)
            saved[component] = saved.get(component, 0) + tape.nbytes[t]

    for kind, item, region in tape.events:
        if kind == "new":
            r.hold(item)
        elif kind == "drop":
            dropped.add(item)
            r.release(item)
        elif kind in ("keep", "capture"):
            r.hold(item)
            if kind == "keep" and region is not None:  # saved for the block's recomputation
                count("checkpointed inputs", item)
        else:
            nodes.append(item)
            if region is None:  # a checkpointed block's saves hold nothing until recomputed
                for t in item.saves:
                    count(tape.component[t], t)  # by what the tensor is, not who keeps it
                    r.hold(t)
            if region is not None and tape.reentrant:
                continue  # run without grad: no node, nothing on a ctx
            for t in item.held:  # on the node's ctx: they live as long as the graph (the step)
                count(tape.component[t], t)
                r.hold(t)
    for t in range(len(tape.nbytes)):  # the forward returns: Python lets go of the rest
        if t not in dropped:
            r.release(t)
    return nodes, saved


def _pin(r: _Ledger, events: list[tuple]) -> None:
    """Before a block is recomputed: what its nodes hold on their ``ctx`` (``Node.held``) is
    the first forward's storage, which lives on with the graph; the recomputation makes its
    own copy, so the tensor's id is let go (its bytes stay counted) for that copy."""
    for kind, item in events:
        if kind == "node":
            for t in item.held:
                r.holds[t] -= 1


def _recompute(r: _Ledger, events: list[tuple], whole: bool = False) -> list[int]:
    """Run a checkpointed block's forward again, up to the last tensor it saves (``whole``:
    reentrant checkpointing, to its end, and what it made outlives it: returned, for the
    caller to let go once the block's backward is over)."""
    events = [(kind, item) for kind, item in events if kind not in ("keep", "capture")]
    last = max(i for i, (kind, item) in enumerate(events) if kind == "node" and item.saves)
    stop = events[last][1]
    unborn = {t for t in stop.outputs if t not in stop.saves}
    if whole:
        last, unborn = len(events) - 1, set()
    made: set[int] = set()
    on_ctx: list[int] = []  # what the recomputed nodes keep on their ctx (Node.held)
    for kind, item in events[: last + 1]:
        if kind == "new" and item not in unborn:
            r.hold(item, r.tape.made_by[item] + " (recomputed)")
            made.add(item)
        elif kind == "drop" and item in made:
            made.discard(item)
            r.release(item)
        elif kind == "node":
            for t in item.saves:
                r.hold(t, f"{item.name} (recomputed)")
            for t in item.held:
                r.hold(t, f"{item.name} (recomputed)")
                on_ctx.append(t)
    # the recomputation stops: its own references die with it, and so does its graph, whose
    # nodes kept tensors on their ctx (reentrant: the block's outputs and graph live on)
    if whole:
        return [*made, *on_ctx]
    for t in [*made, *on_ctx]:
        r.release(t)
    return []


def _run_node(r: _Ledger, node: Node) -> None:
    temps: dict[str, int] = {}
    for i, t in enumerate(node.outputs):
        gid = r.buffer.pop(t, None)
        if gid is not None:
            temps["g" if i == 0 else f"g{i}"] = gid
    handed: list[tuple[int, int]] = []
    tied: list[int] = []
    released: set[int] = set()
    for ins in node.program:
        if ins[0] == "new":
            temps[ins[1]] = r.new_grad(ins[2], node.name)
        elif ins[0] == "del":
            r.unref(temps.pop(ins[1]))
        elif ins[0] == "param" and ins[1] in r.params:
            r.add("transient", ins[2], node.name)
            tied.append(ins[2])  # a tied weight's second gradient
        elif ins[0] == "param":
            r.add("gradients", ins[2], node.name)
            r.params.add(ins[1])
        elif ins[0] == "grad" and ins[2] in temps and node.inputs[ins[1]] >= 0:
            r.grads[temps[ins[2]]][1] += 1
            handed.append((node.inputs[ins[1]], temps[ins[2]]))
        elif ins[0] == "release" and node.region is not None:
            r.release(node.saves[ins[1]])  # a recomputed input dies with its last use
            released.add(ins[1])
    for gid in temps.values():  # the node returns: its buffers and incoming gradients go
        r.unref(gid)
    for j, t in enumerate(node.saves):
        if j not in released:
            r.release(t)
    for n in tied:  # AccumulateGrad: grad = grad + new, out of place, then both old ones go
        r.add("transient", n, node.name + " (sum into the tied weight's gradient)")
        r.add("transient", -2 * n, "")
    for ins in node.program:  # a gradient is finished once its last producer ran (tied: two)
        if ins[0] == "param":
            r.producers[ins[1]] -= 1
            r.grads_before += ins[2] * (r.producers[ins[1]] == 0)
    for t, gid in handed:
        old = r.buffer.get(t)
        if old is None:
            r.buffer[t] = gid
            continue
        total = r.new_grad(r.tape.nbytes[t], node.name + " (sum of gradients)")
        r.unref(old)
        r.unref(gid)
        r.buffer[t] = total
