"""code_lm — character-level language modelling on real Python code (the installed torch package's sources).

One decoded example (a window of ``window`` characters; the loss is on every next character):

    inputs : "def forward(self, x):\\n        return self.linear(x"
    targets: "ef forward(self, x):\\n        return self.linear(x)"

The corpus is every ``.py`` file under ``root`` (default: the installed ``torch`` package's directory, found
with ``importlib.util.find_spec`` — torch is never imported and nothing is downloaded), split BY FILE,
deterministically: the MD5 of a file's path relative to ``root``, mod 100, puts it in val (below
``val_percent``), test (the next ``test_percent``) or train (the rest). ``for_split(split)`` returns the task
that draws from that split's files ("ood" draws from the test files); windows lie inside one file, their
start uniform over all valid positions of the split. Vocabulary: ``<pad>``, ``<unk>`` (anything not printable
ASCII, newline or tab, e.g. ``\\r`` and non-ASCII characters, one ``<unk>`` per character), newline, tab and
the 95 printable ASCII characters. The metric is bits per character = cross-entropy loss (nats) / ln 2.
The text is read once per split, lazily, on the first sample (building the task only stores parameters).
Group key: the window length. OOD split: test files, longer windows (256; training uses 128).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.util
import os

import numpy as np

from ropelab.core.errors import require, require_int
from tasks.base import PAD, Task

UNK = "<unk>"
CHARS = ["\n", "\t", *(chr(c) for c in range(32, 127))]
SPLIT_OF = {"train": "train", "val": "val", "test": "test", "ood": "test"}
_CORPORA: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # (root, split, %) -> (text, starts, lengths)


def torch_source_dir() -> str | None:
    spec = importlib.util.find_spec("torch")  # locates the package without importing it
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def file_split(relpath: str, val_percent: int, test_percent: int) -> str:
    bucket = int(hashlib.md5(relpath.encode()).hexdigest(), 16) % 100
    return "val" if bucket < val_percent else "test" if bucket < val_percent + test_percent else "train"


@functools.lru_cache(maxsize=8)
def list_files(root: str) -> tuple[str, ...]:
    """Relative paths of every .py file under root, sorted (cached)."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        found.extend(os.path.relpath(os.path.join(folder, f), root) for f in files if f.endswith(".py"))
    return tuple(sorted(found))


def encode(data: bytes) -> np.ndarray:
    """UTF-8 bytes -> token ids (uint8), one per character: continuation bytes are dropped, non-ASCII -> <unk>."""
    raw = np.frombuffer(data, dtype=np.uint8)
    lut = np.full(256, 1, dtype=np.uint8)  # 1 = <unk>
    for i, ch in enumerate(CHARS):
        lut[ord(ch)] = 2 + i
    return lut[raw[(raw & 0xC0) != 0x80]]


class CodeLM(Task):
    group_name = "window"
    length_knobs = ("window",)  # scaled by ropelab.experiments.extrapolate

    def __init__(self, window: int = 128, val_percent: int = 5, test_percent: int = 5, root: str | None = None):
        require_int(window, "task.window", 1)
        require_int(val_percent, "task.val_percent", 1, "an integer in 1..98")
        require_int(test_percent, "task.test_percent", 1, f"an integer >= 1 with task.val_percent + test_percent <= 99")
        require(val_percent + test_percent <= 99, "task.test_percent", test_percent,
                f"an integer >= 1 with task.val_percent ({val_percent}) + test_percent <= 99")
        if root is None:
            root = torch_source_dir()
            require(root is not None, "task.root", root, "a directory of .py files (torch is not installed here)")
        require(isinstance(root, str) and os.path.isdir(root), "task.root", root, "an existing directory of .py files")
        self.window, self.val_percent, self.test_percent, self.root = window, val_percent, test_percent, root
        self.split = "train"
        self.vocab = [PAD, UNK, *CHARS]
        self.seq_len = window

    def for_split(self, split: str) -> "CodeLM":
        require(split in SPLIT_OF, "split", split, ", ".join(SPLIT_OF))
        task = copy.copy(self)
        task.split = SPLIT_OF[split]
        return task

    def corpus(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(token ids of the split's files end to end, each file's start, each file's length), cached."""
        key = (os.path.realpath(self.root), self.split, self.val_percent, self.test_percent)
        if key not in _CORPORA:
            paths = [p for p in list_files(self.root)
                     if file_split(p, self.val_percent, self.test_percent) == self.split]
            parts = []
            for p in paths:
                with open(os.path.join(self.root, p), "rb") as f:
                    parts.append(encode(f.read()))
            lengths = np.array([len(t) for t in parts], dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            text = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)
            _CORPORA[key] = (text, starts, lengths)
        return _CORPORA[key]

    def sample_grouped(self, rng, n):
        text, starts, lengths = self.corpus()
        w = self.window
        room = np.maximum(lengths - w, 0)  # valid window starts per file (window + 1 characters)
        cum = np.cumsum(room)
        require(len(cum) > 0 and cum[-1] > 0, "task.window", w,
                f"shorter than some {self.split} file under {self.root} (none has {w + 1} characters)")
        u = rng.integers(0, cum[-1], size=n)
        f = np.searchsorted(cum, u, side="right")
        begin = starts[f] + u - (cum[f] - room[f])
        chunk = text[begin[:, None] + np.arange(w + 1)[None, :]].astype(np.int64)
        return chunk[:, :-1].copy(), chunk[:, 1:].copy(), np.full(n, w, dtype=np.int64)
