"""The framework-free modules import no deep-learning framework, nor an optional package.

One subprocess (the test process itself has imported frameworks) imports the package, asks the
hardware questions every notebook asks, times a function and reads a measurement record, then
lists what got imported.
"""

import json
import os
import subprocess
import sys

FRAMEWORKS = {"torch", "tensorflow", "keras", "mxnet", "jax"}
# Imported only when a figure is drawn, a dataset built or a notebook run.
OPTIONAL = {"matplotlib", "pooch", "PIL", "sklearn", "requests", "tqdm", "nbformat", "nbclient"}

PROBE = """
import json, sys, tempfile
import mptutor
import mptutor.data, mptutor.notebooks
from mptutor import bench

answers = [mptutor.hardware.pick(cpu=1, gpu=2), mptutor.hardware.report().summary()]
timing = bench.time_fn(lambda: None, repeats=3, warmup=1)
folder = tempfile.mkdtemp()
record = {"name": "probe", "date": "", "command": "", "hardware": {}, "data": timing.as_dict()}
open(folder + "/probe.json", "w").write(json.dumps(record))
assert bench.find_records(results_dir=folder)[0][1]["data"]["median_s"] == timing.median
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_framework_free_modules_import_no_framework():
    env = {k: v for k, v in os.environ.items() if k != "MPTUTOR_DEVICE"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True
    ).stdout
    loaded = set(json.loads(out.strip().splitlines()[-1]))
    assert "mptutor" in loaded and "numpy" in loaded
    assert not loaded & FRAMEWORKS
    assert not loaded & OPTIONAL
