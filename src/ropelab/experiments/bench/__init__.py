"""Training-step benchmark: our Llama per positional scheme against Hugging Face's LlamaForCausalLM.

    ropelab bench              # the reference config (make bench); writes bench/out/bench-<time>.{json,md}
    ropelab bench --quick      # tiny config, 1 round: checks that the bench runs (seconds)
    ropelab bench --levers     # also torch.compile, the other precision, bf16 attention
    ropelab bench --device cuda  # on a GPU (make gpu-check runs it there)
    ropelab bench --mixes      # only the tables' jobs per core-hour under each speed lever (issue 23)

What one "step" is, for every configuration: forward, loss (``LitLM.loss``), backward, gradient clipping
at 1.0 (as ``trainer.gradient_clip_val``), AdamW step, zero_grad. Our model gets the optimiser of
``LitLM.configure_optimizers`` (the training path's param groups); HF's Llama, built from the same config
(random init, no download, ``attn_implementation="sdpa"``, same parameter count), gets AdamW with the same
hyper-parameters, the same decay / no-decay split and the same fused kernel (``optim.fused``; bench records before
issue 23 ran both unfused).

Device and precision are those a training run would choose (``ropelab.core.machine.choose``, both ``auto`` by
default): bf16-mixed autocast on CUDA and on CPUs with native bf16, fp32 elsewhere. Every scheme and HF run at
that precision; when it is not fp32, HF (and rope) also run in fp32, so each row says how it compares with HF
at the same precision and with HF fp32.

Every configuration is built and warmed up first; then the timed rounds go round-robin over all of them
(each round starting one configuration later), so a drift in machine load hits all configurations alike.
Per configuration: the median and best step time over the rounds; speed ratios are taken per round and
then the median over rounds, from wall clock and from process CPU time (which a busy machine inflates less).
Only ratios measured within one run are meaningful; the JSON records the load average before, during and after.

FLOPs per step: 6 · (non-embedding parameters) · tokens + attention, 6 · layers · B · H · T² · (w_qk + w_v)
(QKᵀ and AV, forward and backward, causal half not subtracted). The physical limit of a step is its FLOPs at
the best GEMM rate of the precision it uses (fp32 or bf16), measured in the same run at the model's own shapes
and at one large square; "of limit" = that time over the row's best step time.

``--sweep-estimate`` also times the training step of every (task, scheme) of ``bifocal_table1`` at the task's
length and its evaluation forwards, and estimates the wall time of the whole sweep on this machine from process
CPU time (what a job gets when it has a core to itself).

The package, by job: ``hardware`` (CPU, load, matmul peak), ``models`` (ours and HF's, one timed step each),
``training`` (generators, the sweep estimate, a real run), ``mixes`` (the paper tables' job mixes under each lever),
``cli`` (the measures in order, the table, the command).
"""

from ropelab.experiments.bench.cli import main

__all__ = ["main"]
