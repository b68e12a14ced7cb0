"""Where the cloudtune plugin library and the `cloudtune` CLI are (standard library only).

Looked up in this order (the first that exists wins):

1. $CLOUDTUNE_LIBRARY / $CLOUDTUNE_CLI: exact files.
2. $CLOUDTUNE_PREFIX: the prefix of `cmake --install <build> --prefix P`. Its
   share/cloudtune/paths.json (written by cmake/install.cmake) says where the library and the CLI
   are below P; without it, P/lib and P/bin are tried.
3. The repository's build/lib and build/bin, when this package is imported from a source checkout
   (python/cloudtune), so a fresh build is never shadowed by an older install elsewhere.
4. The usual install prefixes: sys.prefix (a virtual environment cloudtune was installed into),
   /usr/local (CMake's default prefix), /usr.
5. For the CLI only: `cloudtune` on PATH.
"""

import json
import os
import pathlib
import shutil
import sys
import sysconfig

LIBRARY_NAME = "libcloudtune_plugin.so"
CLI_NAME = "cloudtune"

_PACKAGE = pathlib.Path(__file__).resolve().parent
_SOURCE_ROOT = _PACKAGE.parents[1]  # <repo> when this is <repo>/python/cloudtune


def in_source_tree():
    """Whether this package is the one in a cloudtune source checkout (not an installed copy)."""
    return ((_PACKAGE.parent / "pyproject.toml").is_file()
            and (_SOURCE_ROOT / "CMakeLists.txt").is_file())


def read_paths(prefix):
    """The {"library", "cli", ...} of an install prefix as absolute paths, from its
    share/cloudtune/paths.json; None when the prefix has no (readable) paths file."""
    prefix = pathlib.Path(prefix)
    try:
        with open(prefix / "share" / "cloudtune" / "paths.json", encoding="utf-8") as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict):
        return None
    # Relative to the prefix, so that a moved install still works; absolute ones stay as they are.
    return {k: str(prefix / v) for k, v in recorded.items()
            if k in ("library", "cli", "include") and isinstance(v, str)}


def _from_prefix(prefix):
    """(library, cli) pairs an install prefix may hold, most specific first."""
    prefix = pathlib.Path(prefix)
    paths = read_paths(prefix)
    if paths:
        yield paths.get("library"), paths.get("cli")
    cli = str(prefix / "bin" / CLI_NAME)
    libdirs = ["lib"]
    multiarch = sysconfig.get_config_var("MULTIARCH")  # Debian: lib/x86_64-linux-gnu under /usr
    if multiarch:
        libdirs.append(f"lib/{multiarch}")
    libdirs.append("lib64")
    for libdir in libdirs:
        yield str(prefix / libdir / LIBRARY_NAME), cli


def candidates():
    """(library, cli) pairs in the order they are tried (either may be None)."""
    env_prefix = os.environ.get("CLOUDTUNE_PREFIX")
    if env_prefix:
        yield from _from_prefix(env_prefix)
    if in_source_tree():
        build = _SOURCE_ROOT / "build"
        yield str(build / "lib" / LIBRARY_NAME), str(build / "bin" / CLI_NAME)
    seen = set()
    for prefix in (sys.prefix, "/usr/local", "/usr"):
        key = os.path.realpath(prefix)
        if key not in seen:
            seen.add(key)
            yield from _from_prefix(prefix)


def library_path():
    """$CLOUDTUNE_LIBRARY, else the first candidate library that exists, else the first candidate
    (so that a "not found" error names the most likely place)."""
    env = os.environ.get("CLOUDTUNE_LIBRARY")
    if env:
        return env
    first = None
    for library, _ in candidates():
        if library:
            if os.path.isfile(library):
                return library
            first = first or library
    return first or str(pathlib.Path(sys.prefix) / "lib" / LIBRARY_NAME)


def cli_path():
    """$CLOUDTUNE_CLI, else bin/cloudtune next to $CLOUDTUNE_LIBRARY's lib directory, else the
    first candidate CLI that exists, else `cloudtune` on PATH; None when there is none."""
    env = os.environ.get("CLOUDTUNE_CLI")
    if env:
        return env
    library = os.environ.get("CLOUDTUNE_LIBRARY")
    if library:  # <prefix>/lib/libcloudtune_plugin.so -> <prefix>/bin/cloudtune (build tree too)
        cli = pathlib.Path(library).resolve().parent.parent / "bin" / CLI_NAME
        if os.access(cli, os.X_OK):
            return str(cli)
    for _, cli in candidates():
        if cli and os.path.isfile(cli) and os.access(cli, os.X_OK):
            return cli
    return shutil.which(CLI_NAME)
