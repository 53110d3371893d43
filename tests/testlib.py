"""Shared helpers for the Python test scripts (run by ctest)."""
import atexit
import json
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


def skip_without_vulkan():
    """Exits with 77 (ctest: skipped), saying so, where `headroom devices`
    lists no usable Vulkan device."""
    out = subprocess.run([headroom_bin(), "devices", "--json"], capture_output=True, text=True)
    if out.returncode != 0 or not any(d["usable"] for d in json.loads(out.stdout)["devices"]):
        print("SKIPPED: no usable Vulkan device on this machine (headroom devices)")
        sys.exit(77)


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


PLAN_TERMS = ("weights", "kv_cache", "activations", "runtime")


def plan_and_ledger(model, flags, tmp):
    """`plan --json` of the model on the CPU with these engine flags, and the
    memory report of a short `run` with the same flags."""
    plan = json.loads(subprocess.run(
        [headroom_bin(), "plan", model, "--device", "cpu", "--json"] + flags,
        check=True, capture_output=True, text=True).stdout)
    report_path = os.path.join(tmp, "report.json")
    subprocess.run([headroom_bin(), "run", "-m", model, "-p", "hi", "-n", "2", "--temp", "0",
                    "-q", "--memory-report-json", report_path] + flags,
                   check=True, capture_output=True)
    with open(report_path) as f:
        return plan, json.load(f)


def term_mismatches(label, plan, report):
    """Terms the plan did not predict to the byte of what the engine
    reserved, each said on stderr; their number."""
    n = 0
    for term in PLAN_TERMS:
        predicted = plan["terms"][term]["bytes"]
        reserved = report["terms"][term]["reserved_bytes"]
        if predicted != reserved:
            print(f"FAIL {label}: {term} planned {predicted}, the engine reserved {reserved}",
                  file=sys.stderr)
            n += 1
    return n


def device_term_mismatches(label, plan, report):
    """Like term_mismatches, device by device: each device's terms in `plan --json`'s
    "devices" against what that device's ledger reserved in the memory report."""
    n = 0
    for d in plan["devices"]:
        ledger = report["devices"][d["device"]]["terms"]
        for term in PLAN_TERMS:
            if d[f"{term}_bytes"] != ledger[term]["reserved_bytes"]:
                print(f"FAIL {label}: {d['device']} {term} planned {d[term + '_bytes']}, the "
                      f"ledger reserved {ledger[term]['reserved_bytes']}", file=sys.stderr)
                n += 1
    return n


def rewrite_gguf(reader, dst, changes):
    """Copies the GGUF file `reader` (a gguf.GGUFReader) to dst with the
    metadata in `changes` ({key: (value, type[, element type])}) set or
    replaced."""
    import numpy as np
    from gguf import GGUFValueType, GGUFWriter
    w = GGUFWriter(dst, reader.fields["general.architecture"].contents(), use_temp_file=False)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in changes:
            continue
        sub = field.types[1] if field.types[0] == GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), field.types[0], sub_type=sub)
    for key, v in changes.items():
        w.add_key_value(key, v[0], v[1], sub_type=v[2] if len(v) > 2 else None)
    for t in reader.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
