"""The Python package and the CMake install together, the way docs/install.md describes them: a
virtual environment over Debian's python3-torch (--system-site-packages), `pip install
--no-build-isolation --no-index ./python` into it, `cmake --install` of this build into a
temporary prefix; then `python -m cloudtune --help` must be the installed CLI's help and `import
cloudtune` must find the installed plugin library (CLOUDTUNE_LIBRARY unset).

    CLOUDTUNE_BUILD_DIR=build /usr/bin/python3 tests/python/package_test.py

CLOUDTUNE_BUILD_DIR: the CMake build to install (default: the directory two levels above
$CLOUDTUNE_LIBRARY, else <repo>/build); CLOUDTUNE_CMAKE: the cmake to run (default: cmake). The
virtual environment uses the Python running this test (/usr/bin/python3 under CTest), which needs
the Debian packages python3-venv, python3-setuptools and python3-wheel (scripts/install-deps.sh).
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]


def build_dir():
    if os.environ.get("CLOUDTUNE_BUILD_DIR"):
        return pathlib.Path(os.environ["CLOUDTUNE_BUILD_DIR"])
    if os.environ.get("CLOUDTUNE_LIBRARY"):  # <build>/lib/libcloudtune_plugin.so
        return pathlib.Path(os.environ["CLOUDTUNE_LIBRARY"]).resolve().parents[1]
    return REPO / "build"


def run(cmd, **kwargs):
    """Runs cmd, failing with its output when it exits non-zero; returns the CompletedProcess."""
    p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=300, **kwargs)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {p.returncode}\n"
                             f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


class PackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="cloudtune_pypkg.")
        tmp = pathlib.Path(cls._tmp.name)
        cls.tmp = tmp
        cmake = os.environ.get("CLOUDTUNE_CMAKE", "cmake")
        # A copy of python/, so that building the package leaves nothing (build/, *.egg-info) in
        # the source tree.
        src = tmp / "src"
        shutil.copytree(REPO / "python", src,
                        ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        cls.venv = tmp / "venv"
        cls.python = cls.venv / "bin" / "python"
        run([sys.executable, "-m", "venv", "--system-site-packages", cls.venv])
        run([cls.python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-build-isolation", "--no-index", "--no-deps", src])
        cls.prefix = tmp / "prefix"
        run([cmake, "--install", build_dir(), "--prefix", cls.prefix])
        cls.cli = cls.prefix / "bin" / "cloudtune"
        cls.library = cls.prefix / "lib" / "libcloudtune_plugin.so"

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def env(self, **extra):
        """This environment without any cloudtune setting or PYTHONPATH (so that only the
        installed package can be imported), plus `extra`."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("CLOUDTUNE") and k != "PYTHONPATH"}
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def venv_python(self, *args, **env):
        # cwd: a directory without a `cloudtune` folder, because -m/-c put it first on sys.path.
        return run([self.python, *args], env=self.env(**env), cwd=self.tmp)

    def test_help_is_the_installed_cli(self):
        expected = run([self.cli, "--help"], env=self.env()).stdout
        out = self.venv_python("-m", "cloudtune", "--help", CLOUDTUNE_PREFIX=self.prefix).stdout
        self.assertEqual(out, expected)
        self.assertIn(f"Usage: {self.cli} ", out)

    def test_import_finds_the_installed_library(self):
        code = ("import cloudtune, torch; print(cloudtune.__file__);"
                " print(cloudtune.library_path()); cloudtune.load_library();"
                " print(bool(torch.ops.cloudtune.enabled()))")
        lines = self.venv_python("-c", code, CLOUDTUNE_PREFIX=self.prefix).stdout.splitlines()
        module, library, enabled = lines[-3:]
        # The pip-installed copy, not the repository's python/cloudtune.
        self.assertTrue(pathlib.Path(module).is_relative_to(self.venv), module)
        self.assertEqual(library, str(self.library))
        self.assertEqual(enabled, "False")  # loaded, and off without CLOUDTUNE=1
        self.assertTrue((self.venv / "bin" / "cloudtune-torchrun").is_file())

    def test_install_into_the_venv_needs_no_settings(self):
        # cmake --install into the environment itself: found through sys.prefix.
        run([os.environ.get("CLOUDTUNE_CMAKE", "cmake"), "--install", build_dir(),
             "--prefix", self.venv])
        lines = self.venv_python("-c", "import cloudtune; print(cloudtune.library_path())")
        self.assertEqual(lines.stdout.splitlines()[-1],
                         str(self.venv / "lib" / "libcloudtune_plugin.so"))
        out = self.venv_python("-m", "cloudtune", "--help").stdout
        self.assertIn(f"Usage: {self.venv / 'bin' / 'cloudtune'} ", out)


if __name__ == "__main__":
    unittest.main()
