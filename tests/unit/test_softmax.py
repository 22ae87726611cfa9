"""The lesson-02 softmaxes name the conversion a non-tensor or an integer tensor needs."""

import numpy as np
import pytest
import torch

from course_utils.softmax import naive_softmax, stable_softmax


@pytest.mark.parametrize("fn", [stable_softmax, naive_softmax])
@pytest.mark.parametrize(
    "x, fix",
    [
        (np.array([1.0, 2.0]), "torch.from_numpy(x).float()"),
        ([1.0, 2.0], "torch.tensor(x, dtype=torch.float32)"),
        (torch.tensor([1, 2]), "x.float()"),
    ],
    ids=["numpy", "list", "integer tensor"],
)
def test_bad_inputs_name_the_fix(fn, x, fix):
    with pytest.raises(TypeError, match="softmax needs a floating-point tensor") as info:
        fn(x)
    assert str(info.value).endswith(f"use {fix}")


def test_the_fix_works():
    x = torch.from_numpy(np.array([[1.0, 2.0, 3.0]])).float()
    torch.testing.assert_close(stable_softmax(x), torch.softmax(x, dim=-1))
