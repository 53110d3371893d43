#!/usr/bin/env python3
"""`headroom run` on a tiny random model: stdout carries only the generated
text (timings and the memory line go to stderr), greedy and seeded sampling
repeat exactly, -f reads the prompt from a file, --chat answers on stdin, and
a configuration that cannot fit is refused with the numbers."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import headroom_bin, fail_if, scratch_dir  # noqa: E402

tmp = scratch_dir("headroom-run-")
model = os.path.join(tmp, "tiny.gguf")
subprocess.run([headroom_bin(), "synth", "tiny", model, "-q"], check=True)


def run(*args, stdin=None):
    return subprocess.run([headroom_bin(), "run", "-m", model, *args], capture_output=True, text=True,
                          input=stdin, timeout=120)


greedy = run("-p", "the cat", "-n", "12", "--temp", "0", "--ignore-eos")
fail_if(greedy.returncode != 0, greedy.stderr)
fail_if(not greedy.stdout, "no text on stdout")
fail_if("tokens/s" in greedy.stdout or "memory:" in greedy.stdout, "timings leaked into stdout")
fail_if("prompt:" not in greedy.stderr or "memory: weights" not in greedy.stderr, greedy.stderr)
fail_if(run("-p", "the cat", "-n", "12", "--temp", "0", "--ignore-eos").stdout != greedy.stdout, "greedy differs")

seeded = [run("-p", "the cat", "-n", "12", "--temp", "1", "--seed", str(s), "--ignore-eos").stdout for s in (7, 7, 8)]
fail_if(seeded[0] != seeded[1], "same seed, different text")
fail_if(seeded[0] == seeded[2], "different seeds gave the same 12 random tokens")

prompt_file = os.path.join(tmp, "prompt.txt")
open(prompt_file, "w").write("the cat")
from_file = run("-f", prompt_file, "-n", "12", "--temp", "0", "--ignore-eos")
fail_if(from_file.stdout != greedy.stdout, "-f and -p differ")

quiet = run("-p", "the cat", "-n", "3", "--temp", "0", "-q")
fail_if(quiet.stderr.strip(), f"-q still wrote: {quiet.stderr}")

chat = run("--chat", "-n", "6", "--temp", "0", stdin="hello\nand again\n\n")
fail_if(chat.returncode != 0, chat.stderr)
fail_if(chat.stdout.count("\n") < 2, f"expected two replies: {chat.stdout!r}")

refused = run("-p", "x", "--max-model-len", "100000", "--kv-cache-memory", "1MiB")
lines = [l for l in refused.stderr.splitlines() if l.strip()]
fail_if(refused.returncode != 1 or len(lines) != 1, refused.stderr)
fail_if("KV for 100000 tokens needs" not in lines[0] or "--max-model-len" not in lines[0], lines[0])

missing = run()
fail_if(missing.returncode != 1 or "-p TEXT" not in missing.stderr, missing.stderr)

# A usage error (a flag out of its range, an unknown flag) exits 2 and names the flag.
for args, flag in ((("-p", "x", "--mem-fraction", "2"), "--mem-fraction"),
                   (("-p", "x", "--no-such-flag"), "--no-such-flag")):
    usage = run(*args)
    fail_if(usage.returncode != 2 or flag not in usage.stderr, f"{args}: {usage.returncode} {usage.stderr}")

# More threads than this process may run on: cut to the CPUs it has, with a
# warning on stderr; the text, greedy, is the same as with the default threads.
cpus = len(os.sched_getaffinity(0))
many = run("-p", "the cat", "-n", "12", "--temp", "0", "--ignore-eos", "--threads", str(cpus + 500))
fail_if(many.returncode != 0, many.stderr)
fail_if(f"is more than the {cpus} CPUs" not in many.stderr, many.stderr)
fail_if(many.stdout != greedy.stdout, f"{many.stdout!r} != {greedy.stdout!r}")
# Text that cannot be written (a full disk) is an error, not a silent exit 0.
with open("/dev/full", "w") as full:
    lost = subprocess.run([headroom_bin(), "run", "-m", model, "-p", "the cat", "-n", "4"],
                          stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
fail_if(lost.returncode != 1 or "error: writing to stdout" not in lost.stderr, lost.stderr)

negative = run("-p", "x", "--threads", "-3")
fail_if(negative.returncode != 1 or "--threads -3" not in negative.stderr, negative.stderr)
print("ok")
