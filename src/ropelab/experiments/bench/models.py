"""The bench's models: ours per scheme (``build_ours``, through ``ropelab.core.build.model_for``) and Hugging Face's
Llama of the same shape (``build_hf``), each a ``Bench`` that times one training step."""

from __future__ import annotations

import sys
from typing import Callable, Sequence

import torch
from omegaconf import OmegaConf

from ropelab.core.cli import REPO


ROOT = REPO
CONF = ROOT / "conf"


# (label, scheme, overrides on top of pos=<scheme>)
SCHEMES: list[tuple[str, str, list[str]]] = [
    ("rope", "rope", []),
    ("spectral", "spectral", []),
    ("bifocal", "bifocal", []),
    ("pope", "pope", []),
    ("alibi", "alibi", []),
    ("nope", "nope", []),
    ("rope+momentum", "rope", ["pos.momentum.gamma=0.5"]),
]

REFERENCE = dict(d_model=128, n_layers=4, n_heads=4, mlp_hidden=512, seq_len=256, batch_size=32, vocab_size=16)
QUICK = dict(d_model=32, n_layers=1, n_heads=2, mlp_hidden=64, seq_len=32, batch_size=4, vocab_size=16)


def short_precision(precision: str) -> str:
    return "bf16" if str(precision).startswith("bf16") else "fp32"


def optim_config() -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONF / "config.yaml").optim, resolve=True)


def flops_per_step(non_embedding_params: int, layers: int, heads: int, seq: int, batch: int, qk_width: int,
                   v_width: int) -> float:
    tokens = batch * seq
    return 6.0 * non_embedding_params * tokens + 6.0 * layers * batch * heads * seq * seq * (qk_width + v_width)


class Bench:
    """One configuration: a model, its training-step member (optimiser, schedule, clipping) and a ``step()`` that
    takes the training step every run takes (``ropelab.core.lit.train_step``)."""

    def __init__(self, label: str, model: torch.nn.Module, member, logits: Callable[[torch.Tensor], torch.Tensor],
                 flops: float, params: int, precision: str = "32-true", device: str = "cpu", note: str = ""):
        self.label, self.model, self.member, self.logits = label, model, member, logits
        self.flops, self.params, self.precision, self.device, self.note = flops, params, precision, device, note
        self.autocast = short_precision(precision) == "bf16"
        self.steps = 0
        self.times: list[float] = []
        self.cpu_times: list[float] = []
        self.warmup_times: list[float] = []

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        from ropelab.core.lit import answer_loss, train_step

        def losses() -> torch.Tensor:
            with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.autocast):  # as Lightning's bf16-mixed
                return answer_loss(self.logits(inputs), targets).reshape(1)

        value, = train_step([self.member], losses, self.steps)
        if self.member.diverged is not None:
            raise RuntimeError(f"{self.label}: {self.member.why} in the bench")
        self.steps += 1
        return value


def build_ours(label: str, scheme: str, shape: dict, precision: str = "32-true", device: str = "cpu",
               compile_model: bool = False, attn_fp32: bool = True, note: str = "",
               overrides: Sequence[str] = ()) -> Bench:
    """``pos=<scheme>`` with ``overrides``, built as a run builds its model (``ropelab.core.build``) at ``shape``'s
    size, with the optimiser of the training path (LitLM's param groups)."""
    from ropelab.core.build import model_for
    from ropelab.core.config import compose
    from ropelab.core.lit import LitLM, Member

    cfg = compose([f"pos={scheme}", *overrides, f"model.attn_fp32={attn_fp32}",
                   *(f"model.{key}={shape[key]}" for key in ("d_model", "n_layers", "n_heads", "mlp_hidden"))])
    model = model_for(cfg, shape["vocab_size"], shape.get("max_len", shape["seq_len"])).to(device)
    member = Member.of(LitLM(model, cfg.optim, max_steps=400, diverge_grad_norm=cfg.trainer.diverge_grad_norm),
                       cfg.trainer.gradient_clip_val)
    non_embedding = model.num_parameters() - model.embed.weight.numel()
    qk_width = model.pos.qk_width(model.cfg.head_dim)
    flops = flops_per_step(non_embedding, model.cfg.n_layers, model.cfg.n_heads, shape["seq_len"],
                           shape["batch_size"], qk_width, qk_width)  # v is padded to the q/k width when they differ
    forward: Callable = model
    if compile_model:
        forward = torch.compile(model)
    return Bench(label, model, member, forward, flops, model.num_parameters(), precision, device, note)


HF_DIR = ROOT / ".venv" / "hf"  # where `make bench` installs the hf extra, outside the training venv


def hf_available() -> bool:
    if HF_DIR.is_dir() and str(HF_DIR) not in sys.path:
        sys.path.append(str(HF_DIR))  # appended: the venv's own numpy, torch, … still come first
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def build_hf(label: str, shape: dict, precision: str = "32-true", device: str = "cpu") -> Bench:
    import transformers
    from transformers import LlamaConfig as HFConfig

    from ropelab.core.lit import Member, choose_fused, warmup_cosine
    from transformers import LlamaForCausalLM

    transformers.logging.set_verbosity_error()
    config = HFConfig(vocab_size=shape["vocab_size"], hidden_size=shape["d_model"],
                      intermediate_size=shape["mlp_hidden"], num_hidden_layers=shape["n_layers"],
                      num_attention_heads=shape["n_heads"], num_key_value_heads=shape["n_heads"],
                      max_position_embeddings=shape["seq_len"], rms_norm_eps=1e-6, tie_word_embeddings=False,
                      use_cache=False, attention_bias=False, mlp_bias=False, initializer_range=0.02)
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa", torch_dtype=torch.float32).to(device)
    model.train()
    o = optim_config()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    fused, _ = choose_fused(o.get("fused", "auto"), model.parameters())  # ours gets it too: like for like
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=o["lr"], betas=tuple(o["betas"]),
                                  eps=o["eps"], fused=True if fused else None)
    warmup, min_ratio = int(o["warmup_steps"]), float(o["min_lr_ratio"])  # ours' schedule and clipping: like for like
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, warmup, 400, min_ratio))
    trainer = OmegaConf.load(CONF / "trainer" / "default.yaml")
    member = Member(model, optimizer, scheduler, trainer.gradient_clip_val, trainer.diverge_grad_norm)
    params = sum(p.numel() for p in model.parameters())
    non_embedding = params - model.model.embed_tokens.weight.numel()
    head_dim = shape["d_model"] // shape["n_heads"]
    flops = flops_per_step(non_embedding, shape["n_layers"], shape["n_heads"], shape["seq_len"],
                           shape["batch_size"], head_dim, head_dim)
    return Bench(label, model, member, lambda idx: model(input_ids=idx).logits, flops, params, precision, device,
                 note=f"transformers {transformers.__version__}, attn {model.config._attn_implementation}")
