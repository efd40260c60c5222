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
