#!/usr/bin/env python3
"""Tests for tools/check_doc_paths.py on a small tree made here: every kind of reference it knows,
each once present and once missing, plus the words it must skip. It must name exactly the missing
ones, by file and line, and exit 1; and pass, exit 0, once they are fixed.

Usage: tests/docs/test_check_doc_paths.py PATH/TO/check_doc_paths.py   (ctest docs_paths_checker)
"""
# check_doc_paths: skip-file

import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path


def write(root, name, text):
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")


def run(script, root):
    done = subprocess.run([sys.executable, str(script), str(root)], capture_output=True, text=True)
    return done.returncode, done.stdout.splitlines()


def main(argv):
    script = Path(argv[1]).resolve()
    failures = []

    def expect(what, condition, detail=""):
        if not condition:
            failures.append(f"{what}{': ' + detail if detail else ''}")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write(root, "README.md", """
            # Project
            See [the guide](docs/guide.md), [its setup](docs/guide.md#setting-up) and
            [a missing page](docs/missing.md), [a missing part](docs/guide.md#nowhere),
            [the web](https://example.org/x.md) and [this](#project).
            """)
        write(root, "docs/guide.md", """
            # Guide
            ## Setting up
            ## Setting up
            Run `examples/00_first` (see [twice](#setting-up-1)), then examples/01_gone, and
            read DESIGN.md and guide.md. Patterns are not references: `docs/*.md`,
            `examples/NN_topic/main.cpp`, `tests/unit/<concern>/test_<header>.cpp`, and neither
            are build outputs: build/examples/first, ../docs/absent.md.
            ```sh
            [not a link](nowhere.md)
            ```
            """)
        write(root, "examples/00_first/main.cpp", """
            // Runs what docs/guide.md shows; see docs/gone.md and core/batch.hpp, core/absent.hpp,
            // convoy/io/absent.hpp, and the figure from benchmarks/bench_x (2026-01-01).
            #include <cereal/archives/json.hpp>
            #include <convoy/core/batch.hpp>
            """)
        write(root, "include/convoy/core/batch.hpp", "#pragma once\n")
        write(root, "benchmarks/bench_x.cpp", "int main() {}\n")
        write(root, "tests/CMakeLists.txt", """
            add_test(NAME t COMMAND ${PROJECT_SOURCE_DIR}/tools/run.py
                     ${CMAKE_CURRENT_SOURCE_DIR}/data/here.txt ${CMAKE_CURRENT_SOURCE_DIR}/data/gone.txt)
            """)
        write(root, "tests/data/here.txt", "x\n")
        write(root, "tools/run.py", "#!/usr/bin/env python3\n# reads tools/absent.py\n")
        write(root, "tools/fixture.py", "# check_doc_paths: skip-file\n# docs/made_up.md\n")

        status, lines = run(script, root)
        expected = {
            "README.md:3: link docs/missing.md does not exist",
            "README.md:3: link docs/guide.md#nowhere: guide.md has no heading with the anchor #nowhere",
            "docs/guide.md:4: examples/01_gone does not exist",
            "docs/guide.md:5: DESIGN.md is neither at the root, in docs/ nor next to guide.md",
            "examples/00_first/main.cpp:1: docs/gone.md does not exist",
            "examples/00_first/main.cpp:1: core/absent.hpp (include/convoy/core/absent.hpp) does not exist",
            "examples/00_first/main.cpp:2: convoy/io/absent.hpp (include/convoy/io/absent.hpp) does not exist",
            "tests/CMakeLists.txt:2: data/gone.txt does not exist",
            "tools/run.py:2: tools/absent.py does not exist",
        }
        problems = {line for line in lines if not line.endswith("files")}
        expect("exit status 1 with broken references", status == 1, f"got {status}")
        expect("every broken reference named", problems >= expected,
               "missing: " + "; ".join(sorted(expected - problems)))
        expect("nothing else named", problems <= expected,
               "unexpected: " + "; ".join(sorted(problems - expected)))
        expect("a summary line", lines and lines[-1].startswith(f"{len(expected)} broken reference(s)"),
               lines[-1] if lines else "no output")

        # Fixed: the same tree passes.
        for name in ("docs/missing.md", "docs/gone.md", "DESIGN.md", "tests/data/gone.txt",
                     "tools/absent.py", "include/convoy/core/absent.hpp", "include/convoy/io/absent.hpp"):
            write(root, name, "# Nowhere\n")
        with (root / "docs/guide.md").open("a", encoding="utf-8") as guide:
            guide.write("## Nowhere\n")
        (root / "examples/01_gone").mkdir()
        status, lines = run(script, root)
        expect("exit status 0 once fixed", status == 0, "\n".join(lines))
        expect("a count once fixed", lines and "references checked in" in lines[-1], str(lines))

    for failure in failures:
        print("FAILED:", failure)
    print("check_doc_paths tests: " + ("FAILED" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
