"""Shared set-up for the Python tests."""

import torch

# The tests copy small tensors; intra-op threads only wait on each other,
# badly so on a machine busy with other work.
torch.set_num_threads(1)
