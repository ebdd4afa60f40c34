"""Boundary layers: shapes, the App. J formulas, gradients across the boundary, int8 on top, init."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from labkit.config import ConfigError
from labkit.model.boundary import BoundaryRecv, BoundarySend, init_boundary_state
from labkit.wire import get_codec

D = 64  # nano's d_model


def build_boundary_half(side: str, s: int, d_model: int, factor: int, kind: str,
                        state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """One half of boundary s, loaded strictly from its global names `boundaries.{s}.{side}.*`."""
    prefix = f"boundaries.{s}.{side}."
    half = (BoundarySend if side == "send" else BoundaryRecv)(d_model, factor, kind)
    own = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    half.to(next(iter(own.values())).dtype).load_state_dict(own, strict=True)
    return half


def pair(kind: str, factor: int, seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    state = init_boundary_state(D, factor, kind, stages=2, seed=seed)
    return build_boundary_half("send", 0, D, factor, kind, state), build_boundary_half("recv", 0, D, factor, kind, state)


@pytest.mark.parametrize("kind", ["bottleneck", "maxout"])
@pytest.mark.parametrize("factor", [1, 2, 4])
def test_halves_shapes(kind: str, factor: int) -> None:
    send, recv = pair(kind, factor)
    h = torch.randn(3, 16, D)
    z = send(h)
    assert z.shape == (3, 16, D // factor)
    assert recv(z).shape == (3, 16, D)


def ln(t: torch.Tensor) -> torch.Tensor:
    """A plain LayerNorm (weight 1, bias 0), which is what the init leaves every boundary norm."""
    return F.layer_norm(t, t.shape[-1:])


def test_bottleneck_and_maxout_follow_the_appendix_formulas() -> None:
    h = torch.randn(2, 8, D)
    send, recv = pair("bottleneck", 2, seed=3)
    w_c, w_d = send.compress.weight.T, recv.decompress.weight.T  # (d, d/2), (d/2, d)
    torch.testing.assert_close(recv(send(h)), ln(ln(h) @ w_c) @ w_d)
    send, recv = pair("maxout", 4, seed=3)
    n = ln(h)
    maxout = torch.stack([n[..., i::4] for i in range(4)]).amax(0)  # windows are features 4j..4j+3
    assert torch.equal(maxout, n.view(2, 8, D // 4, 4).amax(-1))
    torch.testing.assert_close(recv(send(h)), ln(maxout) @ recv.decompress.weight.T)


@pytest.mark.parametrize("kind", ["bottleneck", "maxout"])
def test_gradients_flow_across_the_boundary(kind: str) -> None:
    send, recv = pair(kind, 2)
    h = torch.randn(2, 8, D, requires_grad=True)
    recv(send(h)).pow(2).sum().backward()
    assert h.grad is not None and float(h.grad.abs().sum()) > 0
    for name, p in [*send.named_parameters(), *recv.named_parameters()]:
        assert p.grad is not None and float(p.grad.abs().sum()) > 0, name


@pytest.mark.parametrize("kind", ["bottleneck", "maxout"])
def test_int8_codec_on_both_directions_of_the_boundary(kind: str) -> None:
    """As the runtime does it: activations go forward int8-coded, their gradient comes back int8-coded."""
    codec = get_codec("int8")
    send, recv = pair(kind, 2)
    h = torch.randn(16, 128, D, requires_grad=True)
    z = send(h)
    enc = codec.encode(z)
    numel = 16 * 128 * D // 2
    assert codec.wire_bytes(enc) == numel + 4 * (numel // 1024)  # half the features, 1 byte each
    z_recv = codec.decode(enc).requires_grad_()
    out = recv(z_recv)
    out.pow(2).sum().backward()
    assert z_recv.grad is not None
    z.backward(codec.decode(codec.encode(z_recv.grad)))
    assert h.grad is not None and float(h.grad.abs().sum()) > 0
    assert all(float(p.grad.abs().sum()) > 0 for p in [*send.parameters(), *recv.parameters()])
    with torch.no_grad():
        exact = recv(send(h))
    assert float((out.detach() - exact).norm() / exact.norm()) < 0.05  # 8-bit noise, not a different function


def test_init_is_deterministic_per_boundary_and_named_globally() -> None:
    a = init_boundary_state(D, 2, "bottleneck", stages=2, seed=7)
    assert list(a) == ["boundaries.0.send.ln_in.weight", "boundaries.0.send.ln_in.bias",
                       "boundaries.0.send.compress.weight", "boundaries.0.send.ln_out.weight",
                       "boundaries.0.send.ln_out.bias", "boundaries.0.recv.decompress.weight"]
    b = init_boundary_state(D, 2, "bottleneck", stages=4, seed=7)
    assert all(torch.equal(a[k], b[k]) for k in a)  # boundary 0 does not depend on the stage count
    assert not torch.equal(b["boundaries.0.send.compress.weight"], b["boundaries.1.send.compress.weight"])
    c = init_boundary_state(D, 2, "bottleneck", stages=2, seed=8)
    assert not torch.equal(a["boundaries.0.recv.decompress.weight"], c["boundaries.0.recv.decompress.weight"])
    assert float(a["boundaries.0.send.ln_in.weight"].min()) == 1.0 and float(a["boundaries.0.send.ln_in.bias"].abs().max()) == 0.0
    assert abs(float(a["boundaries.0.send.compress.weight"].std()) - 0.02) < 0.002
    m = init_boundary_state(D, 2, "maxout", stages=2, seed=7, dtype=torch.float64)
    assert "boundaries.0.send.compress.weight" not in m and m["boundaries.0.recv.decompress.weight"].shape == (D, D // 2)
    assert build_boundary_half("recv", 0, D, 2, "maxout", m).decompress.weight.dtype == torch.float64


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ConfigError, match="boundary.factor=3"):
        BoundarySend(D, 3, "maxout")  # 64 features do not split into windows of 3
    with pytest.raises(ConfigError, match="boundary.kind='linear'"):
        BoundaryRecv(D, 2, "linear")
