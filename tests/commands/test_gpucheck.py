"""`make gpu-check` with the accelerator forced to the CPU, tiny settings: the path a first GPU run takes (tests
marked gpu, one run per scheme, the bench, several jobs at once through hydra/launcher=gpu_shared and packed) runs
here end to end and writes its JSON and table. The bench step is skipped: `bench --quick` runs in
tests/commands/test_bench.py and again inside the tests step (test_gpu's test_the_bench_runs_on_the_device). No timing
assertions."""

import json
import subprocess
import sys

from conftest import HANG_GUARD_S, ROOT
from ropelab.core import positional


def test_gpu_check_forced_to_the_cpu_runs_every_step(tmp_path):
    out = tmp_path / "gpu.json"
    result = subprocess.run([sys.executable, "-m", "ropelab", "gpucheck", "--accelerator", "cpu", "--tiny",
                             "--concurrency", "2", "--skip", "bench", "--out", str(out),
                             "--runs-dir", str(tmp_path / "runs")],
                            cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    data = json.loads(out.read_text())
    assert data["ok"] and data["device"] == "cpu" and data["tiny"]
    steps = data["steps"]
    assert steps["tests"]["ok"] and "passed" in steps["tests"]["summary"]
    runs = steps["runs"]["runs"]
    assert set(runs) == set(positional.names())
    assert all(r["status"] == "completed" and r["accelerator"] == "cpu" for r in runs.values())
    assert "bench" not in steps
    shared, packed = steps["throughput"]["rows"]
    assert shared["launcher"] == "gpu_shared" and shared["n_jobs"] == 2 and shared["completed"] == shared["jobs"] == 2
    assert packed["launcher"] == "packed" and packed["n_jobs"] == 2 and packed["completed"] == packed["jobs"] == 2
    table = out.with_suffix(".md").read_text()
    assert table.startswith("# gpu-check") and "all steps passed" in table
