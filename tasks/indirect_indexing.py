"""indirect_indexing — PoPE's indirect indexing task (PoPE paper, appendix B.1).

Two token formats (``format``), the same examples (the same draws give the same string, source letter,
shift and answer in both):

``paper`` (default) — appendix B.1's character format, one token per character, separators included. The
paper's example ``QEOHoUbKfeSrMVNlCzXu, z, -3, N`` is the token sequence

    <bos> Q E O H o U b K f e S r M V N l C z X u , ␣ z , ␣ - 3 , ␣ N
          source string (unique letters)          src     shift     answer (loss only here)

(``␣`` is the space token). The shift is written in decimal, one token per character: ``-`` then its digits
for a negative shift (``-15`` is ``- 1 5``), the digits alone otherwise (``3``, ``0``, ``12``: no ``+``).
Vocabulary: ``<pad> <bos> , ␣ - 0…9`` and the 52 letters.

``compact`` — the shift is one token (``"-15"`` … ``"15"``) and the spaces are dropped:

    <bos> Q E O H o U b K f e S r M V N l C z X u , z , -3 , N

The source string is ``len_min``–``len_max`` distinct upper/lower-case letters (sampled without replacement
from the 52), one token each; then a source letter taken from the string, the shift and the answer: the letter
``shift`` places from the source letter (negative: to its left). The shift is uniform in
[-shift_max, shift_max] (0 included, as in the paper), and the source letter is uniform among the positions
from which that shift lands inside the string. Loss on the final answer token only (in both formats).
Group key (``group_by``): ``length`` (default), the string length in bins of ``group_bin`` labelled by their longest
length (bin 25 = lengths 21–25; with the defaults no bin mixes training and OOD lengths); or ``shift``, the shift
itself, so a run's per-group accuracy tells the lookup (shift ≠ 0) from copying the source letter (shift 0).
OOD split: longer strings (41–52; training uses 20–40).

Size knobs (issue 22): ``len_min``/``len_max`` (the string), ``shift_max`` (the shift range) and ``n_letters``
(the alphabet: the first ``n_letters`` of ``A…Z a…z``, 2–52, ``len_max`` at most; the vocabulary holds those
letters only). The defaults are the paper's (20–40, ±15, 52 letters) and draw what the code drew before the
knobs, bit for bit. ``len_min=5 len_max=10 shift_max=2 n_letters=13`` (rung 2 below) gives, for
``sample_grouped(numpy.random.default_rng(0), 4)``, first the example

    JBLAGEFMCI, G, 1, E
    string over A…M   src  shift  answer (E is one right of G)

``rung`` labels a rung of the size ladder ``RUNGS`` (4 = the paper's sizes; null, the default, outside the
ladder). The task's config sets every size from it (``${ladder:…}`` in conf/task/indirect_indexing.yaml, null giving
the paper's), and the task checks that ``shift_max`` and ``n_letters`` are the rung's (its lengths may be the OOD
split's or an extrapolation's).
The first seed-0 example of each rung (paper format; tests/task_generators/test_indirect_ladder.py checks them):

    rung 1  len 4–8,   shift ±1,  10 letters (A…J), OOD 9–10   JBAGEFCI, A, 1, G
    rung 2  len 5–10,  shift ±2,  13 letters (A…M), OOD 11–13  JBLAGEFMCI, G, 1, E
    rung 3  len 10–20, shift ±6,  26 letters (A…Z), OOD 21–26  JBSLATNQXRPGEWVUFMC, J, 2, S
    rung 4  len 20–40, shift ±15, 52 letters, OOD 41–52        JBSLAzuTeNsxQhnplXdqRigPGmoEWtVbUacfF, T, -6, B
"""

from __future__ import annotations

import string

import numpy as np

from ropelab.core.errors import require, require_int
from tasks.base import BOS, PAD, Task, pack

LETTERS = string.ascii_uppercase + string.ascii_lowercase
FORMATS = ("paper", "compact")
GROUP_BY = ("length", "shift")
DIGITS = "0123456789"
# The size ladder (issue 22): rung → sizes, the paper's at the top. PLACEHOLDERS until calibrated
# (conf/experiment/calibrate_indirect_indexing.yaml): change a rung here and its docstring example above.
# ood_*: the OOD split's longer strings (up to n_letters: letters are unique); group_bin keeps them in bins apart.
RUNGS = {
    1: dict(len_min=4, len_max=8, shift_max=1, n_letters=10, group_bin=2, ood_len_min=9, ood_len_max=10),
    2: dict(len_min=5, len_max=10, shift_max=2, n_letters=13, group_bin=5, ood_len_min=11, ood_len_max=13),
    3: dict(len_min=10, len_max=20, shift_max=6, n_letters=26, group_bin=5, ood_len_min=21, ood_len_max=26),
    4: dict(len_min=20, len_max=40, shift_max=15, n_letters=52, group_bin=5, ood_len_min=41, ood_len_max=52),
}


