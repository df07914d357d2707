"""Spectral surgery (ropelab.core.surgery): the swap leaves outputs unchanged, gradients reach Ω, A, Φ, freezing and
bifocal fractions work — for our Llama and for transformers' LlamaForCausalLM (tiny random configs, no hub) —
and ``train.py init_from=… surgery=spectral`` fine-tunes a finished run.

Tolerances: our model, bit-identical logits (torch.equal); HF, max |Δ logits| ≤ 1e-6 at the swap (0 observed);
HF and our model on the same weights, ≤ 1e-5 (0 observed in fp32 on CPU)."""

import csv
import math
import sys

import pytest
import torch

from conftest import ROOT, TINY, torch_threads_kept, train_here
from ropelab.core.build import check_config
from ropelab.core.config import compose
from ropelab.core.errors import ConfigError
from ropelab.core.model import Llama, LlamaConfig, build_model
from ropelab.core.positional.bifocal import Bifocal
from ropelab.core.positional.rope import RoPE
from ropelab.core.positional.spectral import SpectralRoPE
from ropelab.core.surgery import load_weights, spectral_parameters, spectralize

HF_TOL_SWAP = 1e-6  # HF logits before vs after the swap
HF_TOL_OURS = 1e-5  # HF vs our model on the same weights (different RMSNorm kernels; 0 observed)


def tiny(pos="rope", seed=0, heads=4, **pos_options):
    cfg = LlamaConfig(vocab_size=23, d_model=32, n_layers=2, n_heads=heads, mlp_hidden=48, max_len=64)
    torch.manual_seed(seed)
    return build_model(cfg, {"name": pos, **pos_options})


def tokens(B=3, T=40, vocab=23, seed=1):
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


