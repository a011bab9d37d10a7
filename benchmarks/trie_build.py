"""Building the trie and small layouts within a memory budget (issue 32).

    python benchmarks/trie_build.py MODEL_DIR --layout trie --memory 256M --out DIR

Builds ``compact/`` of the model's Parquet tables in ``--layout`` into ``DIR`` (new) with
``--memory`` bytes of working memory (default: the builders' default, the default budget
less the process's 200 MB), as ``snm compact`` does; prints the wall seconds and the
sizes the budget gave (runs, partitions, chunks).  The process's allocator is set as
``snm compact``'s (``memory.configure_process("single")``).  Run it under ``/usr/bin/time -v`` for
the peak RSS; compare the files with another build by ``cmp``/``md5sum``.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from snm_core.io import memory as memory_budget  # noqa: E402
from snm_core.scoring.layouts import small, trie, trie_build  # noqa: E402
from snm_core.stages import manifests  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--layout", choices=("trie", "small"), default="trie")
    parser.add_argument("--memory", help="working memory (8G, 256M); default the builders'")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    memory_budget.configure_process("single")  # as snm compact's build does
    manifest = manifests.Model.read(args.model)
    memory = (memory_budget.MemoryBudget.parse(args.memory).bytes if args.memory
              else memory_budget.MemoryBudget.parse().working())
    print(f"memory {memory_budget.format_bytes(memory)}: "
          f"{trie_build.model_plan(args.model, manifest, args.layout, memory)}")
    os.makedirs(args.out)
    build = trie.build_trie if args.layout == "trie" else small.build_small
    started = time.perf_counter()
    compact = build(args.model, manifest, args.out, memory=memory).write(args.out)
    print(f"{args.layout}: {time.perf_counter() - started:.1f} s, {compact['bytes']:,} bytes, "
          f"{compact['entries']:,} entries")


if __name__ == "__main__":
    main()
