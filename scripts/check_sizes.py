#!/usr/bin/env python3
"""Checks the house rules on size: no source file over 800 lines, no function over 150 lines.

    python3 scripts/check_sizes.py [--max-file 800] [--max-function 150] [ROOT]

Scans the C++ sources of the project's own folders (not build/ or third-party code). A function
is a brace block that opens outside any other function body and is not a namespace, class,
struct, union, enum or extern block; lambdas and local classes count toward the function that
holds them. Prints one line per violation and exits 1 when there is any.
"""

import argparse
import pathlib
import re
import sys

FOLDERS = ["estimator", "search", "plugin", "hooks", "cli", "examples", "bench", "include",
           "tests", "fuzz"]
SUFFIXES = {".cpp", ".h", ".hpp", ".cc", ".cu", ".cuh"}
SCOPE = re.compile(r"^\s*(template\s*<.*>\s*)?(namespace|class|struct|union|enum|extern)\b")


def strip(text):
    """Blanks out comments, string and character literals (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            k = text.find("(", i + 2)
            delim = ")" + text[i + 2:k] + '"'
            j = text.find(delim, k)
            j = n if j < 0 else j + len(delim)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """Yields (first_line, line_count, header) for each function body in `text`."""
    text = strip(text)
    stack = []  # True for a code block
    stmt_start = 0
    line = 1
    opened = []
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            header = text[stmt_start:i]
            in_code = any(stack)
            is_scope = bool(SCOPE.match(header.strip()))
            # Outside a function, a block without a parameter list (`int x{1};`, `= {…}`) is an
            # initialiser, not a function body.
            code = in_code or (not is_scope and "(" in header)
            stack.append(code)
            opened.append((line, header.strip()))
            stmt_start = i + 1
        elif c == "}":
            if not stack:
                continue
            code = stack.pop()
            first, header = opened.pop()
            if code and not any(stack):
                yield first, line - first + 1, header
            stmt_start = i + 1
        elif c == ";":
            stmt_start = i + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=pathlib.Path(__file__).resolve().parents[1])
    ap.add_argument("--max-file", type=int, default=800)
    ap.add_argument("--max-function", type=int, default=150)
    args = ap.parse_args()
    root = pathlib.Path(args.root)
    bad = 0
    files = 0
    for folder in FOLDERS:
        for p in sorted((root / folder).rglob("*")):
            if p.suffix not in SUFFIXES or not p.is_file():
                continue
            files += 1
            text = p.read_text(encoding="utf-8", errors="replace")
            rel = p.relative_to(root)
            lines = text.count("\n")
            if lines > args.max_file:
                print(f"{rel}: {lines} lines (max {args.max_file})")
                bad += 1
            for first, count, header in functions(text):
                if count > args.max_function:
                    name = " ".join(header.split())[-90:]
                    print(f"{rel}:{first}: function of {count} lines (max {args.max_function}): "
                          f"{name}")
                    bad += 1
    print(f"check_sizes: {files} files, {bad} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
