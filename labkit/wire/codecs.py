"""Wire codecs: how a tensor crossing a stage boundary is turned into bytes and back.

A codec maps a tensor to an `Encoded` (the payload tensors that travel plus the shape and dtype
needed to rebuild it) and back. `wire_bytes` is the exact size of the payload tensors' data: the
bytes a transport would send. Message framing (shape, dtype, codec name: a few dozen bytes per
tensor, the same for every codec) is not counted; nor is anything both sides already hold, such as
the 256-entry int8 codebook. A new codec is one `Codec` subclass added to `CODECS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from labkit.config import ConfigError

# Blockwise int8: 1024 values share one float32 absmax. Smaller blocks track outlier features
# better but add 4 bytes per block. Sweep in benchmarks/codecs.py (4x512x768, 3 outlier features):
# relative L2 error 1.06% / 1.54% / 1.83% and fp32/int8 bytes 3.938 / 3.984 / 3.996 for blocksize
# 256 / 1024 / 4096, at the same speed. 1024 is the middle choice: 16% less error than 4096 and a
# ratio well above 3.9 (256 would sit at 3.938).
INT8_BLOCKSIZE = 1024
INT8_BLOCKSIZES = (256, 512, 1024, 2048, 4096)


class CodecUnavailableError(RuntimeError):
    """A codec was asked for but a package it needs cannot be imported."""

    def __init__(self, codec: str, package: str, cause: BaseException) -> None:
        super().__init__(f"wire codec {codec!r} needs the package {package!r}, which cannot be imported "
                         f"({cause}); install it (pip install {package}) or choose another codec")
        self.codec, self.package = codec, package


@dataclass(frozen=True, slots=True)
class Encoded:
    """What a codec puts on the wire (`payload`) plus the shape and dtype the receiver rebuilds."""

    codec: str
    payload: tuple[torch.Tensor, ...]
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        """Exact bytes of payload data that go on the wire."""
        return sum(t.numel() * t.element_size() for t in self.payload)

    def to(self, device: torch.device | str) -> Encoded:
        """The same encoding with its payload on `device` (a GPU peer sends from host memory)."""
        return Encoded(self.codec, tuple(t.to(device) for t in self.payload), self.shape, self.dtype)

    def __reduce__(self) -> tuple[Any, tuple]:
        """Pickle each payload tensor as a byte view (host memory): with pickle protocol 5, as Dask
        uses, the bytes travel out of band without a copy, where a tensor would be copied twice."""
        views = tuple((tensor_bytes(t), t.dtype, tuple(t.shape)) for t in self.payload)
        return _rebuild_encoded, (self.codec, views, self.shape, self.dtype)


def _rebuild_encoded(codec: str, views: tuple, shape: tuple[int, ...], dtype: torch.dtype) -> Encoded:
    """Unpickle an `Encoded`: each payload tensor over its received bytes."""
    return Encoded(codec, tuple(tensor_from_bytes(*view) for view in views), shape, dtype)


def tensor_bytes(t: torch.Tensor) -> np.ndarray:
    """`t`'s data as a flat uint8 array in host memory, sharing it when it can (pickle protocol 5
    sends such an array out of band)."""
    return t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy()


def tensor_from_bytes(raw: np.ndarray, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor `tensor_bytes` gave `raw` for, over the received bytes (copied only if the
    buffer is read-only, which torch tensors may not share)."""
    return torch.from_numpy(raw if raw.flags.writeable else raw.copy()).view(dtype).view(shape)


class Codec(ABC):
    """Turns a tensor into an `Encoded` and back; decode restores the original shape and dtype."""

    name: ClassVar[str]

    @abstractmethod
    def encode(self, tensor: torch.Tensor) -> Encoded:
        """The wire form of `tensor` (detached: codecs do not take part in autograd)."""

    @abstractmethod
    def decode(self, encoded: Encoded) -> torch.Tensor:
        """The tensor rebuilt from its wire form, in its original dtype and shape."""

    def wire_bytes(self, encoded: Encoded) -> int:
        """Exact bytes of payload data that go on the wire for `encoded`."""
        return encoded.nbytes

    def _check(self, encoded: Encoded) -> None:
        if encoded.codec != self.name:
            raise ValueError(f"codec {self.name!r} cannot decode a tensor encoded by {encoded.codec!r}")


