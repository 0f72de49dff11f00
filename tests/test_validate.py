"""The shared argument checks: each kind of bad input gives a message naming the argument."""

import math

import pytest
import torch

from softmaxbook import _validate as v


def test_as_float_tensor_accepts_floats_and_rejects_the_rest():
    x = torch.ones(3)
    assert v.as_float_tensor(x, "x", "f") is x
    with pytest.raises(TypeError, match=r"f: argument 'x' must be a torch.Tensor, got list"):
        v.as_float_tensor([1.0], "x", "f")
    with pytest.raises(TypeError, match=r"argument 'x' must have a floating-point dtype.*torch.int64"):
        v.as_float_tensor(torch.arange(3), "x", "f")
    with pytest.raises(ValueError, match=r"argument 'x' is empty"):
        v.as_float_tensor(torch.ones(0), "x", "f")
    assert v.as_float_tensor(torch.ones(0), "x", allow_empty=True).numel() == 0


def test_nan_and_inf_are_located():
    x = torch.tensor([[0.0, 1.0], [float("nan"), 2.0]])
    with pytest.raises(ValueError, match=r"argument 'x' contains NaN \(first at index \(1, 0\)\)"):
        v.check_no_nan(x, "x", "f")
    y = torch.tensor([0.0, float("inf")])
    with pytest.raises(ValueError, match=r"contains \+inf \(first at index 1\)"):
        v.check_no_posinf(y, "y")
    v.check_no_posinf(torch.tensor([0.0, -math.inf]), "y")  # -inf means impossible: allowed
    with pytest.raises(ValueError, match="infinite"):
        v.check_finite(torch.tensor([-math.inf]), "z")


def test_check_dim():
    x = torch.ones(2, 3)
    assert v.check_dim(x, -1, "x") == 1
    with pytest.raises(ValueError, match=r"argument 'dim'=2 is out of range"):
        v.check_dim(x, 2, "x")
    with pytest.raises(TypeError, match="argument 'dim' must be an int"):
        v.check_dim(x, 1.0, "x")
    with pytest.raises(ValueError, match="0-d tensor"):
        v.check_dim(torch.tensor(1.0), 0, "x")
    with pytest.raises(ValueError, match="empty dimension 1"):
        v.check_dim(torch.ones(2, 0), 1, "x")


@pytest.mark.parametrize("bad,err,msg", [
    (0.0, ValueError, "must be > 0"), (-1, ValueError, "must be > 0"),
    (math.inf, ValueError, "must be finite"), (math.nan, ValueError, "must be finite"),
    ("1", TypeError, "must be a number"), (True, TypeError, "must be a number"),
    (torch.ones(2), TypeError, "tensor of shape"),
])
def test_check_positive_number(bad, err, msg):
    with pytest.raises(err, match=f"argument 'tau' {msg}" if "tensor" not in msg else msg):
        v.check_positive_number(bad, "tau", "f")


def test_check_positive_number_values():
    assert v.check_positive_number(torch.tensor(2.0), "tau") == 2.0
    assert v.check_positive_number(0, "a", allow_zero=True) == 0.0


def test_check_int_and_generator():
    assert v.check_int(3, "k", minimum=1, maximum=5) == 3
    with pytest.raises(ValueError, match="argument 'k' must be >= 1, got 0"):
        v.check_int(0, "k", minimum=1)
    with pytest.raises(ValueError, match="argument 'k' must be <= 5, got 6"):
        v.check_int(6, "k", maximum=5)
    with pytest.raises(TypeError, match="argument 'k' must be an int"):
        v.check_int(2.0, "k")
    g = torch.Generator()
    assert v.check_generator(g) is g and v.check_generator(None) is None
    with pytest.raises(TypeError, match="argument 'generator' must be a torch.Generator"):
        v.check_generator(0)
    with pytest.raises(ValueError, match="argument 'generator' is on cpu"):
        v.check_generator(g, device="meta")


def test_check_reduction_and_reduce_loss():
    # the one home of the loss reductions (softmax.cross_entropy and the NCE losses use it)
    loss = torch.tensor([1.0, 2.0, 6.0])
    assert v.reduce_loss(loss, v.check_reduction("mean", "f")).item() == 3.0
    assert v.reduce_loss(loss, v.check_reduction("sum", "f")).item() == 9.0
    assert v.reduce_loss(loss, v.check_reduction("none", "f")) is loss
    for bad in ("Mean", "avg", None, ["mean"], torch.tensor(1.0)):
        with pytest.raises(ValueError, match="f: argument 'reduction' must be one of"):
            v.check_reduction(bad, "f")


def test_the_losses_share_one_reduction_check():
    from softmaxbook import nce, softmax
    assert softmax._check_reduction is nce._check_reduction is v.check_reduction
    assert softmax._reduce is nce._reduce is v.reduce_loss
    with pytest.raises(ValueError, match="cross_entropy: argument 'reduction'"):
        softmax.cross_entropy(torch.zeros(2, 3), torch.tensor([0, 1]), reduction="avg")
