"""Seals a tree read-only for its sandbox: every entry owned by root, readable by all,
writable by none but root. Links are changed as links and never followed; special
mode bits are dropped. Standard library only.

It runs as root in one of two places (docs/sandboxes.md, "Sealing a tree"):
- in a root worker, on a tree it reaches through its own file system (bubblewrap's
  sandboxes, a local engine's containers: their /work is a dir of the worker's);
- inside a remote engine's container, through the engine's API as the one root
  process the worker starts there (``python3 -I -S -c <this file> PATH``). It prints
  ``sealed N`` (the number of entries) and exits 0, or exits 3 where PATH is no
  directory.

Nothing of the sandbox may run meanwhile: the caller has started nothing of the code
under test yet, so no entry can be swapped for a link between its check and its change.
"""

import os
import stat
import sys

NOT_A_TREE = 3


def seal(root: str) -> int | None:
    """Seals the tree at ``root``; the number of entries changed, or None when
    ``root`` is a link or no directory (nothing changed)."""
    if os.path.islink(root) or not os.path.isdir(root):
        return None
    count = 0
    for directory, dirs, files in os.walk(root, followlinks=False):
        for name in [*dirs, *files, "."]:
            path = os.path.join(directory, name) if name != "." else directory
            info = os.lstat(path)
            os.lchown(path, 0, 0)
            if stat.S_ISDIR(info.st_mode):
                os.chmod(path, 0o755)  # noqa: S103 - the sandbox reads, never writes
            elif not stat.S_ISLNK(info.st_mode):  # readable by all, written by none
                os.chmod(path, (stat.S_IMODE(info.st_mode) & 0o755) | 0o444)
            count += 1
    return count


if __name__ == "__main__":
    sealed = seal(sys.argv[1])
    if sealed is None:
        sys.exit(NOT_A_TREE)
    print(f"sealed {sealed}")