class Fp32Codec(Codec):
    """No compression: the tensor travels as it is (float32 for the default model), bit-exact."""

    name = "fp32"

    def encode(self, tensor: torch.Tensor) -> Encoded:
        t = tensor.detach()
        return Encoded(self.name, (t,), tuple(t.shape), t.dtype)

    def decode(self, encoded: Encoded) -> torch.Tensor:
        self._check(encoded)
        return encoded.payload[0]


class CastCodec(Codec):
    """Sends the tensor cast to a narrower float type; decode casts back (round to nearest)."""

    wire_dtype: ClassVar[torch.dtype]

    def encode(self, tensor: torch.Tensor) -> Encoded:
        t = tensor.detach()
        return Encoded(self.name, (t.to(self.wire_dtype),), tuple(t.shape), t.dtype)

    def decode(self, encoded: Encoded) -> torch.Tensor:
        self._check(encoded)
        return encoded.payload[0].to(encoded.dtype)


class Fp16Codec(CastCodec):
    """IEEE half precision: 2 bytes a value, relative error <= 2^-11; overflows above 65504."""

    name = "fp16"
    wire_dtype = torch.float16


class Bf16Codec(CastCodec):
    """bfloat16: 2 bytes a value, float32's range, relative error <= 2^-8."""

    name = "bf16"
    wire_dtype = torch.bfloat16


class Int8Codec(Codec):
    """8-bit dynamic blockwise quantization (Dettmers et al.) by bitsandbytes, as in SWARM App. J.

    Payload: one uint8 code per value plus one float32 absmax per block of `blocksize` values, so
    `numel + 4 * ceil(numel / blocksize)` bytes. The codebook is bitsandbytes' dynamic map, fixed
    and known to both sides, so it is not sent.
    """

    name = "int8"

    def __init__(self, blocksize: int = INT8_BLOCKSIZE) -> None:
        try:
            import bitsandbytes.functional as bnbf
        except ImportError as err:
            raise CodecUnavailableError(self.name, "bitsandbytes", err) from err
        if blocksize not in INT8_BLOCKSIZES:
            raise ConfigError("Int8Codec", "blocksize", blocksize, f"one of {list(INT8_BLOCKSIZES)}")
        self.blocksize = blocksize
        self._bnbf = bnbf
        # bitsandbytes' CPU kernel sets entry 0 of the map it is given to -1.0 before quantizing
        # (csrc/cpu_ops.cpp); fixing it here keeps encoder and decoder on one table on any device.
        self.code = bnbf.create_dynamic_map()
        self.code[0] = -1.0

    def encode(self, tensor: torch.Tensor) -> Encoded:
        t = tensor.detach()
        src = t if t.dtype in (torch.float32, torch.float16, torch.bfloat16) else t.float()
        codes, state = self._bnbf.quantize_blockwise(src, code=self.code, blocksize=self.blocksize)
        return Encoded(self.name, (codes, state.absmax), tuple(t.shape), t.dtype)

    def decode(self, encoded: Encoded) -> torch.Tensor:
        self._check(encoded)
        codes, absmax = encoded.payload
        out = self._bnbf.dequantize_blockwise(codes, absmax=absmax, code=self.code, blocksize=self.blocksize)
        return out.to(encoded.dtype)


CODECS: dict[str, type[Codec]] = {c.name: c for c in (Fp32Codec, Fp16Codec, Bf16Codec, Int8Codec)}


def get_codec(name: str, **options: Any) -> Codec:
    """The codec registered under `name` (options go to its constructor, e.g. int8's blocksize)."""
    if name not in CODECS:
        raise ConfigError("wire", "codec", name, f"one of {sorted(CODECS)}")
    return CODECS[name](**options)
