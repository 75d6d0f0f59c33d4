"""scripts/suite-units: a junit xml summed by xdist work unit (support.work_unit), as the suite's time is read."""

import subprocess
import sys

from support import ROOT

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.lab.test_jobs_lab" name="test_a" time="10.5"/>
<testcase classname="tests.lab.test_deploy_lab" name="test_b" time="4.5"/>
<testcase classname="tests.lab.test_agent_lab" name="test_c" time="7.0"/>
<testcase classname="tests.local.test_shell.TestQuoting" name="test_d[x]" time="2.0"/>
</testsuite></testsuites>"""


def units(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "suite-units"), *args], capture_output=True,
                          text=True, timeout=60)


def test_a_junit_xml_is_summed_by_work_unit_longest_first(tmp_path):
    (tmp_path / "j.xml").write_text(JUNIT)
    r = units(str(tmp_path / "j.xml"), "--modules", "--top", "1")
    assert r.returncode == 0, r.stderr
    lines = [line.split() for line in r.stdout.splitlines()]
    assert lines[0][:4] == ["4", "tests,", "24", "s"]
    assert lines[1] == ["15.0", "s", "2", "tests", "lab"]  # the session lab's two modules are one unit
    assert lines[2] == ["10.5", "s", "tests/lab/test_jobs_lab.py"] and lines[3] == ["4.5", "s", "tests/lab/test_deploy_lab.py"]
    assert lines[4] == ["7.0", "s", "1", "tests", "lab-own"]
    assert lines[5] == ["2.0", "s", "1", "tests", "tests/local/test_shell.py"]  # a class's name is not a module's
    assert lines[-1] == ["10.5", "s", "tests/lab/test_jobs_lab.py::test_a"]


def test_a_file_that_is_no_report_is_named_without_a_traceback(tmp_path):
    (tmp_path / "x.xml").write_text("not xml")
    for path in (tmp_path / "x.xml", tmp_path / "missing.xml"):
        r = units(str(path))
        assert r.returncode == 2 and str(path) in r.stderr and "Traceback" not in r.stderr, r.stderr
