"""Shared helpers for the Python test scripts (run by ctest)."""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile


def headroom_bin():
    return os.environ.get("HEADROOM_BIN", "build/release/headroom")


def source_dir():
    return os.environ.get("HEADROOM_SOURCE_DIR", os.getcwd())


def scratch_dir(prefix):
    """A fresh temporary directory, removed when the script exits (passing or
    failing): logits dumps run to a gigabyte."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def model_path(name):
    files = {"smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf",
             "gemma3-270m": "gemma-3-270m-q4_k_m.gguf"}
    models = os.environ.get("HEADROOM_MODELS_DIR", os.path.join(source_dir(), "models"))
    path = os.path.join(models, files[name])
    if not os.path.exists(path):
        print(f"model {name} not fetched: run scripts/fetch-model.sh {name}", file=sys.stderr)
        sys.exit(1)
    return path


def fail_if(cond, message):
    if cond:
        print(f"FAIL: {message}", file=sys.stderr)
        sys.exit(1)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, **kw)
