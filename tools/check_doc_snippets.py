#!/usr/bin/env python3
"""Checks that code quoted in the docs is the code that compiles.

A fenced code block in docs/*.md or README.md that is immediately preceded by a line

    <!-- snippet: path/to/file.cpp#NAME -->

must hold exactly the lines between `// example-begin NAME` and `// example-end NAME` in that
file (the path is relative to the repository root). Both sides are compared after removing their
common leading indentation and trailing whitespace. Every mismatch, unknown file, unknown or
duplicated marker, and snippet line without a code block under it is printed with the file names;
the exit status is then 1. On success it prints "N snippets checked".

Usage: tools/check_doc_snippets.py [REPOSITORY_ROOT]   (default: the checkout holding this script)
Standard library only; run by the ctest docs_snippets.
"""

import difflib
import re
import sys
from pathlib import Path

SNIPPET = re.compile(r"^\s*<!--\s*snippet:\s*(?P<path>[^#\s]+)#(?P<name>[\w.-]+)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def normalize(lines):
    """Strips trailing whitespace and the indentation common to all non-blank lines."""
    lines = [line.rstrip() for line in lines]
    widths = [len(line) - len(line.lstrip()) for line in lines if line]
    common = min(widths, default=0)
    return [line[common:] for line in lines]


def quoted_region(source, shown, name):
    """The lines between the markers NAME in `source` (called `shown` in messages), or an error."""
    begin = re.compile(r"^\s*//\s*example-begin\s+" + re.escape(name) + r"\s*$")
    end = re.compile(r"^\s*//\s*example-end\s+" + re.escape(name) + r"\s*$")
    lines = source.read_text(encoding="utf-8").splitlines()
    begins = [i for i, line in enumerate(lines) if begin.match(line)]
    ends = [i for i, line in enumerate(lines) if end.match(line)]
    if len(begins) != 1 or len(ends) != 1:
        return None, (f"{shown} has {len(begins)} '// example-begin {name}' and {len(ends)} "
                      f"'// example-end {name}' lines; it needs exactly one of each")
    if ends[0] < begins[0]:
        return None, f"{shown}: '// example-end {name}' comes before its '// example-begin'"
    return lines[begins[0] + 1:ends[0]], None


def blocks(doc):
    """Yields (marker line number, path, name, block lines or None) for every snippet marker."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        marker = SNIPPET.match(lines[i])
        if not marker:
            i += 1
            continue
        at = i + 1
        opening = FENCE.match(lines[at]) if at < len(lines) else None
        if not opening:
            yield at, marker["path"], marker["name"], None
            i = at
            continue
        fence = opening["fence"]
        closing = re.compile(r"^\s*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
        body = []
        j = at + 1
        while j < len(lines) and not closing.match(lines[j]):
            body.append(lines[j])
            j += 1
        if j == len(lines):
            yield at, marker["path"], marker["name"], None
        else:
            yield at, marker["path"], marker["name"], body
        i = j + 1


def main(argv):
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    docs = sorted((root / "docs").glob("*.md"))
    if (root / "README.md").is_file():
        docs.insert(0, root / "README.md")
    checked, problems = 0, []
    for doc in docs:
        where_doc = doc.relative_to(root)
        for line_number, path, name, body in blocks(doc):
            where = f"{where_doc}:{line_number}"
            if body is None:
                problems.append(f"{where}: the snippet line for {path}#{name} must be followed at once "
                                f"by a complete fenced code block")
                continue
            source = root / path
            if not source.is_file():
                problems.append(f"{where}: quotes {path}#{name}, but {path} does not exist")
                continue
            region, error = quoted_region(source, path, name)
            if error:
                problems.append(f"{where}: {error}")
                continue
            checked += 1
            expected, found = normalize(region), normalize(body)
            if expected != found:
                diff = difflib.unified_diff(expected, found, f"{path}#{name}", f"{where_doc} (line {line_number + 1})",
                                            lineterm="")
                problems.append(f"{where}: the block differs from {path}#{name}:\n" + "\n".join(diff))
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} snippet problem(s); {checked} snippet(s) checked")
        return 1
    print(f"{checked} snippets checked")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
