#!/usr/bin/env python3
"""Checks that every repository path the project's files mention exists.

Scans the tracked text files (sources, headers, Markdown, CMake, scripts) for:

  - Markdown links `[text](target)` in *.md: the target, relative to the file, must exist; for a
    `<page>.md#<anchor>` target the anchor must also be a heading of that file;
  - repository paths: words starting with a top-level folder (`docs/`, `examples/`, `include/`,
    `tests/`, `tools/`, `benchmarks/`, `cmake/`, `ports/`); any path after `${PROJECT_SOURCE_DIR}/`
    or `${CMAKE_SOURCE_DIR}/`, relative to the root, or after `${CMAKE_CURRENT_SOURCE_DIR}/`,
    relative to the CMake file's folder;
  - headers named from the include tree: `convoy/core/batch.hpp` or `core/batch.hpp`, relative to
    include/;
  - bare Markdown names such as `README.md`: at the root, in docs/ or next to the file.

In Markdown, fenced code is searched for paths (commands name real files) but not for links or
bare page names.

A path without a suffix may name a program by its source (`benchmarks/bench_ps` for
benchmarks/bench_ps.cpp, as benchmark citations do).

A word that is part of a longer path (`build/examples/own_model`, `../core/batch.hpp`) or that
holds a placeholder or a pattern (`<name>`, `*`, `NN_topic`, `{`, `$`, `...`) is not a reference
and is skipped. Every reference whose target is missing is printed as `file:line: ...`; the exit
status is then 1. On success it prints "N references checked in M files".

A file whose lines include one that is only a comment `# check_doc_paths: skip-file` (or with
`//`) is not searched: the checker's own test, whose made-up tree names paths that do not exist.

Usage: tools/check_doc_paths.py [REPOSITORY_ROOT]   (default: the checkout holding this script)
Standard library only; run by the ctest docs_paths.
"""

import re
import subprocess
import sys
from pathlib import Path

TOP_LEVEL = ("docs", "examples", "include", "tests", "tools", "benchmarks", "cmake", "ports")
CONVOY_DIRS = ("core", "place", "comm", "sync", "nn", "optim", "io", "cluster", "train", "exec",
               "math", "cuda")
TEXT_SUFFIXES = {".hpp", ".cpp", ".cuh", ".h", ".md", ".txt", ".cmake", ".in", ".py", ".sh", ".json",
                 ".yml", ".yaml", ".supp"}
# What may follow a path: a character that cannot be part of one.
PATH_CHARS = r"[\w./+-]"
PREFIXED = re.compile(r"\$\{(?P<var>PROJECT_SOURCE_DIR|CMAKE_SOURCE_DIR|CMAKE_CURRENT_SOURCE_DIR)\}/"
                      r"(?P<path>" + PATH_CHARS + r"+)")
ROOTED = re.compile(r"(?<![\w./+$}-])(?P<path>(?:" + "|".join(TOP_LEVEL) + r")/" + PATH_CHARS + r"*)"
                    r"(?:#(?P<anchor>[\w-]+))?")
HEADER = re.compile(r"(?<![\w./+-])(?P<path>(?:convoy/)?(?:" + "|".join(CONVOY_DIRS) + r")/"
                    r"[\w/-]+\.(?:hpp|cuh))(?!" + PATH_CHARS + ")")
BARE_MD = re.compile(r"(?<![\w./+-])(?P<path>[A-Za-z][\w-]*\.md)(?![\w/-])(?:#(?P<anchor>[\w-]+))?")
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
SKIP_FILE = re.compile(r"^\s*(?:#|//)\s*check_doc_paths:\s*skip-file\s*$", re.M)
PLACEHOLDER = re.compile(r"[<>*{}$]|\.\.\.|…|\bNN_|\bN\b")