def perturb_(params, seed=2, scale=0.1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params.values():
            p.add_(torch.randn(p.shape, generator=g) * scale)


# ----------------------------------------------------------------------------------------------- our Llama


@pytest.mark.parametrize("fraction, share", [(1.0, False), (0.5, False), (1.0, True), (0.75, False)])
def test_swap_is_exact_on_our_model(fraction, share):
    model, idx = tiny(), tokens()
    with torch.no_grad():
        before = model(idx)
    spectralize(model, spectral_fraction=fraction, share=share)
    assert isinstance(model.pos, SpectralRoPE if fraction == 1 else Bifocal)
    with torch.no_grad():
        after = model(idx)
    assert torch.equal(before, after)  # bit for bit: Ω = inv_freq, A = 1, Φ = 0
    phase = spectral_parameters(model)["phase"]
    assert torch.count_nonzero(phase) == 0


def test_swap_keeps_the_models_own_frequencies():
    model = tiny(base=500.0, freqs="bandpass")  # not the default spectrum: Ω must come from the model
    inv_freq = model.pos.inv_freq.clone()
    idx = tokens()
    with torch.no_grad():
        before = model(idx)
    spectralize(model, spectral_fraction=0.5)
    assert torch.equal(model.pos.spectral.omega, inv_freq.expand(2, -1))
    assert torch.equal(model.pos.geometric.inv_freq, inv_freq)
    with torch.no_grad():
        assert torch.equal(before, model(idx))


def test_phase_std_breaks_equality_and_is_opt_in():
    model, idx = tiny(), tokens()
    with torch.no_grad():
        before = model(idx)
    spectralize(model, phase_std=1e-2)
    with torch.no_grad():
        assert not torch.equal(before, model(idx))


def test_gradients_reach_omega_amplitude_phase():
    model, idx = tiny(), tokens()
    spectralize(model)
    model(idx).logsumexp(-1).mean().backward()
    for name, p in spectral_parameters(model).items():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert set(spectral_parameters(model)) == {"omega", "amplitude", "phase"}


def test_freeze_trains_only_the_spectral_parameters():
    model, idx = tiny(), tokens()
    spectralize(model, freeze=True)
    spectral = {id(p) for p in spectral_parameters(model).values()}
    assert all(p.requires_grad == (id(p) in spectral) for p in model.parameters())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model(idx).logsumexp(-1).mean().backward()
    opt.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed == {"pos.omega", "pos.amplitude", "pos.phase"}


@pytest.mark.parametrize("fraction, n_spectral", [(0.25, 1), (0.5, 2), (0.75, 3)])
def test_bifocal_fraction_keeps_the_other_heads_geometric(fraction, n_spectral):
    model = tiny()
    rope = model.pos
    spectralize(model, spectral_fraction=fraction)
    scheme = model.pos
    assert scheme.n_spectral == n_spectral
    assert all(p.shape == (n_spectral, 4) for p in spectral_parameters(model).values())
    perturb_(spectral_parameters(model))  # the spectral heads move; the geometric ones must not
    q, k = torch.randn(2, 3, 4, 10, 8).unbind(0)
    qs, ks = scheme.transform_qk(q, k, scheme.prepare(10, q.device))
    qr, kr = rope.transform_qk(q, k, rope.prepare(10, q.device))
    assert torch.equal(qs[:, n_spectral:], qr[:, n_spectral:]) and torch.equal(ks[:, n_spectral:], kr[:, n_spectral:])
    assert not torch.equal(qs[:, :n_spectral], qr[:, :n_spectral])


@pytest.mark.parametrize("kwargs, what", [({"spectral_fraction": 0}, "spectral_fraction"),
                                          ({"spectral_fraction": 1.5}, "spectral_fraction"),
                                          ({"phase_std": -1}, "phase_std"), ({"phase_on": "middle"}, "phase_on")])
def test_bad_options_are_refused(kwargs, what):
    with pytest.raises(ValueError, match=what):
        spectralize(tiny(), **kwargs)


@pytest.mark.parametrize("pos", ["spectral", "alibi", "rope_half"])
def test_only_fixed_rope_is_replaced(pos):
    with pytest.raises(ValueError, match="pos=rope"):
        spectralize(tiny(pos))


def test_load_weights_from_a_lightning_checkpoint(tmp_path):
    src, dst = tiny(seed=0), tiny(seed=5)
    torch.save({"state_dict": {f"model.{k}": v for k, v in src.state_dict().items()}, "global_step": 7},
               tmp_path / "x.ckpt")
    load_weights(dst, tmp_path / "x.ckpt")
    idx = tokens()
    with torch.no_grad():
        assert torch.equal(src(idx), dst(idx))
    narrow = Llama(LlamaConfig(vocab_size=23, d_model=16, n_layers=2, n_heads=2, mlp_hidden=48, max_len=64),
                   RoPE(8, 2, 64))
    with pytest.raises(ConfigError, match="init_from") as err:  # another shape: one line, not a traceback
        load_weights(narrow, tmp_path / "x.ckpt")
    assert "\n" not in str(err.value)


# ----------------------------------------------------------------------------------------------- Hugging Face


def _transformers():
    hf_dir = ROOT / ".venv" / "hf"  # `make bench` / `make test` install the pinned hf extra here
    if hf_dir.is_dir() and str(hf_dir) not in sys.path:
        sys.path.append(str(hf_dir))
    return pytest.importorskip("transformers", reason="transformers (the hf extra) is not installed: make test "
                                                      "installs it into .venv/hf")


@pytest.fixture
def hf():
    transformers = _transformers()
    transformers.logging.set_verbosity_error()
    return transformers


def hf_tiny(hf, kv_heads=4, seed=0, rope_theta=10000.0, rope=None):
    config = hf.LlamaConfig(vocab_size=23, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=64,
                            rms_norm_eps=1e-6, tie_word_embeddings=False, use_cache=False,
                            rope_parameters=rope or {"rope_type": "default", "rope_theta": rope_theta})
    torch.manual_seed(seed)
    return hf.LlamaForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32).eval()


def logits(model, idx, **kw):
    with torch.no_grad():
        return model(input_ids=idx, **kw).logits


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_hf_swap_keeps_logits(hf, fraction):
    model, idx = hf_tiny(hf, rope_theta=500.0), tokens()
    inv_freq = model.model.rotary_emb.inv_freq.clone()
    before = logits(model, idx)
    spectralize(model, spectral_fraction=fraction)
    after = logits(model, idx)
    assert (before - after).abs().max() <= HF_TOL_SWAP
    omega = spectral_parameters(model)["omega"]
    assert torch.equal(omega, inv_freq.expand_as(omega))


