"""Sums JUnit/xUnit XML reports into one line: N passed, N failed, N skipped.

Exits non-zero when a test failed or a report is missing or unreadable.
"""

import sys
import xml.etree.ElementTree as ET


def main(paths: list[str]) -> int:
    passed = failed = skipped = 0
    ok = True
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            print(f"count_results: cannot read {path}: {e}", file=sys.stderr)
            ok = False
            continue
        for case in root.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    if not paths:
        ok = False
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0 if ok and failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
