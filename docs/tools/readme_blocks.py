"""The command outputs README.md prints, regenerated: each block is what its command prints today.

    python docs/tools/readme_blocks.py            # prints every block
    python docs/tools/readme_blocks.py --write    # rewrites the blocks in README.md (asked for: tracked file)

A block sits between ``<!-- block: NAME -->`` and ``<!-- /block -->`` markers around its fenced output;
tests/test_readme_blocks.py checks that README.md holds exactly what this prints.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

from perfmodel.paths import repo_root

# name -> the command whose standard output the block shows (run from the repository root)
BLOCKS = {
    "project": ["project", "--arch", "blackwell.yaml", "--model", "llama70b"],
    "validate": ["validate"],
}
_MARK = re.compile(r"(<!-- block: (?P<name>[\w-]+) -->\n```\n)(?P<body>.*?)(```\n<!-- /block -->)", re.S)


def output(name: str) -> str:
    env = {**os.environ, "PERFMODEL_PROGRESS": "0", "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "perfmodel", *BLOCKS[name]], cwd=repo_root(), env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout if done.stdout.endswith("\n") else done.stdout + "\n"


def rewrite(text: str) -> str:
    return _MARK.sub(lambda m: m.group(1) + output(m.group("name")) + m.group(4), text)


def blocks(text: str) -> dict[str, str]:
    return {m.group("name"): m.group("body") for m in _MARK.finditer(text)}


def main(argv: list[str]) -> int:
    readme = repo_root() / "README.md"
    if "--write" in argv:
        from perfmodel.io import write_text_atomic

        write_text_atomic(readme, rewrite(readme.read_text(encoding="utf-8")))
        return 0
    for name in BLOCKS:
        print(f"<!-- block: {name} -->\n```\n{output(name)}```\n<!-- /block -->")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