class IndirectIndexing(Task):
    group_name = "length"
    length_knobs = ("len_min", "len_max")  # scaled by ropelab.experiments.extrapolate

    def __init__(self, len_min: int = 20, len_max: int = 40, shift_max: int = 15, group_bin: int = 5,
                 format: str = "paper", n_letters: int = len(LETTERS), rung: int | None = None,
                 group_by: str = "length"):
        require_int(shift_max, "task.shift_max", 0)
        require_int(len_min, "task.len_min", shift_max + 1, f"an integer > task.shift_max ({shift_max})")
        letters_allowed = f"an integer in 2..{len(LETTERS)} (the first n of A…Z a…z)"
        require_int(n_letters, "task.n_letters", 2, letters_allowed)
        require(n_letters <= len(LETTERS), "task.n_letters", n_letters, letters_allowed)
        allowed = f"an integer in task.len_min ({len_min})..task.n_letters ({n_letters}): the letters are unique"
        require_int(len_max, "task.len_max", len_min, allowed)
        require(len_max <= n_letters, "task.len_max", len_max, allowed)
        require_int(group_bin, "task.group_bin", 1)
        require(format in FORMATS, "task.format", format, f"one of {', '.join(FORMATS)}")
        require(group_by in GROUP_BY, "task.group_by", group_by, f"one of {', '.join(GROUP_BY)}")
        self.group_name = self.group_by = group_by
        if rung is not None:
            require(rung in RUNGS, "task.rung", rung, f"null or one of {', '.join(map(str, RUNGS))} (RUNGS)")
            own = RUNGS[rung]
            require(shift_max == own["shift_max"] and n_letters == own["n_letters"], "task.rung", rung,
                    f"rung {rung} has shift_max={own['shift_max']} n_letters={own['n_letters']}, not "
                    f"{shift_max} and {n_letters}: set the sizes with the rung (${{ladder:…}}) or task.rung=null")
        self.len_min, self.len_max, self.shift_max, self.group_bin = len_min, len_max, shift_max, group_bin
        self.n_letters, self.rung = n_letters, rung
        letters = LETTERS[:n_letters]
        self.format = format
        if format == "paper":
            # the vocabulary does not depend on shift_max, so a model serves any split
            self.vocab = [PAD, BOS, ",", " ", "-", *DIGITS, *letters]
            self.seq_len = len_max + 9 + len(str(shift_max))  # <bos> s ", " c ", " [-]d… ", " a, minus the answer
        else:
            self.vocab = [PAD, BOS, ",", *letters, *(str(s) for s in range(-shift_max, shift_max + 1))]
            self.seq_len = 1 + len_max + 6 - 1  # ", src , shift , answer"; inputs drop the answer token
        self.token_id = {tok: i for i, tok in enumerate(self.vocab)}
        self.letter0 = self.token_id["A"]

    def shift_tokens(self, shift: int) -> list[int]:
        """The token ids that write ``shift`` in this format."""
        ids = self.token_id
        if self.format == "paper":
            return [ids[ch] for ch in str(int(shift))]
        return [ids[str(int(shift))]]

    def text(self, ids) -> str:
        """An example as text: the paper format joins its characters (``QEOH…u, z, -3, N``), the compact one
        joins its tokens with spaces (``Q E … u , z , -3 , N``); <bos> and padding are left out."""
        toks = [self.vocab[int(i)] for i in ids if int(i) > 1]  # 0 = <pad>, 1 = <bos>
        return "".join(toks) if self.format == "paper" else " ".join(toks)

    def encode(self, text: str) -> list[int]:
        """<bos> + the paper-format text as token ids (one per character); the inverse of ``text``."""
        require(self.format == "paper", "task.format", self.format, "encode reads the paper format only")
        ids = self.token_id
        return [ids[BOS], *(ids[ch] for ch in text)]

    def shortcuts(self) -> dict[str, float]:
        """``copy``: answer the source letter — right on shift 0 (probability 1/(2·shift_max+1)), otherwise the
        in-context guess among the string's letters (1/length, lengths uniform): what a model scores that copies and
        has not found the lookup (rung 1: 45.1 %, rung 2: 31.3 %)."""
        p_zero = 1 / (2 * self.shift_max + 1)
        guess = float(np.mean([1 / length for length in range(self.len_min, self.len_max + 1)]))
        return {"copy": p_zero + (1 - p_zero) * guess}

    def sample_grouped(self, rng, n):
        ids = self.token_id
        bos, comma = ids[BOS], ids[","]
        sep = [comma, ids[" "]] if self.format == "paper" else [comma]
        length = rng.integers(self.len_min, self.len_max + 1, size=n)
        letters = np.argsort(rng.random((n, self.n_letters)), axis=1)[:, : self.len_max]
        shift = rng.integers(-self.shift_max, self.shift_max + 1, size=n)
        first = np.maximum(0, -shift)  # source positions p with 0 <= p + shift < length
        source = first + (rng.random(n) * (length - np.abs(shift))).astype(np.int64)
        rows = np.arange(n)
        src, answer = letters[rows, source] + self.letter0, letters[rows, source + shift] + self.letter0
        sequences, starts = [], []
        for i in range(n):
            seq = [bos, *(letters[i, : length[i]] + self.letter0), *sep, src[i], *sep,
                   *self.shift_tokens(shift[i]), *sep, answer[i]]
            sequences.append(seq)
            starts.append(len(seq) - 1)
        inputs, targets = pack(sequences, starts, self.seq_len)
        if self.group_by == "shift":
            return inputs, targets, shift
        return inputs, targets, -(-length // self.group_bin) * self.group_bin  # the bin's longest length
