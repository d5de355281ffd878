#!/usr/bin/env python3
"""Include cycles between the rooms of a folder: `scripts/include_cycles.py model trainer …`.

A room is a header and its source (trainer/rank_run.h + trainer/rank_run.cpp); room A uses room B
when either of A's files includes B's header. Prints each cycle (a strongly connected set of rooms)
and exits 1 if there is one, 0 otherwise. Run from the repository root, or with --root.
"""
import argparse
import os
import re
import sys


def rooms_of(root, folder):
    edges = {}
    for name in sorted(os.listdir(os.path.join(root, folder))):
        stem, ext = os.path.splitext(name)
        if ext not in (".h", ".cpp", ".cu"):
            continue
        room = f"{folder}/{stem}"
        edges.setdefault(room, set())
        with open(os.path.join(root, folder, name), encoding="utf-8") as f:
            for inc in re.findall(r'^#include "([^"]+)"', f.read(), re.M):
                target = os.path.splitext(inc)[0]
                if target.startswith(folder + "/") and target != room:
                    edges[room].add(target)
    return edges


def cycles(edges):
    """Tarjan's strongly connected components with more than one room, iteratively."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--root", default=".")
    args = parser.parse_args()
    bad = 0
    for folder in args.folders:
        for c in cycles(rooms_of(args.root, folder)):
            print(f"{folder}: include cycle of {len(c)} rooms: {' '.join(c)}")
            bad += 1
    if bad == 0:
        print(f"no include cycle in {', '.join(args.folders)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
