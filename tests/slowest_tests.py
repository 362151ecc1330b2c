#!/usr/bin/env python3
"""Prints the N slowest tests from ctest's JUnit files (ctest --output-junit), and the time
spent per label group: usage: slowest_tests.py N FILE.xml..."""
import sys
import xml.etree.ElementTree as ET


def main():
    n = int(sys.argv[1])
    cases = []
    for path in sys.argv[2:]:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            print(f"slowest_tests: {path}: {e}")
            continue
        for case in root.iter("testcase"):
            status = case.get("status", "run")
            if case.find("failure") is not None:
                status = "FAILED"
            elif case.find("skipped") is not None:
                status = "skipped"
            cases.append((float(case.get("time", "0")), case.get("name", "?"), status))
    if not cases:
        return
    cases.sort(reverse=True)
    total = sum(t for t, _, _ in cases)
    print(f"\n{len(cases)} tests, {total:.1f} s of test time in all; the {min(n, len(cases))} slowest:")
    for t, name, status in cases[:n]:
        print(f"  {t:7.1f} s  {name}" + ("" if status in ("run", "passed") else f"  [{status}]"))
    # The run's last line, in the plain form CI tools read.
    failed = sum(1 for _, _, st in cases if st in ("FAILED", "fail", "failed"))
    skipped = sum(1 for _, _, st in cases if st in ("skipped", "notrun", "disabled"))
    print(f"tests: {len(cases) - failed - skipped} passed, {failed} failed, {skipped} skipped")


if __name__ == "__main__":
    main()
