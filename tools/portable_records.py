"""Rewrite the absolute machine paths in committed files under results/ as paths relative to the checkout.

    python tools/portable_records.py [results] [--check]

Records made before runs wrote portable paths name the checkout or worktree that made them (``record:
/work/main/results/bifocal_table1`` in config.yaml, ``"run_dir": "/work/wt4/runs/…"`` in summary.json, a report's
source folder): every absolute path is cut to what follows its checkout, from its ``results/`` or ``runs/``
folder on (``runs/bifocal_table1/pos=rope,seed=0,task=mod_arith``); a path under neither (a scratch folder outside
any checkout) keeps its last component. Only those strings change, so a report regenerated from the rewritten
records is byte for byte what it was apart from them. Idempotent: a second pass changes nothing (run it again
after merging records made elsewhere). ``--check`` changes nothing and exits 1 if a file would change.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# an absolute path: a slash at the start of a value (after a space, quote, backtick, bracket or line start) and a
# name after it; it runs to the next space, quote, backtick or table bar (job folder names hold = and ,)
ABSOLUTE = re.compile(r"(?<![\w./:~\-=])/[A-Za-z0-9_.+\-][^\s\"'`|]*")
CHECKOUT_FOLDERS = ("results", "runs")


def portable(path: str) -> str:
    """An absolute path as its checkout-relative part (from results/ or runs/ on), else its last component."""
    parts = path.rstrip("/").split("/")
    for i, part in enumerate(parts):
        if part in CHECKOUT_FOLDERS and i + 1 < len(parts):
            return "/".join(parts[i:])
    return parts[-1]


def rewrite(text: str) -> str:
    return ABSOLUTE.sub(lambda m: portable(m.group(0)), text)


def text_files(root: Path):
    """The committed text files under ``root`` (links aside: their targets are rewritten where they lie)."""
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file() or any(p.is_symlink() for p in path.parents):
            continue
        try:
            with open(path, encoding="utf-8", newline="") as f:  # line endings as they are: only paths change
                yield path, f.read()
        except UnicodeDecodeError:  # figures, traces (.npz): no text to rewrite
            continue


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="results", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file holds an absolute path")
    args = parser.parse_args(argv)
    changed = 0
    for path, text in text_files(args.root):
        new = rewrite(text)
        if new != text:
            changed += 1
            if args.check:
                print(f"{path}: {ABSOLUTE.search(text).group(0)}")
            else:
                with open(path, "w", encoding="utf-8", newline="") as f:
                    f.write(new)
    verb = "hold" if args.check else "rewritten:"
    print(f"{changed} file{'s' if changed != 1 else ''} under {args.root} {verb} absolute paths" if args.check else
          f"{changed} file{'s' if changed != 1 else ''} under {args.root} {verb} absolute paths made checkout-relative")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
