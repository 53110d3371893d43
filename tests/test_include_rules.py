#!/usr/bin/env python3
"""The include rules of docs/DESIGN.md ("Include rules") hold in src/:

- each folder includes only the folders its row of the first table names;
- outside kernels/, a backend's own headers (kernels/<backend>/...) are
  included only by the files the second table names, and the top level of
  kernels/ (the device seam) includes no backend;
- the folders' includes form no loop.

The tables are read from the document, so the rules a newcomer reads are
the rules this checks. It first checks that the reader of the tables and
the includes is not blind: a tree with a forbidden include and a loop
planted in it must fail."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import fail_if, source_dir  # noqa: E402

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_rules(design_text):
    section = design_text.split("### Include rules", 1)
    fail_if(len(section) != 2, "docs/DESIGN.md has no 'Include rules' section")
    folders, files = {}, {}
    table = None
    for line in section[1].splitlines():
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|"):
            table = None
            continue
        if cells[0] in ("folder", "file"):
            table = cells[0]
            continue
        if set(cells[0]) <= set("-: "):
            continue
        allowed = {c.strip() for c in cells[1].split(",") if c.strip()}
        if table == "folder":
            folders[cells[0]] = allowed
        elif table == "file":
            files[cells[0]] = allowed
    fail_if(len(folders) < 10, f"read {len(folders)} folder rows from docs/DESIGN.md")
    return folders, files


def includes(src):
    """(file relative to the repository, folder, included path) for every
    quoted include of src/."""
    out = []
    for root, _, names in os.walk(src):
        for name in names:
            if not name.endswith((".h", ".cpp")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, os.path.dirname(src))
            folder = os.path.relpath(path, src).split(os.sep)[0]
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = INCLUDE.match(line)
                    if m and "/" in m.group(1):
                        out.append((rel, folder, m.group(1)))
    return out


def violations(edges, folders, files):
    bad = []
    graph = {}
    for rel, folder, inc in edges:
        target = inc.split("/")[0]
        if target == folder:
            if folder == "kernels" and rel.count("/") == 2 and inc.count("/") > 1:
                bad.append(f"{rel}: the device seam includes a backend's {inc}")
            continue
        if folder not in folders:
            bad.append(f"{rel}: folder {folder}/ has no row in the include rules")
            continue
        if target not in folders:
            continue  # a project header outside src/ folders (none today), or a system one
        if target not in folders[folder]:
            bad.append(f"{rel}: {folder}/ may not include {inc}")
        graph.setdefault(folder, set()).add(target)
        if target == "kernels" and inc.count("/") > 1 and inc not in files.get(rel, set()):
            bad.append(f"{rel}: {inc} is a backend's own header (the rules name who may include it)")
    # A loop between folders: depth-first search for a back edge.
    state = {}

    def visit(n, path):
        state[n] = 1
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                bad.append("include loop: " + " -> ".join(path + [n, m]))
            elif m not in state:
                visit(m, path + [n])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [])
    return bad


root = source_dir()
with open(os.path.join(root, "docs", "DESIGN.md"), encoding="utf-8") as f:
    folders, files = read_rules(f.read())

# Every row's folders exist, and the rows say no loop themselves.
for folder, allowed in folders.items():
    fail_if(not os.path.isdir(os.path.join(root, "src", folder)), f"rules name src/{folder}/, which is not there")
    fail_if(folder in allowed, f"the row of {folder} names itself")

# Not blind: a planted upward include and a loop are found.
planted = [("src/kernels/x.cpp", "kernels", "engine/engine.h"),
           ("src/core/y.cpp", "core", "format/gguf-reader.h"),
           ("src/model/z.cpp", "model", "kernels/vulkan/vulkan-backend.h")]
loop_rules = dict(folders)
loop_rules["core"] = {"format"}
found = violations(planted + [("src/format/w.cpp", "format", "core/error.h")], loop_rules, files)
fail_if(not any("kernels/ may not include engine/engine.h" in v for v in found), f"missed an upward include: {found}")
fail_if(not any("include loop" in v for v in found), f"missed a loop: {found}")
fail_if(not any("backend's own header" in v for v in found), f"missed a backend header: {found}")

edges = includes(os.path.join(root, "src"))
fail_if(len(edges) < 300, f"read only {len(edges)} includes under src/")
bad = violations(edges, folders, files)
fail_if(bad, "include rules broken:\n  " + "\n  ".join(bad))
print(f"include rules: {len(edges)} includes in {len(folders)} folders keep the rules of docs/DESIGN.md; "
      f"no loop between folders")
