"""The README's Python example runs as documented against `narwhal sim fleet`."""

import os
import re
import subprocess
import sys
import tempfile
import unittest

from helpers import ROOT, narwhal_binary


class ReadmeExample(unittest.TestCase):
    def test_handoff_example(self):
        with tempfile.TemporaryDirectory() as tmp:
            desc = os.path.join(tmp, "fleet.json")
            with open(desc, "w") as out:
                fleet = subprocess.Popen([narwhal_binary(), "sim", "fleet", "--prefill", "2", "--decode", "2",
                                          "--ttft", "40ms", "--itl", "5ms", "--tokens", "24"],
                                         stdout=out, stderr=subprocess.DEVNULL)
            try:
                env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
                run = subprocess.run([sys.executable, str(ROOT / "python/examples/handoff.py"), desc],
                                     env=env, capture_output=True, text=True, timeout=60)
            finally:
                fleet.terminate()
                fleet.wait(10)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn(" alpha beta gamma delta epsilon zeta eta theta\n", run.stdout)
        # The decode read every block the producer's descriptor named.
        named = re.search(r"'remote_block_ids': \[([0-9, ]*)\]", run.stdout)
        self.assertIsNotNone(named, run.stdout)
        blocks = len([b for b in named.group(1).split(",") if b.strip()])
        self.assertGreaterEqual(blocks, 1)
        self.assertIn(f"producer blocks read: {blocks}\n", run.stdout)


if __name__ == "__main__":
    unittest.main()
