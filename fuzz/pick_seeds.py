#!/usr/bin/env python3
"""Keeps the few inputs of a long fuzz run that add the most edges over the seeds.

    python3 fuzz/pick_seeds.py <target> <run corpus dir> [--max N] [--min-edges E]

Run from the repository root after building the target (`cargo fuzz build -O -s none`). A
libFuzzer merge (`-merge=1 -use_counters=0`) runs every seed and every input of the run and
writes the edges each covers to a control file; then, greedily, the input adding the most edges
not yet covered (by the seeds and the inputs picked before it) is copied to
`fixtures/fuzz/<target>/found-<first 12 hex digits of its name>`, until N are picked or none adds
E edges. A plain merge keeps every input adding one edge (hundreds after an hour), and each
seed costs CI time in `tests/fuzz_regressions.rs` and the fuzz smoke.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile


def edges_per_input(binary, seeds, corpus):
    """(seed file count, file paths in control-file order, {index: edge set})."""
    work = tempfile.mkdtemp(prefix="pick-seeds-")
    try:
        first = os.path.join(work, "seeds")
        shutil.copytree(seeds, first)
        control = os.path.join(work, "control")
        subprocess.run(
            [binary, "-merge=1", "-use_counters=0", f"-merge_control_file={control}", first, corpus],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        lines = open(control).read().split("\n")
    finally:
        shutil.rmtree(work)
    count, in_first = int(lines[0]), int(lines[1])
    files = lines[2 : 2 + count]
    edges = {}
    for line in lines[2 + count :]:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "COV":
            edges[int(parts[1])] = set(map(int, parts[2:]))
    return in_first, files, edges


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target")
    parser.add_argument("corpus")
    parser.add_argument("--max", type=int, default=20)
    parser.add_argument("--min-edges", type=int, default=1)
    parser.add_argument(
        "--binary",
        help="the fuzz binary (default: fuzz/target/x86_64-unknown-linux-gnu/release/<target>)",
    )
    args = parser.parse_args()
    seeds = os.path.join("fixtures", "fuzz", args.target)
    binary = args.binary or os.path.join(
        "fuzz", "target", "x86_64-unknown-linux-gnu", "release", args.target
    )
    if not os.path.isdir(seeds) or not os.access(binary, os.X_OK):
        sys.exit(f"run from the repository root with {binary} built (cargo fuzz build -O -s none)")
    in_first, files, edges = edges_per_input(binary, seeds, args.corpus)
    covered = set().union(*(e for i, e in edges.items() if i < in_first))
    print(f"the {in_first} seeds cover {len(covered)} edges")
    candidates = {i: e - covered for i, e in edges.items() if i >= in_first}
    reachable = len(set().union(*candidates.values())) if candidates else 0
    print(f"the run's {len(candidates)} inputs add {reachable} edges in all")
    for _ in range(args.max):
        if not candidates:
            break
        best = max(candidates, key=lambda i: (len(candidates[i]), -os.path.getsize(files[i])))
        added = candidates.pop(best)
        if len(added) < args.min_edges:
            break
        covered |= added
        for other in candidates.values():
            other -= added
        name = "found-" + os.path.basename(files[best])[:12]
        shutil.copyfile(files[best], os.path.join(seeds, name))
        print(f"{name}: +{len(added)} edges")
    print(f"seeds and picks cover {len(covered)} edges")


if __name__ == "__main__":
    main()
