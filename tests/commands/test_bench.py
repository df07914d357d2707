"""The benchmark runs end to end in its --quick form and writes its JSON and table (no timing assertions)."""

import json
import subprocess
import sys

from conftest import HANG_GUARD_S, ROOT


def test_quick_bench_writes_json_and_table(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, "-m", "ropelab", "bench", "--quick", "--silent", "--schemes", "rope",
                             "spectral", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(out.read_text())
    assert {"rope", "spectral"} <= set(data["steps"])
    assert "hf" in data["steps"] or "hf" in data["skipped"]
    for row in data["steps"].values():
        assert row["tokens_per_s"] > 0 and row["gflop_per_step"] > 0
    assert data["matmul"]["fp32"]["peak_gflops"] > 0
    assert all("samples_per_s" in g or "error" in g for g in data["generators"].values())
    assert len(data["load_avg_start"]) == 3 and data["cpu"]["cores"] >= 1
    assert (tmp_path / "bench.md").read_text().startswith("Bench ") and "| rope |" in result.stdout
