"""Tensors read through torch's C++ API (loadplan._torch_read) and through
torch's Python properties: the same answers, the same refusals, the same
bytes, in the update paths that read them (load_planned's batch check and
a sender's SendBatch)."""

from __future__ import annotations

import os

import pytest
import torch

import loadplan
from loadplan import _native, _runtime
from loadplan.examples import llama

BF16 = torch.bfloat16


@pytest.fixture(params=[True, False], ids=["cpp_read", "python_read"])
def cpp_read(request):
    if request.param and not _runtime.TORCH_READ:
        pytest.skip("loadplan._torch_read is not loaded")
    before = _runtime.use_torch_read(request.param)
    assert _native.torch_read_loaded() == request.param
    yield request.param
    _runtime.use_torch_read(before)


def test_the_cpp_read_is_built_and_loaded():
    # scripts/setup builds it against the environment's torch.
    if os.environ.get("LOADPLAN_TORCH_READ") == "0":
        pytest.skip("turned off by LOADPLAN_TORCH_READ=0")
    assert _runtime.TORCH_READ and _native.torch_read_loaded()


class ShapeLies(torch.Tensor):
    """A subclass whose shape property says something else: its own
    property is what counts, so the C++ read must not be used for it."""

    @property
    def shape(self):
        return torch.Size([1])


def odd_views(weights):
    """Each tensor as a contiguous view at an offset into a larger buffer,
    or as a transposed copy's transpose (not contiguous), or a Parameter,
    in turn: the data pointers the reads find must include the offset."""
    out = []
    for i, (name, w) in enumerate(weights):
        if i % 3 == 0:
            buf = torch.empty(w.numel() + 5, dtype=w.dtype)
            view = buf[5:].view(w.shape)
            view.copy_(w)
            out.append((name, view))
        elif i % 3 == 1 and w.dim() == 2:
            out.append((name, w.t().contiguous().t()))
        else:
            out.append((name, torch.nn.Parameter(w.clone(), requires_grad=False)))
    return out


def test_load_planned_reads_offsets_and_strides_alike(cpp_read):
    sizes = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2)
    model, metadata = llama.make(tp_rank=1, tp_size=2, **sizes)
    reference, _ = llama.make(tp_rank=1, tp_size=2, **sizes)
    plan = loadplan.plan_loads(model, metadata)
    weights = loadplan.random_weights(metadata, 7)
    with torch.no_grad():
        reference.load_weights(weights)
    loadplan.load_planned(model, plan, odd_views(weights))
    for (name, got), (_, want) in zip(model.state_dict().items(),
                                      reference.state_dict().items()):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), name


def send_batch(shape=(4, 6), dtype=BF16):
    return _native.SendBatch([("w", _runtime.dtype_code(dtype), list(shape))], 0, "cpu")


@pytest.mark.parametrize("tensor", [
    torch.zeros(4, 6, dtype=BF16),
    torch.zeros(6, 4, dtype=BF16).t(),  # read through a contiguous copy
    torch.zeros(30, dtype=BF16)[6:].view(4, 6),
    torch.nn.Parameter(torch.zeros(4, 6, dtype=BF16), requires_grad=False),
], ids=["plain", "transposed", "offset", "parameter"])
def test_a_sender_reads_good_tensors_either_way(cpp_read, tensor):
    send_batch().read({"w": tensor}, _runtime.DEVICE_CPU, 0)


@pytest.mark.parametrize("tensor, error", [
    (torch.zeros(4, 6, dtype=torch.float32), r"'w' is torch.float32 \(4, 6\)"),
    (torch.zeros(4, 5, dtype=BF16), r"'w' is torch.bfloat16 \(4, 5\)"),
    (torch.zeros(4, 6, dtype=BF16, device="meta"), "meta"),
    (torch.zeros(4, 6, dtype=BF16).to_sparse(), "sparse"),
    ([1, 2], "'w' is list"),
    (torch.zeros(4, 6, dtype=BF16).as_subclass(ShapeLies), r"\(1,\)"),
], ids=["dtype", "shape", "meta", "sparse", "not_a_tensor", "subclass_property"])
def test_a_sender_refuses_bad_tensors_alike(cpp_read, tensor, error):
    with pytest.raises(ValueError, match=error) as caught:
        send_batch().read({"w": tensor}, _runtime.DEVICE_CPU, 0)
    # The same words both ways: the C++ read only answers "yes" faster.
    _runtime.use_torch_read(not cpp_read and _runtime.TORCH_READ)
    with pytest.raises(ValueError) as again:
        send_batch().read({"w": tensor}, _runtime.DEVICE_CPU, 0)
    assert str(again.value) == str(caught.value)
