"""Messages as frames on a stream socket: pickle protocol 5 with tensor bytes out of band.

A frame is a header (the pickle's length, the number of out-of-band buffers and each one's
length), the pickle, then the buffers. Every host-memory tensor (and every `Encoded` payload)
travels as its raw bytes, written from and read into its own memory without a copy in the
pickle: a stage's state of many tensors or a 1 MB activation costs a `sendall` per buffer.
"""

from __future__ import annotations

import io
import pickle
import socket
import struct
from typing import Any

import numpy as np
import torch

from labkit.wire.codecs import tensor_bytes, tensor_from_bytes

_COUNTS = struct.Struct("!QI")  # pickle bytes, out-of-band buffers
_LENGTH = struct.Struct("!Q")


class _Pickler(pickle.Pickler):
    """Pickles a plain host tensor as its bytes (out of band), anything else as pickle would."""

    def reducer_override(self, obj: Any) -> Any:
        if (type(obj) is torch.Tensor and obj.device.type == "cpu" and obj.layout == torch.strided
                and not obj.requires_grad and not obj.is_quantized):
            return tensor_from_bytes, (tensor_bytes(obj), obj.dtype, tuple(obj.shape))
        return NotImplemented


def write_frame(sock: socket.socket, message: Any) -> None:
    """Send `message` as one frame (the caller serializes writers of one socket)."""
    buffers: list[pickle.PickleBuffer] = []
    data = io.BytesIO()
    _Pickler(data, protocol=5, buffer_callback=buffers.append).dump(message)
    views = [b.raw() for b in buffers]
    header = _COUNTS.pack(data.getbuffer().nbytes, len(views)) + b"".join(_LENGTH.pack(v.nbytes) for v in views)
    sock.sendall(header + data.getbuffer())
    for view in views:
        sock.sendall(view)


def read_frame(sock: socket.socket) -> Any:
    """Receive one frame and unpickle it; EOFError when the other side closed the connection."""
    size, count = _COUNTS.unpack(_read(sock, _COUNTS.size))
    table = _read(sock, _LENGTH.size * count)
    lengths = [_LENGTH.unpack_from(table, i * _LENGTH.size)[0] for i in range(count)]
    data = _read(sock, size)
    return pickle.loads(data, buffers=[_read(sock, n) for n in lengths])


def _read(sock: socket.socket, n: int) -> np.ndarray:
    """Exactly `n` bytes, read into one buffer (which received tensors keep as their memory).
    Uninitialized, from malloc: a bytearray would zero-fill it, and fault in fresh pages each time."""
    out = np.empty(n, dtype=np.uint8)
    view, got = memoryview(out).cast("B"), 0
    while got < n:
        chunk = sock.recv_into(view[got:])
        if chunk == 0:
            raise EOFError("the connection was closed")
        got += chunk
    return out
