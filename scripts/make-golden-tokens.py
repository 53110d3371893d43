#!/usr/bin/env python3
"""Writes golden tokenizations for the tokenizer tests from llama.cpp's
llama-tokenize (an implementation independent of headroom's):

  tests/data/tokenizer/<name>.golden   one line per corpus string and mode

for every string of tests/data/tokenizer/corpus.txt, in two modes: add_special
and parse_special both on ("11") and both off ("00"). Each line holds

  <corpus index> TAB <mode> TAB <ids, space-separated> TAB <pieces>

where <pieces> is the concatenation of llama.cpp's piece of every token
(common_token_to_piece with special tokens rendered), escaped as in the
corpus, or "=" when it equals the input.

The tokenizers are the model and vocabulary files in the model cache
($HEADROOM_MODELS_DIR, see scripts/fetch-model.sh and
scripts/fetch-reference-data.sh) plus two made here: the gpt-2 vocabulary
relabelled with tokenizer.ggml.pre = "default", and `headroom synth tiny`.

  scripts/make-golden-tokens.py --llama-tokenize PATH --headroom BUILD/headroom [NAME...]

Run with a Python that has gguf==0.19.0 (tools/ref-env.sh makes one).
"""
import argparse
import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "tokenizer"
MODES = [(True, True), (False, False)]

# name -> file in the model cache, or a recipe handled by make_file().
TOKENIZERS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
    "llama-bpe": "llama.cpp/vocab/ggml-vocab-llama-bpe.gguf",
    "qwen2": "llama.cpp/vocab/ggml-vocab-qwen2.gguf",
    "gpt-2": "llama.cpp/vocab/ggml-vocab-gpt-2.gguf",
    "gpt-2-default": "recipe:gpt-2 vocabulary with tokenizer.ggml.pre = default",
    "starcoder": "llama.cpp/vocab/ggml-vocab-starcoder.gguf",
    "llama-spm": "llama.cpp/vocab/ggml-vocab-llama-spm.gguf",
    "phi-3": "llama.cpp/vocab/ggml-vocab-phi-3.gguf",
    "synth-tiny": "recipe:headroom synth tiny",
}


def unescape(line: str) -> bytes:
    out = bytearray()
    i = 0
    simple = {"\\": b"\\", "n": b"\n", "t": b"\t", "r": b"\r"}
    while i < len(line):
        c = line[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        nxt = line[i + 1]
        if nxt in simple:
            out += simple[nxt]
            i += 2
        elif nxt == "x":
            out.append(int(line[i + 2:i + 4], 16))
            i += 4
        elif nxt == "u":
            end = line.index("}", i)
            out += chr(int(line[i + 3:end], 16)).encode("utf-8")
            i = end + 1
        else:
            raise ValueError(f"bad escape in corpus line: {line!r}")
    return bytes(out)


def escape(b: bytes) -> str:
    out = []
    for ch in b.decode("utf-8", errors="surrogateescape"):
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch])
        elif 0xDC80 <= o <= 0xDCFF:  # an undecodable byte
            out.append(f"\\x{o - 0xDC00:02x}")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        else:
            out.append(ch)
    s = "".join(out)
    return s[:-1] + "\\x20" if s.endswith(" ") else s


def read_corpus():
    lines = (DATA / "corpus.txt").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "", "corpus.txt must end with a newline"
    return [unescape(l) for l in lines[:-1] if not l.startswith("#")]


def make_file(name, models, headroom, tmp):
    spec = TOKENIZERS[name]
    if not spec.startswith("recipe:"):
        path = pathlib.Path(models) / spec
        if not path.exists():
            sys.exit(f"{name}: {path} is missing (scripts/fetch-model.sh, scripts/fetch-reference-data.sh)")
        return str(path)
    out = os.path.join(tmp, f"{name}.gguf")
    if name == "synth-tiny":
        subprocess.run([headroom, "synth", "tiny", out], check=True, capture_output=True)
    elif name == "gpt-2-default":
        import gguf
        reader = gguf.GGUFReader(pathlib.Path(models) / TOKENIZERS["gpt-2"])
        writer = gguf.GGUFWriter(out, "gpt2")
        for field in reader.fields.values():
            if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
                continue
            if field.name == "tokenizer.ggml.pre":
                continue
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
        writer.add_string("tokenizer.ggml.pre", "default")
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        writer.close()
    return out


LINE_START = re.compile(rb" *(-?\d+) -> '")


def parse_pieces(out: bytes):
    """Splits llama-tokenize's `%6d -> '%s'` lines into (ids, pieces)."""
    ids, pieces = [], []
    pos = 0
    while pos < len(out):
        m = LINE_START.match(out, pos)
        if not m:
            raise ValueError(f"unexpected llama-tokenize output at byte {pos}: {out[pos:pos + 40]!r}")
        start = m.end()
        end = start
        while True:
            end = out.find(b"'\n", end)
            if end < 0:
                raise ValueError("unterminated piece in llama-tokenize output")
            if end + 2 == len(out) or LINE_START.match(out, end + 2):
                break
            end += 1
        ids.append(int(m.group(1)))
        pieces.append(out[start:end])
        pos = end + 2
    return ids, b"".join(pieces)


def tokenize(llama_tokenize, model, text, add_special, parse_special, tmp):
    fd, path = tempfile.mkstemp(dir=tmp)
    with os.fdopen(fd, "wb") as f:
        f.write(text)
    args = [llama_tokenize, "-m", model, "-f", path, "--no-escape", "--log-disable"]
    if not add_special:
        args.append("--no-bos")
    if not parse_special:
        args.append("--no-parse-special")
    r = subprocess.run(args, capture_output=True)
    os.unlink(path)
    if r.returncode != 0:
        raise RuntimeError(f"llama-tokenize failed on {text!r}: {r.stderr.decode(errors='replace')}")
    return parse_pieces(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-tokenize", required=True)
    ap.add_argument("--headroom", help="headroom binary (for synth-tiny)")
    ap.add_argument("--models", default=os.environ.get("HEADROOM_MODELS_DIR", str(ROOT / "models")))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("names", nargs="*", default=list(TOKENIZERS))
    args = ap.parse_args()
    corpus = read_corpus()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.names:
            model = make_file(name, args.models, args.headroom, tmp)
            jobs = [(i, a, p) for i, _ in enumerate(corpus) for a, p in MODES]
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                results = list(pool.map(
                    lambda j: tokenize(args.llama_tokenize, model, corpus[j[0]], j[1], j[2], tmp), jobs))
            spec = TOKENIZERS[name]
            lines = [
                f"# {name}: llama.cpp's llama-tokenize on tests/data/tokenizer/corpus.txt",
                f"# file: {spec.removeprefix('recipe:')}",
                "# index, mode (add_special parse_special), ids, concatenated pieces ('=': the input)",
            ]
            for (i, a, p), (ids, pieces) in zip(jobs, results):
                shown = "=" if pieces == corpus[i] else escape(pieces)
                lines.append(f"{i}\t{int(a)}{int(p)}\t{' '.join(map(str, ids))}\t{shown}")
            (DATA / f"{name}.golden").write_text("\n".join(lines) + "\n", encoding="utf-8")
            print(f"{name}: {len(corpus)} strings, {len(jobs)} tokenizations", file=sys.stderr)


if __name__ == "__main__":
    main()
