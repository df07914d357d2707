"""``python -m ropelab.depth_manifold``: the command's entry point; the code is ``ropelab.analysis.depth_manifold``."""

from ropelab.analysis.depth_manifold import main

if __name__ == "__main__":
    raise SystemExit(main())
