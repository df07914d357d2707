"""bio_rotation — the Bifocal paper's distance test: a DNA motif, 100–200 noise tokens, its reverse complement.

One decoded example (motif_len=4, gap 3 for brevity; the default is motif_len=8, gap 100–200):

    <bos> A C G G  t a a  >  C C G T
          motif    noise  sep answer (loss only here)

The answer is the reverse complement of the motif (A↔T, C↔G, read backwards). Noise comes from its own
lower-case alphabet by default (``noise="lower"``), so the motif is findable by content and the difficulty is
the distance; ``noise="same"`` draws noise from A/C/G/T, so the motif can be found only by position.
OOD split: longer gaps. Per-group accuracy is keyed by the gap, in bins of ``group_bin`` tokens.
"""

from __future__ import annotations

import numpy as np

from ropelab.core.errors import require, require_int, require_ordered
from tasks.base import BOS, PAD, Task, pack

BASES = "ACGT"
COMPLEMENT = np.array([3, 2, 1, 0])  # A<->T, C<->G as indices into BASES


class BioRotation(Task):
    group_name = "gap"
    length_knobs = ("gap_min", "gap_max")  # scaled by ropelab.experiments.extrapolate

    def __init__(self, motif_len: int = 8, gap_min: int = 100, gap_max: int = 200, noise: str = "lower",
                 group_bin: int = 25):
        require_int(motif_len, "task.motif_len", 1)
        require_int(gap_min, "task.gap_min", 0)
        require_ordered(gap_min, gap_max, "task.gap_min", "task.gap_max")
        require(noise in ("lower", "same"), "task.noise", noise, "one of lower, same")
        require_int(group_bin, "task.group_bin", 1)
        self.motif_len, self.gap_min, self.gap_max, self.noise, self.group_bin = motif_len, gap_min, gap_max, noise, group_bin
        self.vocab = [PAD, BOS, *BASES, *BASES.lower(), ">"]
        self.seq_len = 1 + 2 * motif_len + gap_max + 1  # inputs drop the last answer token

    def sample_grouped(self, rng, n):
        bos, base0, lower0, sep = 1, 2, 6, 10
        m = self.motif_len
        motifs = rng.integers(0, 4, size=(n, m))
        gaps = rng.integers(self.gap_min, self.gap_max + 1, size=n)
        noise = rng.integers(0, 4, size=(n, self.gap_max)) + (lower0 if self.noise == "lower" else base0)
        answers = COMPLEMENT[motifs[:, ::-1]] + base0
        sequences, starts = [], []
        for i in range(n):
            g = gaps[i]
            seq = np.concatenate([[bos], motifs[i] + base0, noise[i, :g], [sep], answers[i]])
            sequences.append(seq)
            starts.append(len(seq) - m)
        inputs, targets = pack(sequences, starts, self.seq_len)
        return inputs, targets, (gaps // self.group_bin) * self.group_bin
