"""Wire codecs: exactness, round-trip error bounds, exact byte counts and clear errors."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from labkit.config import WIRE_CODECS, ConfigError
from labkit.wire import CODECS, CodecUnavailableError, CompressionConfig, get_codec
from labkit.wire.codecs import Int8Codec

SHAPE = (4, 512, 768)  # batch x seq x d of a GPT-2 small boundary activation


def activations(shape: tuple[int, ...] = SHAPE, seed: int = 0) -> torch.Tensor:
    """Gaussian values plus a few large outlier features, as transformer activations have."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    x[..., :3] *= 20.0
    return x


def test_fp32_is_bit_exact_for_every_float_dtype() -> None:
    special = torch.tensor([0.0, -0.0, 1e-45, -3.4e38, float("inf"), float("nan"), 1.0 / 3.0])
    codec = get_codec("fp32")
    for x in (activations(), special, activations((5, 7)).double()):
        y = codec.decode(codec.encode(x))
        assert y.dtype == x.dtype and y.shape == x.shape
        bits = torch.int64 if x.dtype == torch.float64 else torch.int32
        assert torch.equal(y.view(bits), x.view(bits))


@pytest.mark.parametrize("name, wire_dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_half_precision_round_trip_within_unit_roundoff(name: str, wire_dtype: torch.dtype) -> None:
    """Round to nearest: |x - x'| <= eps/2 * |x| in the normal range, + half a subnormal step below it."""
    x = activations() * 0.1  # keeps fp16 away from its 65504 overflow
    codec = get_codec(name)
    y = codec.decode(codec.encode(x))
    fi = torch.finfo(wire_dtype)
    bound = fi.eps / 2 * x.abs() + fi.eps * fi.tiny / 2
    assert y.dtype == torch.float32 and y.shape == x.shape
    assert bool(((y - x).abs() <= bound).all())
    assert not torch.equal(x, y)  # something was actually rounded


def int8_error_radius(codec: Int8Codec) -> float:
    """Largest distance from a point of [-1, 1] to its nearest codeword: half the widest gap, or an end.

    Source of the bound: the CPU kernel (bitsandbytes csrc/common.cpp `quantize_block`) divides each
    value by its block's absmax and stores the nearest codeword, so |x - x'| <= absmax * radius."""
    code = codec.code.double()
    return max(float((code[1:] - code[:-1]).max()) / 2, float(code[0] + 1), float(1 - code[-1]))


def test_int8_codebook_is_bitsandbytes_dynamic_map() -> None:
    from bitsandbytes.functional import create_dynamic_map

    codec = Int8Codec()
    reference = create_dynamic_map()
    assert codec.code.shape == (256,) and torch.equal(codec.code[1:], reference[1:]) and float(codec.code[0]) == -1.0
    assert bool((codec.code[1:] > codec.code[:-1]).all())  # sorted, as the binary search needs


@pytest.mark.parametrize("blocksize", [256, 1024, 4096])
@pytest.mark.parametrize("shape", [SHAPE, (3, 1000)])
def test_int8_round_trip_within_blockwise_bound(blocksize: int, shape: tuple[int, ...]) -> None:
    x = activations(shape)
    codec = get_codec("int8", blocksize=blocksize)
    enc = codec.encode(x)
    y = codec.decode(enc)
    assert y.dtype == x.dtype and y.shape == x.shape
    n = x.numel()
    blocks = math.ceil(n / blocksize)
    flat = torch.nn.functional.pad(x.reshape(-1), (0, blocks * blocksize - n)).view(blocks, blocksize)
    absmax = flat.abs().amax(dim=1)
    assert torch.equal(enc.payload[1], absmax)  # the scale sent is the block's exact absmax
    per_value = absmax.repeat_interleave(blocksize)[:n].view(shape)
    bound = per_value * int8_error_radius(codec) * (1 + 1e-6)  # 1e-6: float32 rounding of x/absmax
    err = (y - x).abs()
    assert bool((err <= bound).all()), float((err / bound).max())
    assert float(err.max()) > 0.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_int8_restores_the_input_dtype(dtype: torch.dtype) -> None:
    x = activations((8, 64)).to(dtype)
    codec = get_codec("int8")
    y = codec.decode(codec.encode(x))
    assert y.dtype == dtype and y.shape == x.shape
    assert float((y.double() - x.double()).abs().max()) <= 0.02 * float(x.double().abs().max())


def test_exact_wire_bytes() -> None:
    x = activations()
    numel = 4 * 512 * 768
    counts = {name: get_codec(name).wire_bytes(get_codec(name).encode(x)) for name in CODECS}
    assert counts["fp32"] == 6_291_456 == 4 * numel
    assert counts["fp16"] == counts["bf16"] == 3_145_728
    assert counts["int8"] == numel + 4 * math.ceil(numel / 1024) == 1_579_008  # default blocksize 1024
    big = get_codec("int8", blocksize=4096)
    assert big.wire_bytes(big.encode(x)) == numel + 4 * 384 == 1_574_400
    assert counts["fp32"] / counts["int8"] >= 3.9
    odd = get_codec("int8", blocksize=1024)
    assert odd.wire_bytes(odd.encode(torch.randn(3, 1000))) == 3000 + 4 * 3  # last block partial


def test_unknown_codec_names_it_and_the_allowed_ones() -> None:
    with pytest.raises(ConfigError) as err:
        get_codec("zstd")
    assert "'zstd'" in str(err.value) and all(name in str(err.value) for name in CODECS)


def test_int8_without_bitsandbytes_fails_naming_codec_and_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # forced fault: the import now fails
    monkeypatch.setitem(sys.modules, "bitsandbytes.functional", None)
    with pytest.raises(CodecUnavailableError) as err:
        get_codec("int8")
    assert "'int8'" in str(err.value) and "bitsandbytes" in str(err.value) and err.value.codec == "int8"
    assert get_codec("fp16").name == "fp16"  # the other codecs do not need it


def test_bad_blocksize_and_mismatched_decode_are_refused() -> None:
    with pytest.raises(ConfigError, match="blocksize"):
        get_codec("int8", blocksize=100)
    with pytest.raises(ValueError, match="'fp16'.*'int8'"):
        get_codec("fp16").decode(get_codec("int8").encode(torch.randn(10)))


def test_compression_config_validates_each_field() -> None:
    assert CompressionConfig() == CompressionConfig(codec="fp32", boundary="none", factor=2)
    assert set(CODECS) == set(WIRE_CODECS), "the config's codec names must be the registry's"
    for bad in ({"codec": "gzip"}, {"boundary": "linear"}, {"factor": 0}, {"factor": True}):
        with pytest.raises(ConfigError, match=f"CompressionConfig.{next(iter(bad))}="):
            CompressionConfig(**bad)


@pytest.mark.parametrize("codec", ["fp32", "fp16", "bf16", "int8"])
def test_encoded_pickles_its_payload_out_of_band(codec: str) -> None:
    """An Encoded crossing processes (a Dask actor call) keeps every bit, dtype and shape, and with
    pickle protocol 5 its payload travels as out-of-band buffers rather than copied into the pickle."""
    import pickle

    c = get_codec(codec)
    encoded = c.encode(torch.randn(4, 16, 64, generator=torch.Generator().manual_seed(1)))
    buffers: list = []
    data = pickle.dumps(encoded, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == len(encoded.payload) and len(data) < 1000
    back = pickle.loads(data, buffers=buffers)
    assert [(t.dtype, t.shape) for t in back.payload] == [(t.dtype, t.shape) for t in encoded.payload]
    assert all(torch.equal(a, b) for a, b in zip(back.payload, encoded.payload))
    assert torch.equal(c.decode(back), c.decode(encoded)) and back.nbytes == encoded.nbytes
