"""Shared set-up for the Python tests."""

from collections.abc import Callable

import pytest
import torch

# The tests copy small tensors; intra-op threads only wait on each other,
# badly so on a machine busy with other work.
torch.set_num_threads(1)


class LoaderModel(torch.nn.Module):
    """Parameters named and shaped as given (zeros), and a vLLM-style
    load_weights that calls ``load(model, name, tensor)`` per name."""

    def __init__(self, params: dict, load: Callable):
        super().__init__()
        for name, (shape, dtype) in params.items():
            p = torch.nn.Parameter(torch.zeros(shape, dtype=dtype), requires_grad=False)
            self.register_parameter(name, p)
        self._load = load

    def load_weights(self, weights):
        for name, w in weights:
            self._load(self, name, w)


@pytest.fixture
def loader_model() -> type[LoaderModel]:
    return LoaderModel


@pytest.fixture(autouse=True)
def records_compile_like_text(monkeypatch):
    """Every plan_loads in these tests compiles its capture from records
    (the module built in memory); this checks each against compiling the
    capture's IR text, the other way in: the same plan, byte for byte, or
    the same refusal. A loadplan._native built without the compiler (the
    GPU machines' build) compiles neither way: nothing to compare."""
    from loadplan import _native, planning

    if not _native.HAS_COMPILER:
        return

    from_records = planning.compile_capture

    def checked(captured, source_name="<captured>", print_ir=False, print_json=True):
        try:
            out = from_records(captured, source_name, print_ir, print_json)
        except planning.PlanError:
            with pytest.raises(planning.PlanError):
                planning.compile_ir(captured.ir, source_name, print_ir, print_json)
            raise
        text = planning.compile_ir(captured.ir, source_name, False, print_json)
        assert out["plan"] == text["plan"], "records and text compile to other plans"
        return out

    checked.__wrapped__ = from_records
    monkeypatch.setattr(planning, "compile_capture", checked)
