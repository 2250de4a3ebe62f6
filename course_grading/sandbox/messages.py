"""Messages from a student's kernel: one over the cap is refused before any of it is read.

jupyter_client reads a whole message into memory and then deserialises it, so the output cap
(``execute.py``) came too late: one 600 MiB ``display`` message took a worker to 1.87 GB. zmq's
``MAXMSGSIZE`` makes zmq refuse a message whose size, read from its frame header, is over the
cap: nothing of it is read, and the connection is dropped for good (a protocol error ends the
zmq session; it is not retried). ``RCVHWM`` bounds how many messages may wait unread, so the
grader holds at most ``RCVHWM`` × the cap per channel whatever the kernel sends.

``GuardedKernelClient`` sets both on every socket it opens. ``MessageGuard`` watches each
channel's socket monitor: a drop that is not retried while the kernel lives is a refused
message. On IOPub (outputs) the channel is opened afresh and the notebook goes on (the rest of
that cell's output is lost; the cell is flagged); on the shell channel (replies) it cannot go on,
so the kernel is stopped and the notebook fails with that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import zmq
from jupyter_client.asynchronous import AsyncKernelClient
from zmq.utils.monitor import parse_monitor_message

#: Messages that may wait unread on one socket.
QUEUED = 8
#: Seconds to wait for zmq to retry a dropped connection (it does unless the drop was a refusal).
RETRY_WAIT = 0.5
EVENTS = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_CONNECT_DELAYED


def cap_context(context: zmq.Context, max_bytes: int) -> None:
    """Every socket ``context`` makes from now on refuses messages over ``max_bytes``.

    Args:
        context: the zmq context the kernel client's sockets are made from.
        max_bytes: the largest message (bytes) a socket accepts; a larger one is refused unread.
    """
    context.setsockopt(zmq.MAXMSGSIZE, max_bytes)
    context.setsockopt(zmq.RCVHWM, QUEUED)


class GuardedKernelClient(AsyncKernelClient):
    """An async kernel client whose sockets refuse messages over ``max_bytes`` unread."""

    max_bytes: int = 32 * 2**20

    def _create_connected_socket(self, channel: str, identity: bytes | None = None):
        cap_context(self.context, self.max_bytes)  # options must be set before connecting
        return super()._create_connected_socket(channel, identity)


class MessageGuard:
    """Watch a client's channels for refused messages (module docstring)."""

    def __init__(
        self,
        client: GuardedKernelClient,
        alive: Callable[[], Awaitable[bool]],
        stop_kernel: Callable[[], Awaitable[None]],
    ) -> None:
        """Remember the client and how to ask after (and end) its kernel; nothing is watched yet.

        Args:
            client: the ``GuardedKernelClient`` whose shell and IOPub channels are watched.
            alive: an async callable: whether the kernel still runs (a drop after it ended is
                not a refusal).
            stop_kernel: an async callable that ends the kernel (a refused reply on the shell
                channel means the notebook cannot go on).
        """
        self.client, self.alive, self.stop_kernel = client, alive, stop_kernel
        self.refused: list[tuple[str, int | None]] = []  # (channel, cell index)
        self.cell: int | None = None  # the cell running now
        self.retired: list = []  # replaced IOPub channels, closed after their cell
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        """Start watching the shell and IOPub channels (call once the client is connected)."""
        for name in ("shell", "iopub"):
            self._watch(name)

    def _watch(self, name: str) -> None:
        socket = getattr(self.client, f"{name}_channel").socket
        monitor = socket.get_monitor_socket(EVENTS)
        self._tasks.append(asyncio.ensure_future(self._follow(name, socket, monitor)))

    async def _follow(self, name: str, socket, monitor) -> None:
        try:
            while True:
                event = parse_monitor_message(await monitor.recv_multipart())
                if event["event"] != zmq.EVENT_DISCONNECTED or await self._retried(monitor):
                    continue
                if not await self.alive():
                    return  # the kernel ended: not a refusal
                self.refused.append((name, self.cell))
                await self._recover(name)
                return
        finally:
            with contextlib.suppress(zmq.ZMQError):
                socket.disable_monitor()
            monitor.close(linger=0)

    async def _retried(self, monitor) -> bool:
        """Whether zmq retries the dropped connection within ``RETRY_WAIT`` seconds."""
        with contextlib.suppress(asyncio.TimeoutError):
            while True:
                raw = await asyncio.wait_for(monitor.recv_multipart(), RETRY_WAIT)
                if parse_monitor_message(raw)["event"] != zmq.EVENT_DISCONNECTED:
                    return True
        return False

    async def _recover(self, name: str) -> None:
        if name != "iopub":  # a reply that never comes: the notebook cannot go on
            await self.stop_kernel()
            return
        self.retired.append(self.client._iopub_channel)
        self.client._iopub_channel = None
        self.client.iopub_channel.start()  # connected afresh
        self._watch("iopub")

    def refused_in(self, cell: int) -> bool:
        """Whether a message was refused while cell ``cell`` ran.

        Args:
            cell: the index of the cell in the notebook.

        Returns:
            True when a refusal was recorded with that cell running (its output is cut short).
        """
        return any(index == cell for _, index in self.refused)

    def fatal(self) -> str | None:
        """Why the notebook had to stop (a refused reply), or ``None``.

        Returns:
            The reason, naming the cap, when a shell reply was refused; ``None`` otherwise.
        """
        if any(name != "iopub" for name, _ in self.refused):
            cap = self.client.max_bytes / 2**20
            return f"the kernel sent a reply over {cap:g} MiB; it was refused unread"
        return None

    def close_retired(self) -> None:
        """Close the IOPub channels replaced after a refusal (once their cell has ended)."""
        while self.retired:
            self.retired.pop().close()

    def stop(self) -> None:
        """Stop watching (cancel the watching tasks) and close every replaced channel."""
        for task in self._tasks:
            task.cancel()
        self.close_retired()
