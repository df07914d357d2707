"""No tensor is created on the CPU behind the model's back, checked on any machine: on the ``meta`` device an op
that mixes in a CPU tensor raises, so a forward and backward there would fail where a CUDA run would."""

import pytest
import torch

from ropelab.core import machine, positional
from ropelab.core.build import model_for
from ropelab.core.config import compose


@pytest.mark.parametrize("scheme", positional.names())
def test_forward_and_backward_stay_on_the_model_device(scheme):
    momentum = ["pos.momentum.gamma=0.5"] if scheme == "rope" else []
    cfg = compose([f"pos={scheme}", *momentum, "model.d_model=32", "model.n_layers=2", "model.n_heads=2",
                   "model.mlp_hidden=64"])
    model = model_for(cfg, vocab_size=16, max_len=24).to("meta")
    idx = torch.zeros(2, 20, dtype=torch.long, device="meta")
    logits = model(idx)
    logits.float().sum().backward()
    assert logits.device.type == "meta" and logits.shape == (2, 20, 16)
    assert all(p.grad is not None and p.grad.device.type == "meta" for p in model.parameters() if p.requires_grad)
    with torch.no_grad():
        model.pos.project_()
        assert model(idx).device.type == "meta"


def test_mixing_a_cpu_tensor_into_meta_raises():
    """What the test above relies on."""
    with pytest.raises(RuntimeError):
        torch.ones(3, device="meta") * torch.ones(3)


def test_compile_auto_is_off_on_both_devices_and_explicit_values_win():
    assert machine.choose_compile("auto", "cpu")[0] is False
    assert machine.choose_compile("auto", "cuda")[0] is False
    assert machine.choose_compile(True, "cpu") == (True, "as configured")
    assert machine.choose_compile(False, "cuda") == (False, "as configured")


def test_accelerator_cpu_is_cpu_whatever_the_machine():
    device, precision, _ = machine.choose("cpu", "auto")
    assert device == "cpu" and precision == ("bf16-mixed" if machine.native_bf16_cpu() else "32-true")
