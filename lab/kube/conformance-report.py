#!/usr/bin/env python3
"""The DNS conformance runs side by side (lab/kube/conformance writes OUT/<run>/).

    python3 lab/kube/conformance-report.py OUT [--docs DIR]

Reads each run's JUnit (OUT/<run>/junit.xml, written by e2e.test's ginkgo) and
path.txt, writes OUT/summary.md and OUT/<run>/junit-dns.xml, and prints the
summary. Only the DNS tests are counted: ginkgo's report lists every spec of
e2e.test (3 MB), the ones the focus left out as skipped; junit-dns.xml keeps
the DNS tests and any failure. With --docs DIR, both are copied there
(DIR/summary.md, DIR/<run>.xml), to be committed. Exits 1 when a test that
passed in the control run (coredns) did not pass through nodens, or a run has no
report; node-local-dns's differences are listed, not counted (it is a peer, not
what is checked).
"""
import os
import shutil
import sys
import xml.etree.ElementTree as ET

ORDER = ["coredns", "node-local-dns", "nodens", "nodens-all", "nodens-cilium"]
LABELS = {
    "coredns": "(a) CoreDNS alone",
    "node-local-dns": "(b) node-local-dns",
    "nodens": "(c) nodens, chart defaults",
    "nodens-all": "(d) nodens, every cluster feature",
    "nodens-cilium": "(e) nodens, Cilium preset",
}


def is_dns_test(name):
    return "[sig-network] DNS" in name


def read_run(path):
    """{test name: (status, seconds, message)} of the DNS tests of one run."""
    tree = ET.parse(os.path.join(path, "junit.xml"))
    tests = {}
    for case in tree.iter("testcase"):
        name = case.get("name", "")
        # ginkgo writes "[It] [sig-network] DNS ..." as the case name
        name = name.removeprefix("[It] ")
        status = case.get("status")
        failure = case.find("failure")
        error = case.find("error")
        skipped = case.find("skipped")
        message = ""
        if failure is not None or error is not None:
            status = "failed"
            node = failure if failure is not None else error
            message = (node.get("message") or node.text or "").strip().splitlines()[:1]
            message = message[0] if message else ""
        elif skipped is not None:
            status = "skipped"
            message = skipped.get("message", "")
        elif status not in ("passed", "failed", "skipped"):
            status = "passed"
        if not is_dns_test(name):
            # the suite's own setup and teardown: counted only when it failed
            if status == "failed":
                tests[name] = (status, float(case.get("time", 0)), message)
            continue
        tests[name] = (status, float(case.get("time", 0)), message)
    return tests


def write_dns_junit(path):
    """OUT/<run>/junit-dns.xml: the run's report with the DNS tests and failures only."""
    tree = ET.parse(os.path.join(path, "junit.xml"))
    root = tree.getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    out = ET.Element("testsuites")
    for suite in suites:
        kept = ET.SubElement(out, "testsuite", {k: v for k, v in suite.attrib.items()
                                                 if k in ("name", "timestamp")})
        counts = {"tests": 0, "failures": 0, "skipped": 0}
        seconds = 0.0
        for case in suite.findall("testcase"):
            name = case.get("name", "")
            failed = case.find("failure") is not None or case.find("error") is not None
            if not (is_dns_test(name) or failed):
                continue
            # The captured output: none for a pass, the ends of it for a
            # failure (a probe loop logs every try for minutes).
            for stream in case.findall("system-err") + case.findall("system-out"):
                lines = (stream.text or "").splitlines()
                if not failed:
                    case.remove(stream)
                elif len(lines) > 120:
                    stream.text = "\n".join(lines[:40] + ["[...]"] + lines[-80:])
            kept.append(case)
            counts["tests"] += 1
            counts["failures"] += failed
            counts["skipped"] += case.find("skipped") is not None
            seconds += float(case.get("time", 0))
        kept.set("time", f"{seconds:.1f}")
        for key, value in counts.items():
            kept.set(key, str(value))
    ET.indent(out)
    ET.ElementTree(out).write(os.path.join(path, "junit-dns.xml"), encoding="unicode",
                              xml_declaration=True)


def path_facts(path):
    try:
        return open(os.path.join(path, "path.txt")).read().split("\n")
    except OSError:
        return []


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    docs = sys.argv[sys.argv.index("--docs") + 1] if "--docs" in sys.argv else None
    runs = [r for r in ORDER if os.path.isdir(os.path.join(out, r))]
    results, missing = {}, []
    for run in runs:
        junit = os.path.join(out, run, "junit.xml")
        if os.path.exists(junit):
            results[run] = read_run(os.path.join(out, run))
            write_dns_junit(os.path.join(out, run))
        elif os.path.exists(os.path.join(out, run, "need.txt")):
            continue
        else:
            missing.append(run)
    lines = ["| run | DNS tests run | passed | failed | skipped | minutes | queries the node cache answered |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for run, tests in results.items():
        dns = {n: t for n, t in tests.items() if is_dns_test(n)}
        ran = [t for t in dns.values() if t[0] != "skipped" or "focus" not in t[2]]
        count = lambda s: sum(1 for t in dns.values() if t[0] == s)
        facts = path_facts(os.path.join(out, run))
        served = next((f.split(" answered ")[1].split(" queries")[0] for f in facts if " answered " in f), "-")
        seconds = next((f.split()[0].split("=")[1] for f in facts if f.startswith("seconds=")), "0")
        lines.append(f"| {LABELS.get(run, run)} | {count('passed') + count('failed')} | {count('passed')} "
                     f"| {count('failed')} | {count('skipped')} | {int(seconds) / 60:.1f} | {served} |")
    names = sorted({n for t in results.values() for n, s in t.items()
                    if is_dns_test(n) and s[0] != "skipped"})
    lines += ["", "| test | " + " | ".join(r for r in results) + " |",
              "|---|" + "---|" * len(results)]
    for name in names:
        cells = [results[r].get(name, ("-", 0, ""))[0] for r in results]
        lines.append(f"| {name.replace('|', '/')} | " + " | ".join(cells) + " |")
    regressions = []
    control = results.get("coredns", {})
    for run, tests in results.items():
        for name, (status, _, message) in tests.items():
            if run != "coredns" and control.get(name, ("",))[0] == "passed" and status != "passed":
                regressions.append(f"{run}: {name}: {status} {message}")
            if not is_dns_test(name) and status == "failed":
                regressions.append(f"{run}: {name}: {message}")
    text = "\n".join(lines) + "\n"
    if regressions:
        text += "\nPassed in the control, not here:\n" + "\n".join(f"- {r}" for r in regressions) + "\n"
    failing = [r for r in regressions if r.startswith("nodens")]
    for run in missing:
        text += f"\n{run}: no JUnit report (see {run}/e2e.log)\n"
    open(os.path.join(out, "summary.md"), "w").write(text)
    if docs:
        os.makedirs(docs, exist_ok=True)
        open(os.path.join(docs, "summary.md"), "w").write(text)
        for run in results:
            shutil.copy(os.path.join(out, run, "junit-dns.xml"), os.path.join(docs, f"{run}.xml"))
    print(text)
    sys.exit(1 if failing or missing else 0)


if __name__ == "__main__":
    main()