def tracked_files(root):
    """The tracked files (git ls-files), or every file outside build and VCS folders."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], check=True,
                             capture_output=True).stdout.decode("utf-8")
        return [root / name for name in out.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".cache", "out"}
        return [p for p in root.rglob("*") if p.is_file() and not any(
            part in skip or part.startswith("build") for part in p.relative_to(root).parts)]


def is_text(path):
    if path.suffix in TEXT_SUFFIXES or path.name == "CMakeLists.txt":
        return True
    try:
        with path.open("rb") as f:
            return f.read(2) == b"#!"  # scripts without a suffix: tools/dev, tools/convoy-launch
    except OSError:
        return False


def slug(heading):
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_anchors = {}


def anchors(md):
    """Every anchor of `md`: its headings' slugs (a repeated one gets -1, -2, ...) and <a> ids."""
    if md not in _anchors:
        found, seen, in_code = set(), {}, False
        for line in md.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith(("```", "~~~")):
                in_code = not in_code
            elif not in_code and (m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)):
                base = slug(m[1])
                found.add(base if base not in seen else f"{base}-{seen[base]}")
                seen[base] = seen.get(base, 0) + 1
            found.update(re.findall(r'<a\s+(?:name|id)="([^"]+)"', line))
        _anchors[md] = found
    return _anchors[md]


def clean(path):
    """A path without the punctuation a sentence may put after it."""
    return path.rstrip(".,:;'\"`)")


def check_target(target, anchor, shown):
    """An error message for a missing target or anchor, else None."""
    if not target.exists() and not (target.suffix == "" and target.with_suffix(".cpp").is_file()):
        return f"{shown} does not exist"  # a program may be named by its source's stem
    if anchor and target.suffix == ".md" and target.is_file() and anchor not in anchors(target):
        return f"{shown}: {target.name} has no heading with the anchor #{anchor}"
    return None


def references(root, file, text):
    """Yields (line number, shown reference, error or None) for every reference in `text`."""
    rel_dir = file.parent
    is_md = file.suffix == ".md"
    in_code = False
    for number, line in enumerate(text.splitlines(), start=1):
        if is_md and line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
            continue
        prose = is_md and not in_code  # links and bare page names count in Markdown prose only
        taken = []  # spans already checked as a link's target, so each is reported once
        for m in LINK.finditer(line) if prose else ():
            taken.append(m.span("target"))
            target = m["target"]
            if re.match(r"^[a-z][a-z+.-]*:", target) or PLACEHOLDER.search(target):
                continue  # a URL, mailto:, or a pattern
            path, _, anchor = target.partition("#")
            resolved = (rel_dir / path) if path else file
            yield number, target, check_target(resolved.resolve(), anchor, f"link {target}")

        def fresh(m, group="path"):
            inside = any(b <= m.start(group) < e for b, e in taken)
            # A placeholder in the word or right after it (`tests/unit/<concern>/`, `docs/*.md`).
            pattern = PLACEHOLDER.search(line[m.start(group):m.end(group) + 1])
            return not inside and not pattern

        for m in PREFIXED.finditer(line):
            is_fresh = fresh(m)
            taken.append(m.span("path"))
            if is_fresh:
                path = clean(m["path"])
                base = rel_dir if m["var"] == "CMAKE_CURRENT_SOURCE_DIR" else root
                yield number, path, check_target(base / path, None, path)
        for m in ROOTED.finditer(line):
            if fresh(m):
                path = clean(m["path"])
                shown = path + (f"#{m['anchor']}" if m["anchor"] else "")
                yield number, shown, check_target(root / path, m["anchor"], shown)
        for m in HEADER.finditer(line):
            path = m["path"]
            if not fresh(m):
                continue
            full = root / "include" / (path if path.startswith("convoy/") else "convoy/" + path)
            shown = f"{path} (include/{full.relative_to(root / 'include')})"
            yield number, path, check_target(full, None, shown)
        for m in BARE_MD.finditer(line) if not is_md or prose else ():
            if not fresh(m):
                continue
            name = m["path"]
            candidates = [root / name, root / "docs" / name, rel_dir / name]
            hit = next((c for c in candidates if c.is_file()), None)
            if hit is None:
                yield number, name, f"{name} is neither at the root, in docs/ nor next to {file.name}"
            else:
                yield number, name, check_target(hit, m["anchor"], name)


def main(argv):
    root = (Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent).resolve()
    checked, files, problems = 0, 0, []
    for file in sorted(tracked_files(root)):
        if not file.is_file() or not is_text(file):
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if SKIP_FILE.search(text):
            continue
        files += 1
        for number, shown, error in references(root, file, text):
            checked += 1
            if error:
                problems.append(f"{file.relative_to(root)}:{number}: {error}")
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} broken reference(s) of {checked} in {files} files")
        return 1
    print(f"{checked} references checked in {files} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
