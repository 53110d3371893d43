#!/usr/bin/env python3
"""POST /v1/embeddings on SmolLM2 (its GGUF has no pooling_type: mean pooling).

For the prompts of tests/data/logits/smollm2-135m.json (token ids from
transformers' tokenizer):
  - the hidden states `headroom eval --hidden-out` writes are checked against
    an independent source: projected with numpy onto the vocabulary (the
    dequantized tied embedding, read with the gguf package) they give
    transformers' logits (the goldens' top 5 at every position, to 0.02);
  - /v1/embeddings with "normalize": false equals the numpy mean of those
    hidden states, and by default their mean divided by its L2 norm;
  - base64 decodes to the same floats, several inputs come back in order,
    text and its token ids embed alike, "dimensions" truncates and
    renormalizes.
"""
import base64
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "server"))
from serverlib import Server  # noqa: E402
from testlib import headroom_bin, model_path, fail_if, scratch_dir  # noqa: E402

import gguf  # noqa: E402

path = model_path("smollm2-135m")
data = json.load(open(os.path.join(os.environ.get("HEADROOM_TEST_DATA", "tests/data"), "logits",
                                   "smollm2-135m.json")))
tmp = scratch_dir("headroom-embed-")

reader = gguf.GGUFReader(path)
emb = next(t for t in reader.tensors if t.name == "token_embd.weight")
W = gguf.quants.dequantize(emb.data, emb.tensor_type).reshape(-1, int(emb.shape[0]))


def hidden_states(tokens):
    out = os.path.join(tmp, "hidden.f32")
    subprocess.run([headroom_bin(), "eval", "-m", path, "--tokens", ",".join(map(str, tokens)),
                    "--hidden-out", out, "--kv-dtype", "f32"], check=True, capture_output=True)
    return np.fromfile(out, dtype=np.float32).reshape(len(tokens), -1)


cases = data["cases"][:4]
worst_logit = 0.0
means = []
for case in cases:
    h = hidden_states(case["tokens"])
    logits = h.astype(np.float64) @ W.T.astype(np.float64)
    got = np.take_along_axis(logits, np.array(case["top_ids"]), axis=1)
    worst_logit = max(worst_logit, float(np.abs(got - np.array(case["top_logits"])).max()))
    means.append(h.astype(np.float64).mean(axis=0))
print(f"hidden states projected by numpy vs transformers' logits: max |diff| {worst_logit:.3e}")
fail_if(worst_logit > 0.02, f"hidden states disagree with transformers: {worst_logit:.3g}")

with Server(["-m", path, "--max-model-len", "1024", "--kv-cache-memory", "64MiB",
             "--kv-dtype", "f32", "--act-precision", "f32", "-q"]) as server:
    def embed(**body):
        status, reply = server.request("POST", "/v1/embeddings", body)
        fail_if(status != 200, f"/v1/embeddings {body}: {status} {reply}")
        return reply

    reply = embed(input=[c["tokens"] for c in cases], normalize=False)
    fail_if([d["index"] for d in reply["data"]] != list(range(len(cases))), f"order: {reply}")
    fail_if(reply["usage"]["prompt_tokens"] != sum(len(c["tokens"]) for c in cases),
            f"usage: {reply['usage']}")
    worst = 0.0
    for d, mean in zip(reply["data"], means):
        got = np.array(d["embedding"], dtype=np.float64)
        worst = max(worst, float(np.abs(got - mean).max() / np.abs(mean).max()))
    print(f"pooled vs numpy mean of the hidden states: max relative diff {worst:.2e}")
    fail_if(worst > 1e-4, f"pooled embedding differs from the mean: {worst:.3g}")

    unit = embed(input=cases[0]["tokens"])["data"][0]["embedding"]
    want = means[0] / np.linalg.norm(means[0])
    fail_if(np.abs(np.array(unit) - want).max() > 1e-4, "normalized embedding")
    b64 = embed(input=cases[0]["tokens"], encoding_format="base64")["data"][0]["embedding"]
    fail_if(not np.array_equal(np.frombuffer(base64.b64decode(b64), dtype="<f4"),
                               np.array(unit, dtype=np.float32)), "base64 differs from float")
    text = embed(input=cases[0]["prompt"])["data"][0]["embedding"]
    fail_if(np.abs(np.array(text) - np.array(unit)).max() > 1e-6, "text and its ids differ")
    short = np.array(embed(input=cases[0]["tokens"], dimensions=64)["data"][0]["embedding"])
    fail_if(len(short) != 64 or abs(np.linalg.norm(short) - 1) > 1e-5 or
            np.abs(short - want[:64] / np.linalg.norm(want[:64])).max() > 1e-4, "dimensions")
    status, reply = server.request("POST", "/v1/embeddings", {"input": []})
    fail_if(status != 400 or reply["error"]["param"] != "input", f"empty input: {reply}")
    status, reply = server.request("POST", "/v1/embeddings", {"input": [[1, 2], [999999]]})
    fail_if(status != 400 or reply["error"]["param"] != "input[1]", f"bad token: {reply}")
print("embeddings: ok")