def test_hf_swap_keeps_the_attention_scaling(hf):
    """YaRN scales cos and sin (attention_scaling ≈ 1.07) and changes inv_freq: both are kept."""
    model = hf_tiny(hf, rope={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0,
                              "original_max_position_embeddings": 32})
    assert model.model.rotary_emb.attention_scaling != 1.0
    idx = tokens()
    before = logits(model, idx)
    spectralize(model)
    assert (logits(model, idx) - before).abs().max() <= HF_TOL_SWAP


def test_hf_matches_our_model_before_and_after_the_swap(hf):
    """The HF hook applies Ω, A, Φ per head as our scheme does: with the same weights and the same perturbed
    Ω, A, Φ (query-side Φ), HF and our model give the same logits."""
    from ropelab.core.surgery import to_hf

    ours, idx = tiny(), tokens()
    theirs = to_hf(ours)
    assert (logits(theirs, idx) - ours(idx).detach()).abs().max() <= HF_TOL_OURS
    spectralize(ours, spectral_fraction=0.5)
    spectralize(theirs, spectral_fraction=0.5)
    perturb_(spectral_parameters(ours), seed=3)
    perturb_(spectral_parameters(theirs), seed=3)
    with torch.no_grad():
        mine = ours(idx)
    assert (logits(theirs, idx) - mine).abs().max() <= HF_TOL_OURS
    assert not torch.allclose(mine, tiny()(idx).detach())  # the perturbation did change the outputs


def test_hf_gradients_and_freeze(hf):
    model, idx = hf_tiny(hf), tokens()
    spectralize(model, freeze=True)
    params = spectral_parameters(model)
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {
        f"model.rotary_emb.scheme.{n}" for n in ("omega", "amplitude", "phase")}
    model.train()
    model(input_ids=idx, labels=idx).loss.backward()
    for name, p in params.items():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_hf_cache_and_offset_positions(hf):
    """Incremental decoding (a cache, position offsets) gives the logits of the full forward."""
    model, idx = hf_tiny(hf), tokens(B=2, T=12)
    spectralize(model)
    perturb_(spectral_parameters(model))
    full = logits(model, idx)
    cache = hf.DynamicCache(config=model.config)
    with torch.no_grad():
        first = model(input_ids=idx[:, :8], use_cache=True, cache=cache)
        rest = model(input_ids=idx[:, 8:], use_cache=True, cache=cache)  # positions 8…11: the gathered tables
    assert (torch.cat([first.logits, rest.logits], dim=1) - full).abs().max() <= HF_TOL_OURS


def test_hf_grouped_query_attention_needs_share(hf):
    with pytest.raises(ValueError, match="share=True"):
        spectralize(hf_tiny(hf, kv_heads=2))
    model, idx = hf_tiny(hf, kv_heads=2), tokens()
    before = logits(model, idx)
    spectralize(model, share=True)
    assert (logits(model, idx) - before).abs().max() <= HF_TOL_SWAP


# ----------------------------------------------------------------------------------------------- train.py


def composed(*overrides):
    return compose([*TINY, *overrides])


@pytest.mark.parametrize("overrides, key", [
    (["surgery=fourier"], "surgery"), (["surgery=spectral", "surgery_train=some"], "surgery_train"),
    (["surgery=spectral", "surgery_spectral_fraction=0"], "surgery_spectral_fraction"),
    (["surgery=spectral", "surgery_spectral_fraction=1.5"], "surgery_spectral_fraction"),
    (["surgery=spectral", "surgery_phase_std=-1"], "surgery_phase_std"),
    (["surgery=spectral", "pos=alibi"], "surgery"), (["init_from=/nonexistent/run"], "init_from"),
])
def test_bad_surgery_config_is_one_line(overrides, key):
    with pytest.raises(ConfigError) as err:
        check_config(composed(*overrides))
    assert key in str(err.value) and "\n" not in str(err.value)


