"""pipetune's child processes never import the caller's script (issue 42, item 8).

A script without an ``if __name__ == "__main__":`` guard that tunes on a GPU starts the
GPU worker, the compile processes and the cost model's seed process. Started with
multiprocessing's spawn method, each of them ran the script again as ``__mp_main__`` and
printed spawn's ``RuntimeError``. Here the script starts them as ``pipetune.tune`` does
on a GPU (the real worker entry, which fails to open a GPU on this machine and says so)
and its body must run once, with no RuntimeError.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
with open(sys.argv[1], "a") as mark:
    mark.write("ran\\n")

from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from service.runs.seeds import SeedProcess
from workers import Job, LocalGpuPool, ParallelCompiler

spec = parse_spec("gemm", {"m": 256, "n": 256, "k": 256, "dtype": "float16"})
pool = LocalGpuPool(["0"], compiler=ParallelCompiler(cache_dir=sys.argv[2], max_workers=2),
                    startup_timeout_s=60)
pool.warm()
seeds = SeedProcess(spec, get_device("sim:h200"), structures=1, raster_structures=0, pool=4,
                    fixed={"tile_m": 128, "tile_n": 128, "tile_k": 64, "stages_ab": 2})
while (found := seeds.poll()) is None:
    pass
[result] = pool.measure([Job({"op": "gemm", "params": spec.params()}, baseline="cublas")])
pool.close()
print("seeds", len(found))
print("worker", result.status.value, result.error)
"""


def test_a_script_without_a_main_guard_runs_once(tmp_path: Path) -> None:
    script, mark = tmp_path / "tune_me.py", tmp_path / "ran.txt"
    script.write_text(SCRIPT)
    try:
        done = subprocess.run([sys.executable, str(script), str(mark), str(tmp_path / "cubin")],
                              capture_output=True, text=True, cwd=tmp_path, timeout=120)
    except subprocess.TimeoutExpired as exc:  # children starting the script over and over
        runs = mark.read_text().count("ran")
        raise AssertionError(f"the script hung; its body ran {runs} times") from exc
    assert done.returncode == 0, done.stderr
    assert mark.read_text() == "ran\n", done.stderr  # the body ran in this process only
    assert "RuntimeError" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "seeds 1" in done.stdout
    # The real worker started and failed where this machine has no GPU, not in bootstrap.
    worker = next(line for line in done.stdout.splitlines() if line.startswith("worker"))
    assert "worker did not start" in worker and "exit code 1" not in worker, worker
