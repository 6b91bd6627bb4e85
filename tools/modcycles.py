#!/usr/bin/env python3
"""Dependency circles between the top-level areas of src/ (its folders and files).

An area `a` depends on area `x` when a file of `a` names `crate::x` (or `crate::{x, ..}`)
outside its unit tests (`#[cfg(test)]` and what follows). Prints each group of areas that
reach one another, then `modules in circles: N`; exits 1 if there is a group.

    python3 tools/modcycles.py [SRC]      # default: src
    python3 tools/modcycles.py --edges    # every arrow, for docs/architecture.md
"""
import pathlib
import re
import sys

args = [a for a in sys.argv[1:] if not a.startswith("--")]
root = pathlib.Path(args[0] if args else "src")
areas = {p.stem if p.is_file() else p.name for p in root.iterdir()
         if (p.is_file() and p.suffix == ".rs") or p.is_dir()} - {"main", "lib"}
single = re.compile(r"crate::([a-z_][a-z0-9_]*)")
grouped = re.compile(r"crate::\{([^}]*)\}")
deps = {a: set() for a in areas}
for path in root.rglob("*.rs"):
    area = path.relative_to(root).parts[0].removesuffix(".rs")
    if area not in deps:
        continue
    text = path.read_text(encoding="utf-8", errors="replace").split("#[cfg(test)]")[0]
    named = set(single.findall(text))
    for inside in grouped.findall(text):
        named |= {item.strip().split("::")[0] for item in inside.split(",")}
    deps[area] |= (named & areas) - {area}

if "--edges" in sys.argv:
    for area in sorted(deps):
        print(f"{area}: {' '.join(sorted(deps[area]))}")
    sys.exit(0)


def reach(start):
    seen, todo = set(), [start]
    while todo:
        for nxt in deps[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


reachable = {a: reach(a) for a in deps}
groups = {frozenset({a} | {b for b in reachable[a] if a in reachable[b]})
          for a in deps if a in reachable[a]}
for group in sorted(groups, key=sorted):
    print("circle:", " ".join(sorted(group)))
print("modules in circles:", sum(len(g) for g in groups))
sys.exit(1 if groups else 0)
