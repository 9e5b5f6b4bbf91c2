"""`pip install ./python` works with no package index: the build backend is in the tree."""

import os
import subprocess
import sys
import tempfile
import unittest

from helpers import ROOT


class Install(unittest.TestCase):
    def test_pip_install_without_an_index(self):
        if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
            self.skipTest("pip is not installed (Debian: apt-get install python3-pip; .ci/run does it)")
        with tempfile.TemporaryDirectory() as tmp:
            target = os.path.join(tmp, "site")
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
            run = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", target,
                                  str(ROOT / "python")], env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stderr)
            probe = ("import narwhal.engines.client as c, pathlib; "
                     "from narwhal.engines import EngineClient, PrefillResult, EngineTimeoutError; "
                     "print(c.__file__); print(EngineClient.__name__, PrefillResult.__name__, EngineTimeoutError.__name__); "
                     "import narwhal; print((pathlib.Path(narwhal.__file__).parent / 'py.typed').is_file())")
            out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {target!r}); {probe}"],
                                 capture_output=True, text=True, timeout=60, cwd=tmp)
            self.assertEqual(out.returncode, 0, out.stderr)
            lines = out.stdout.splitlines()
            self.assertTrue(lines[0].startswith(target), lines[0])
            self.assertEqual(lines[1], "EngineClient PrefillResult EngineTimeoutError")
            self.assertEqual(lines[2], "True", "py.typed (PEP 561) is not in the installed package")


if __name__ == "__main__":
    unittest.main()
