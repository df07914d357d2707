"""The core math against its definitions, with no optional extra (issue 27: the survivors of mutation testing,
results/mutation/). Each test checks a known value, an identity the math gives or a hand-computed example."""

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ropelab.core import positional
from ropelab.core.lit import AnswerLoss, LitLM
from ropelab.core.positional.alibi import alibi_slopes
from tasks.base import IGNORE

H, D, T = 4, 16, 12


def scheme(**pos):
    return positional.build(pos, head_dim=D, n_heads=H, max_len=32)


def qk(s, q, k):
    return s.transform_qk(q, k, s.prepare(q.shape[-2], q.device))


def as_complex(x):
    """rotate_half layout: channel i and i + D/2 are the real and imaginary parts of pair i."""
    return torch.complex(*x.double().chunk(2, dim=-1))


# --- rotations: complex multiplication by e^{iθ} ----------------------------------------------------

def test_rope_is_complex_multiplication_by_e_i_m_theta():
    s = scheme(name="rope")
    q, k = torch.randn(2, H, T, D), torch.randn(2, H, T, D)
    rq, rk = qk(s, q, k)
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    turn = torch.polar(torch.ones(T, D // 2, dtype=torch.float64), torch.arange(T)[:, None] * theta)
    torch.testing.assert_close(as_complex(rq), as_complex(q) * turn, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(as_complex(rk), as_complex(k) * turn, atol=1e-5, rtol=1e-5)


def test_spectral_is_amplitude_times_e_i_m_omega_plus_phase():
    s = scheme(name="spectral", phase_on="query", amplitude_on="both")
    with torch.no_grad():
        s.omega.mul_(torch.linspace(0.5, 2.0, D // 2))
        s.amplitude.copy_(torch.linspace(0.5, 1.5, H * D // 2).view(H, D // 2))
        s.phase.copy_(torch.linspace(-1.0, 1.0, H * D // 2).view(H, D // 2))
    q, k = torch.randn(1, H, T, D), torch.randn(1, H, T, D)
    rq, rk = qk(s, q, k)
    omega, amp, phase = (p.detach().double()[:, None, :] for p in (s.omega, s.amplitude, s.phase))
    m = torch.arange(T, dtype=torch.float64)[:, None]
    torch.testing.assert_close(as_complex(rq), amp * as_complex(q) * torch.polar(torch.ones_like(amp * m), m * omega
                                                                                  + phase), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(as_complex(rk), amp * as_complex(k) * torch.polar(torch.ones_like(amp * m), m * omega),
                               atol=1e-5, rtol=1e-5)


# --- ALiBi slopes: the paper's reference code, any head count ---------------------------------------

def reference_slopes(n):
    """get_slopes of the ALiBi paper's code (ofirpress/attention_with_linear_biases)."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + reference_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 7, 12, 16])
def test_alibi_slopes_match_the_reference_code_at_any_head_count(n):
    assert alibi_slopes(n) == pytest.approx(reference_slopes(n), rel=1e-12)


# --- the loss counts the answer tokens only ---------------------------------------------------------

def test_training_loss_is_the_mean_over_answer_tokens_only():
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 1.5, 0.0], [0.0, 0.0, 3.0], [1.0, 1.0, 1.0]]])
    targets = torch.tensor([[IGNORE, 1, 2, IGNORE]])
    lse = torch.logsumexp(logits[0], dim=-1)
    expected = ((lse[1] - 1.5) + (lse[2] - 3.0)) / 2  # − log softmax at the two answer tokens, averaged
    torch.testing.assert_close(LitLM.loss(logits, targets), expected)
    # an ignored position's logits do not matter
    moved = logits.clone()
    moved[0, 0] = torch.tensor([9.0, -9.0, 4.0])
    torch.testing.assert_close(LitLM.loss(moved, targets), expected)


def test_answer_loss_averages_over_every_answer_token_of_every_batch():
    metric = AnswerLoss()
    a, b = torch.randn(2, 5, 7), torch.randn(1, 5, 7)
    ta = torch.full((2, 5), IGNORE)
    ta[0, 3], ta[1, 1], ta[1, 4] = 2, 6, 0
    tb = torch.full((1, 5), IGNORE)
    tb[0, 0] = 5
    metric.update(a, ta)
    metric.update(b, tb)
    per_token = [F.cross_entropy(a[0, 3], torch.tensor(2)), F.cross_entropy(a[1, 1], torch.tensor(6)),
                 F.cross_entropy(a[1, 4], torch.tensor(0)), F.cross_entropy(b[0, 0], torch.tensor(5))]
    torch.testing.assert_close(metric.compute(), torch.stack(per_token).mean())  # 4 tokens, not 2 batches
    with warnings.catch_warnings():  # torchmetrics warns of a compute before any update
        warnings.simplefilter("ignore")
        assert AnswerLoss().compute() == 0  # no answer token yet: 0, not a division by zero