def _train_losses(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}


def test_init_from_and_surgery_by_config(tmp_path):
    """A finished run, spectralized by config and fine-tuned with only Ω, A, Φ free: its first loss (before
    any update) equals that of the same fine-tuning with fixed rope, and it moves only Ω, A, Φ."""
    common = [*TINY, "task=code_lm", "task.window=32", "task.ood.window=48"]
    pre = tmp_path / "pre"
    done = train_here(*common, "trainer.max_steps=3", "trainer.val_every=3", run_dir=pre)
    assert done["status"] == "completed", done
    tune = [*common, "seed=1", "trainer.max_steps=2", "trainer.val_every=2", f"init_from={pre}"]
    spec, ctl = tmp_path / "spec", tmp_path / "ctl"
    for extra, out in ((["surgery=spectral", "surgery_train=spectral"], spec), ([], ctl)):
        done = train_here(*tune, *extra, run_dir=out)
        assert done["status"] == "completed", done
    assert _train_losses(spec)[0] == _train_losses(ctl)[0]
    assert _train_losses(spec)[1] != _train_losses(ctl)[1]
    before = torch.load(pre / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    after = torch.load(spec / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    moved = {k for k in after if k not in before or not torch.equal(after[k], before[k])}
    assert moved == {"model.pos.omega", "model.pos.amplitude", "model.pos.phase"}
    import json

    summary = json.loads((spec / "summary.json").read_text())
    assert summary["surgery"] == "spectral" and summary["trainable_params"] == 3 * 2 * 8
    assert math.isfinite(summary["final"]["val/loss"])


# ----------------------------------------------------------------------------------------------- the experiment


def test_sawtooth_statistics():
    from ropelab.analysis.stats import binomial_two_sided, sawtooth
    from ropelab.experiments.surgery.phase import untrained_phase

    saw = sawtooth(1e-3 * (-1.0) ** torch.arange(16).repeat(4, 1).numpy(), permutations=2000)
    assert saw["alternation"] == 1.0 and saw["permutation_p"] < 0.01 and saw["lag1_autocorrelation"] < -0.9
    assert saw["mean_abs_phase"] == pytest.approx(1e-3)
    flat = sawtooth(torch.linspace(1e-4, 2e-3, 64).reshape(4, 16).numpy(), permutations=200)
    assert flat["alternation"] == 0.0 and flat["positive_fraction"] == 1.0
    assert binomial_two_sided(30, 60) == 1.0 and binomial_two_sided(60, 60) == pytest.approx(2 / 2 ** 60)
    assert untrained_phase(64)["expected_mean_abs"] == pytest.approx(1e-3 * math.sqrt(2 / math.pi))


def test_surgery_experiment_runs_and_reports(tmp_path):
    """The whole experiment on a tiny model: pretrain, swap check, three arms, report (not its numbers)."""
    import json

    from ropelab.experiments import surgery as surgery_experiment

    out = tmp_path / "out"
    with torch_threads_kept():  # in this process: the experiment trains through ropelab.core.train.run itself
        surgery_experiment.main(["--tiny", "--pretrain-steps", "6", "--finetune-steps", "4",
                                 "--runs", str(tmp_path / "runs"), "--out", str(out)])
    data = json.loads((out / "surgery.json").read_text())
    assert data["swap"]["bit_identical"] and data["swap_equal_to_control"]
    assert set(data["arms"]) == {"control", "spectral_only", "spectral_all"}
    assert data["arms"]["spectral_only"]["trainable_params"] == 3 * 2 * 8
    for arm in ("spectral_only", "spectral_all"):
        trace = data["arms"][arm]["trace"]
        assert not any(any(row) for row in trace["phase_init"])  # Φ starts at exactly 0
        assert 0 <= trace["sawtooth"]["alternation"] <= 1
    report = (out / "README.md").read_text()
    assert "## Verdict" in report and data["command"] in report and (out / "surgery.png").stat().st_size > 10_000
