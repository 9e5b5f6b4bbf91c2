"""Run the Python client's tests, as `python3 -m unittest discover -s python/tests -t python/tests`
does, and with --skips FILE write the tests that skipped, one "name<TAB>reason" a line, for
make test's summary (tests/testreport reads the same format from the Go tests). Exit status 0
when every test passed or skipped, 1 otherwise."""

import argparse
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--skips", help="write the skipped tests here")
    args = parser.parse_args()
    suite = unittest.defaultTestLoader.discover(start_dir=str(HERE), top_level_dir=str(HERE))
    result = unittest.TextTestRunner(verbosity=1).run(suite)
    if result.skipped:
        print(f"{len(result.skipped)} skipped:")
        for test, reason in result.skipped:
            print(f"  python {test.id()}: {reason}")
    if args.skips:
        with open(args.skips, "w") as f:
            for test, reason in result.skipped:
                f.write(f"python {test.id()}\t{' '.join(reason.split())}\n")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
