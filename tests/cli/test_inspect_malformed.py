#!/usr/bin/env python3
"""Malformed files given to `headroom inspect`: each must exit with status 1
and exactly one line on stderr naming the problem, never a signal. The files
are cut and corrupted versions of a small valid model made by `headroom synth`."""
import os
import random
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, fail_if, scratch_dir  # noqa: E402

tmp = scratch_dir("headroom-malformed-")
valid = os.path.join(tmp, "tiny.gguf")
subprocess.run([headroom_bin(), "synth", "tiny", valid, "--type", "q8_0", "-q"], check=True)
data = open(valid, "rb").read()


def check(name, blob, expect=None):
    path = os.path.join(tmp, name + ".gguf")
    with open(path, "wb") as f:
        f.write(blob)
    p = subprocess.run([headroom_bin(), "inspect", path, "--json"], capture_output=True, text=True,
                       errors="replace", timeout=60)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    fail_if(p.returncode < 0, f"{name}: killed by signal {-p.returncode}")
    fail_if(p.returncode != 1, f"{name}: exit {p.returncode}, expected 1")
    fail_if(len(lines) != 1, f"{name}: {len(lines)} stderr lines: {p.stderr[:500]}")
    fail_if(not lines[0].startswith("error: "), f"{name}: {lines[0]}")
    fail_if(path not in lines[0], f"{name}: message does not name the file: {lines[0]}")
    if expect:
        fail_if(expect not in lines[0], f"{name}: expected '{expect}' in: {lines[0]}")


cases = 0
check("empty", b"", "magic")
check("magic", b"GGML" + data[4:], "not a GGUF file")
check("version", data[:4] + struct.pack("<I", 7) + data[8:], "version")
check("tensor-count", data[:8] + struct.pack("<Q", 1 << 62) + data[16:], "tensor_count")
check("kv-count", data[:16] + struct.pack("<Q", 1 << 62) + data[24:], "metadata_kv_count")
cases += 5
rng = random.Random(1)
for n in sorted(rng.sample(range(1, len(data)), 40)):
    check(f"cut-{n}", data[:n])
    cases += 1
# Corrupt single 8-byte words in the header region with huge values.
header_end = 4096
for i in range(60):
    at = rng.randrange(8, header_end - 8)
    blob = bytearray(data)
    blob[at:at + 8] = struct.pack("<Q", rng.choice([0, 1 << 63, (1 << 64) - 1, 1 << 40]))
    path = os.path.join(tmp, "word.gguf")
    open(path, "wb").write(blob)
    p = subprocess.run([headroom_bin(), "inspect", path, "--json"], capture_output=True,
                       timeout=60)
    fail_if(p.returncode < 0, f"corrupt word at {at}: killed by signal {-p.returncode}")
    fail_if(p.returncode not in (0, 1), f"corrupt word at {at}: exit {p.returncode}")
    cases += 1
print(f"ok: {cases} malformed files, each one clear error or a clean parse, no crash")
