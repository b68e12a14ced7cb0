"""`python3 -m cloudtune ARGS...` runs the `cloudtune` command-line tool with ARGS.

The tool is a C++ executable (cli/, installed to <prefix>/bin/cloudtune); this finds it
($CLOUDTUNE_CLI, else next to the plugin library, else the install prefixes, else PATH: see
cloudtune/_locate.py) and replaces this process with it, so its output and exit status are the
tool's own.
"""

import os
import sys

from cloudtune import _locate


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    cli = _locate.cli_path()
    if not cli:
        print("cloudtune: the `cloudtune` command-line tool was not found; install cloudtune "
              "(cmake --install <build> --prefix P) and set CLOUDTUNE_PREFIX=P, or set "
              "CLOUDTUNE_CLI to the executable", file=sys.stderr)
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(cli, [cli, *argv])
    except OSError as e:
        print(f"cloudtune: cannot run '{cli}': {e}", file=sys.stderr)
        return 126


if __name__ == "__main__":
    sys.exit(main())
