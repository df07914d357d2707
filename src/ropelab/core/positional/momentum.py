"""Momentum attention (arXiv 2602.04902): q̂_t = q_t + γ(q_t − q_{t−1}), the same for keys.

Applied around any scheme, after its positional transform, values untouched: configured once as ``pos.momentum``
(defaults and one comment per key in conf/config.yaml), read and checked by ``options_of`` and applied by the
attention block (``ropelab.core.model.Attention``); no scheme knows of it. As a filter on the sequence axis its gain
is |H(ω)|² = 1 + 4γ(1+γ)sin²(ω/2): low frequencies pass, the highest are amplified (1 + 2γ)×. Following the
paper's reference code, q_{−1} = 0, so q̂_0 = (1 + γ) q_0.

The options of the paper's §5.2, §5.3 and §6.1 (issue 38), each off by default:

* γ per layer — ``gamma`` as a list (one per layer, shallow first), or ``per_layer: linear`` from
  ``gamma_shallow`` (the first layer) to ``gamma_deep`` (the last); §6.1 proposes large γ in shallow layers
  (local patterns) and small in deep ones (global), §5.3 "lower γ for deep networks";
* warm-up — ``warmup_steps: N``: every layer's γ times min(1, (step + 1)/N), the rule of ``optim.warmup_steps``
  (so a warm-up no longer than the run ends at the full γ, the γ the run's checkpoint is evaluated with);
* adaptive γ — ``adaptive.enabled``: the paper's ``AdaptiveGamma(init=0.5, max_gamma=1.0)``, one γ for every
  layer, γ ← clip(γ + rate·(1 − ‖g‖/grad_norm_ref), 0, max) after each update's gradient, ‖g‖ the total L2
  norm of the gradients before clipping (``train/grad_norm``); the paper's constants are the defaults;
* normalisation — ``normalize``: the momentum term rescaled to the query's (key's) own length, ``normalized``.

A γ that changes during training (warm-up, adaptive) is a 0-dim buffer in each attention block, written in place
by ``GammaSchedule`` at every step (``ropelab.core.lit.LitLM`` calls it and logs the step's γ as ``pos/gamma``);
an adaptive γ is part of the model's state (its checkpoint, so a resumed or evaluated run has its γ), a warm-up's
is not (it follows from the step). Every other γ is a Python float, as it always was: γ = 0 skips momentum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F

from ropelab.core.errors import ConfigError, require

KEY = "momentum"  # its block in the pos node: pos.momentum.gamma, …
OPTIONS = ("gamma", "per_layer", "gamma_shallow", "gamma_deep", "warmup_steps", "normalize", "adaptive")
ADAPTIVE_OPTIONS = ("enabled", "init", "max", "rate", "grad_norm_ref")
PER_LAYER_RULES = ("linear",)
NORM_EPS = 1e-6  # below this length a momentum term is treated as zero by ``normalized``


@dataclass(frozen=True)
class Adaptive:
    """§5.2's AdaptiveGamma: its defaults are the paper's constants."""
    init: float = 0.5
    max: float = 1.0
    rate: float = 0.01
    grad_norm_ref: float = 10.0

    def update(self, gamma: float, grad_norm: float) -> float:
        """The next γ after an update whose gradient norm was ``grad_norm`` (the paper's ``update``)."""
        return min(max(gamma + self.rate * (1.0 - grad_norm / self.grad_norm_ref), 0.0), self.max)


@dataclass(frozen=True)
class MomentumOptions:
    """``pos.momentum`` checked: each layer's γ (shallow first; with a warm-up, the γ it reaches), the warm-up's
    length, the normalisation, and the adaptive rule (None: off; then ``gammas`` are its start, ``init``)."""
    gammas: tuple[float, ...]
    warmup_steps: int = 0
    normalize: bool = False
    adaptive: Adaptive | None = None

    @classmethod
    def constant(cls, gamma: float, n_layers: int) -> MomentumOptions:
        return cls((float(gamma),) * n_layers)

    @property
    def dynamic(self) -> bool:
        """γ changes during training: a buffer written every step (``GammaSchedule``)."""
        return self.warmup_steps > 0 or self.adaptive is not None


def _number(value, key: str, allowed: str = "a number >= 0") -> float:
    require(isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0, key, value, allowed)
    return float(value)


def options_of(pos: Mapping[str, Any], n_layers: int, max_steps: int | None = None) -> MomentumOptions:
    """The ``pos`` node's momentum block for a model of ``n_layers`` layers (and a run of ``max_steps``, when
    known), checked: a one-line ConfigError naming the key otherwise. No block: γ = 0 everywhere."""
    block = dict(pos.get(KEY) or {})
    for key in block:
        if key not in OPTIONS:
            raise ConfigError(f"pos.{KEY}.{key} is not a known key: valid keys are {', '.join(OPTIONS)}")
    gamma = block.get("gamma", 0.0)
    rule = block.get("per_layer")
    require(rule is None or rule in PER_LAYER_RULES, f"pos.{KEY}.per_layer", rule,
            f"null or {', '.join(PER_LAYER_RULES)} (γ from gamma_shallow in the first layer to gamma_deep in the last)")
    if rule is None:
        for key in ("gamma_shallow", "gamma_deep"):
            require(block.get(key) is None, f"pos.{KEY}.{key}", block.get(key),
                    f"null unless pos.{KEY}.per_layer={PER_LAYER_RULES[0]} (a list in pos.{KEY}.gamma sets each layer)")
        if isinstance(gamma, (list, tuple)):
            require(len(gamma) == n_layers, f"pos.{KEY}.gamma", list(gamma),
                    f"one γ per layer: a list of model.n_layers={n_layers} numbers >= 0 (shallow first), or one number")
            gammas = tuple(_number(g, f"pos.{KEY}.gamma[{i}]") for i, g in enumerate(gamma))
        else:
            gammas = (_number(gamma, f"pos.{KEY}.gamma", "a number >= 0, or a list of one per layer"),) * n_layers
    else:
        require(gamma == 0, f"pos.{KEY}.gamma", gamma,
                f"0 with pos.{KEY}.per_layer={rule} (its gamma_shallow and gamma_deep set every layer's γ)")
        shallow = _number(block.get("gamma_shallow"), f"pos.{KEY}.gamma_shallow")
        deep = _number(block.get("gamma_deep"), f"pos.{KEY}.gamma_deep")
        last = max(1, n_layers - 1)
        gammas = tuple(shallow + (deep - shallow) * (i / last) for i in range(n_layers))
    warmup = block.get("warmup_steps", 0)
    require(isinstance(warmup, int) and not isinstance(warmup, bool) and warmup >= 0, f"pos.{KEY}.warmup_steps",
            warmup, "an integer >= 0 (0 = no warm-up)")
    if max_steps is not None:
        require(warmup <= max_steps, f"pos.{KEY}.warmup_steps", warmup,
                f"an integer in [0, trainer.max_steps={max_steps}]: a warm-up no longer than the run")
    normalize = block.get("normalize", False)
    require(isinstance(normalize, bool), f"pos.{KEY}.normalize", normalize, "true or false")
    adaptive = _adaptive_of(block.get("adaptive") or {})
    if adaptive is not None:  # one γ for every layer, from adaptive.init: nothing else may set it
        why = f"with pos.{KEY}.adaptive.enabled=true (adaptive γ: one γ for every layer, from pos.{KEY}.adaptive.init)"
        require(rule is None, f"pos.{KEY}.per_layer", rule, f"null {why}")
        require(not any(gammas), f"pos.{KEY}.gamma", gamma, f"0 {why}")
        require(warmup == 0, f"pos.{KEY}.warmup_steps", warmup, f"0 {why}")
        gammas = (adaptive.init,) * n_layers
    return MomentumOptions(gammas, warmup, normalize, adaptive)


def _adaptive_of(block: Mapping[str, Any]) -> Adaptive | None:
    prefix = f"pos.{KEY}.adaptive"
    for key in block:
        if key not in ADAPTIVE_OPTIONS:
            raise ConfigError(f"{prefix}.{key} is not a known key: valid keys are {', '.join(ADAPTIVE_OPTIONS)}")
    enabled = block.get("enabled", False)
    require(isinstance(enabled, bool), f"{prefix}.enabled", enabled, "true or false")
    defaults = Adaptive()
    values = {key: block.get(key, getattr(defaults, key)) for key in ADAPTIVE_OPTIONS[1:]}
    for key, value in values.items():
        require(isinstance(value, (int, float)) and not isinstance(value, bool), f"{prefix}.{key}", value, "a number")
    require(values["max"] > 0, f"{prefix}.max", values["max"], "a number > 0 (γ is clipped to [0, max])")
    require(0 <= values["init"] <= values["max"], f"{prefix}.init", values["init"],
            f"a number in [0, {prefix}.max={values['max']}]")
    require(values["rate"] > 0, f"{prefix}.rate", values["rate"], "a number > 0 (the step of γ per update)")
    require(values["grad_norm_ref"] > 0, f"{prefix}.grad_norm_ref", values["grad_norm_ref"],
            "a number > 0 (the gradient norm at which γ stops moving)")
    return Adaptive(**{k: float(v) for k, v in values.items()}) if enabled else None


def momentum(x: torch.Tensor, gamma: float | torch.Tensor, normalize: bool = False) -> torch.Tensor:
    """x: (B, H, T, D); returns x + γ(x_t − x_{t−1}) along T, the difference ``normalized`` if asked."""
    previous = F.pad(x, (0, 0, 1, 0))[..., :-1, :]
    difference = x - previous
    if normalize:
        difference = normalized(difference, x)
    return x + gamma * difference


def normalized(difference: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The momentum term p_t = x_t − x_{t−1} rescaled to x_t's length, per batch row, head and position, over the
    head's channels: p_t · ‖x_t‖ / ‖p_t‖ (p_t = 0 stays 0), so ‖q̂_t − q_t‖ = γ‖q_t‖ and ‖q̂_t‖ ≤ (1 + γ)‖q_t‖
    however fast q turns from one token to the next.

    Our reading of §5.3's "add layer normalisation to stabilise the momentum term" (the paper gives no formula):
    what the paper calls unstable is the momentum term's size — the filter amplifies the fastest-turning rotary
    pairs up to (1 + 2γ)× — so the term's length is normalised, and to the query's own length rather than to 1,
    so that γ keeps one meaning (the term's size relative to q) whatever scale the projections learn. No mean is
    subtracted and no gain is learned, as LayerNorm would: a mean over rotary channels has no meaning (a rotation
    keeps lengths, not means), and a gain would give every scheme parameters of the wrapper's. The direction of
    p_t, and so which pairs it emphasises, is kept; the filter formula |H(ω)|² then no longer holds (the scale
    depends on the input)."""
    wide = torch.promote_types(x.dtype, torch.float32)  # the lengths in at least fp32 (bf16 q under autocast)
    scale = x.to(wide).norm(dim=-1, keepdim=True) / difference.to(wide).norm(dim=-1, keepdim=True).clamp_min(NORM_EPS)
    return difference * scale.to(difference.dtype)


def gain_squared(omega: torch.Tensor, gamma: float) -> torch.Tensor:
    """|H(ω)|² of the momentum filter, for checking the formula."""
    return 1 + 4 * gamma * (1 + gamma) * torch.sin(omega / 2) ** 2


class GammaSchedule:
    """A γ that changes during training, in the attention blocks ``attentions`` (shallow first): each block's
    float γ is replaced by a 0-dim buffer, written in place at every step (``start_step``) and, for adaptive γ,
    after every update's gradient (``after_gradient``). Evaluation uses whatever the buffers hold: the built
    model's is the full γ after warm-up, or the adaptive ``init`` until a checkpoint's state is loaded."""

    def __init__(self, options: MomentumOptions, attentions: Sequence[torch.nn.Module]):
        require(options.dynamic, f"pos.{KEY}", options, "a warm-up or adaptive γ (a constant γ needs no schedule)")
        self.options, self.attentions = options, list(attentions)
        for attn, gamma in zip(self.attentions, options.gammas, strict=True):
            del attn.momentum_gamma  # the float the block was built with: a buffer of the same name instead
            # adaptive γ is state (the checkpoint keeps it), a warm-up's follows from the step; float64: the rule's
            # arithmetic as the paper's NumPy does it (a 0-dim tensor leaves q's dtype as it is)
            attn.register_buffer("momentum_gamma", torch.tensor(gamma, dtype=torch.float64),
                                 persistent=options.adaptive is not None)

    def gammas(self) -> list[float]:
        """Every layer's γ now."""
        return [float(attn.momentum_gamma) for attn in self.attentions]

    def start_step(self, step: int) -> float:
        """Before training step ``step`` (0-based): sets every layer's γ for it; returns its mean over layers."""
        if self.options.warmup_steps:
            ramp = min(1.0, (step + 1) / self.options.warmup_steps)
            for attn, gamma in zip(self.attentions, self.options.gammas):
                attn.momentum_gamma.fill_(gamma * ramp)
        values = self.gammas()
        return sum(values) / len(values)

    def after_gradient(self, grad_norm: float | torch.Tensor) -> None:
        """After an update's gradient of norm ``grad_norm``: the adaptive rule's next γ (nothing for a warm-up)."""
        if self.options.adaptive is not None:
            gamma = self.options.adaptive.update(self.gammas()[0], float(grad_norm))
            for attn in self.attentions:
                attn.momentum_gamma.fill_(gamma)
