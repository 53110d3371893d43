#!/usr/bin/env python3
"""`headroom plan --svg FILE`: the picture carries the plan's numbers.

For the default model on the CPU, and for Qwen2.5-14B on a 12 GB card with
--fit and --compare-quant, the SVG (parsed as XML) must show each term's
size as text, formatted here from plan --json's bytes by this test's own
formatter, and carry each bar's exact bytes in its tooltip; with --fit one
bar per configuration --json lists, with --compare-quant one per weight
type. Each file then renders in a headless Chromium (a root <svg> with a
size, no parse error); screenshots go to build/test-artifacts/plan-svg.
"""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import fail_if, headroom_bin, scratch_dir  # noqa: E402
from browserlib import artifacts_dir, browser  # noqa: E402

NS = "{http://www.w3.org/2000/svg}"
TERMS = [("weights", "weights"), ("kv_cache", "KV cache"), ("activations", "activations"),
         ("runtime", "runtime")]


def fmt_bytes(n):
    """Binary units with three significant digits (as `plan` prints them)."""
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    v, u = float(n), 0
    while v >= 1024 and u < 5:
        v /= 1024
        u += 1
    if u == 0:
        return f"{v:.0f} B"
    return f"{v:.0f} {units[u]}" if v >= 100 else f"{v:.1f} {units[u]}" if v >= 10 else \
        f"{v:.2f} {units[u]}"


def plan(args, svg_path):
    out = subprocess.run([headroom_bin(), "plan", *args, "--json"], capture_output=True, text=True)
    fail_if(out.returncode != 0, f"plan --json {args}: {out.stderr}")
    j = json.loads(out.stdout)
    out = subprocess.run([headroom_bin(), "plan", *args, "--svg", svg_path], capture_output=True,
                         text=True)
    fail_if(out.returncode != 0, f"plan --svg {args}: {out.stderr}")
    fail_if(f"wrote {svg_path}" not in out.stderr, f"plan --svg says nothing: {out.stderr!r}")
    root = ET.parse(svg_path).getroot()
    fail_if(root.tag != NS + "svg", f"root element {root.tag}")
    texts = [t.text or "" for t in root.iter(NS + "text")]
    titles = [t.text or "" for t in root.iter(NS + "title")]
    return j, texts, titles


def check_device_bar(j, texts, titles, label):
    dev = j["devices"][0]
    for key, name in TERMS:
        n = dev[f"{key}_bytes"]
        fail_if(f"{name} {fmt_bytes(n)}" not in texts,
                f"the SVG does not show '{name} {fmt_bytes(n)}': {texts}")
        if n:
            want = f"{name} on {label}: {n:,} bytes ({fmt_bytes(n)})"
            fail_if(want not in titles, f"no tooltip '{want}' among {titles[:8]}")
    fail_if(not any(t.startswith(j["verdict"].split(":")[0]) for t in texts),
            f"no verdict ({j['verdict'][:40]}) among the texts")


work = scratch_dir("plan-svg-")
out_dir = artifacts_dir("plan-svg")
files = []

# The default model on this machine's CPU.
p = os.path.join(work, "smollm2.svg")
j, texts, titles = plan(["-m", "smollm2-135m", "--max-model-len", "2048"], p)
check_device_bar(j, texts, titles, j["device"]["name"])
files.append(p)

# A model that does not fit a 12 GB card: its bar, the configurations that fit, every type.
p = os.path.join(work, "qwen-14b-rtx3060.svg")
args = ["-m", "qwen2.5-14b", "--device", "rtx3060", "--fit", "--compare-quant"]
j, texts, titles = plan(args, p)
check_device_bar(j, texts, titles, j["device"]["name"])
fail_if(j["fits"], "Qwen2.5-14B in BF16 should not fit 12 GB")
sugg, quant = j["suggestions"], j["compare_quant"]
fail_if(not sugg or not quant, "plan --json lists no suggestions or no weight types")
for i, s in enumerate(sugg):
    label = f"{i + 1}. " + "; ".join(s["changes"])
    fail_if(label not in texts, f"suggestion {label!r} not shown")
    want = f"weights on {label}: {s['weights_bytes']:,} bytes"
    fail_if(not any(t.startswith(want) for t in titles), f"no tooltip {want!r}")
    fail_if(not any(t.startswith(f"weights {fmt_bytes(s['weights_bytes'])} + KV "
                                 f"{fmt_bytes(s['kv_cache_bytes'])}") for t in texts),
            f"suggestion {i + 1}: its weights and KV not written")
for q in quant:
    label = f"{q['label']} ({q['bits']})"
    fail_if(label not in texts, f"weight type {label!r} not shown")
    want = f"weights on {label}: {q['weights_bytes']:,} bytes"
    fail_if(not any(t.startswith(want) for t in titles), f"no tooltip {want!r}")
    want = f"KV cache on {label}: {q['kv_needed_bytes']:,} bytes"
    fail_if(not any(t.startswith(want) for t in titles), f"no tooltip {want!r}")
files.append(p)
print(f"plan --svg: {len(sugg)} configurations and {len(quant)} weight types drawn")

# Each renders in a real browser.
d = browser(920, 1200)
try:
    for p in files:
        d.get("file://" + p)
        size = d.execute_script(
            "const s = document.documentElement;"
            "if (s.tagName !== 'svg') return null;"
            "const r = s.getBoundingClientRect(); return [r.width, r.height]")
        fail_if(not size or size[0] < 800 or size[1] < 100, f"{p} did not render: {size}")
        d.save_screenshot(os.path.join(out_dir, os.path.basename(p) + ".png"))
finally:
    d.quit()
print("plan --svg: ok")
