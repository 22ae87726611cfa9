"""`make grade` starts a kernel per notebook: kernels started at the same moment never fail a correct
notebook, and a kernel that does not start is the grading machine's fault, never the learner's."""

import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from jupyter_client.provisioning.local_provisioner import LocalPortCache
from nbclient import NotebookClient

from course_utils.tools.grade import KERNEL_TRIES, grade_notebook, markdown
from tests.tools.learner_notebooks import RIGHT, lesson, save


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.skipif(os.name != "posix", reason="on Windows the kernels use TCP ports: a collision is retried")
def test_four_kernels_started_at_once_grade_every_correct_notebook(tmp_path, monkeypatch):
    """Four notebooks graded at the same moment, and every kernel handed the same five TCP ports: the
    worst case of kernels choosing their ports at once (one binds them, the others die as they start)."""
    ports, chosen = _free_ports(5), threading.local()

    def the_same_ports(self, ip):  # each grading runs in its own thread: its kernel gets ports[0..4]
        chosen.count = getattr(chosen, "count", 0) + 1
        return ports[(chosen.count - 1) % 5]

    monkeypatch.setattr(LocalPortCache, "find_available_port", the_same_ports)
    paths = []
    for learner in range(4):
        save(tmp_path / f"learner{learner}", "01_right.ipynb", lesson(RIGHT))
        paths.append(tmp_path / f"learner{learner}" / "01_right.ipynb")
    with ThreadPoolExecutor(len(paths)) as pool:
        reports = list(pool.map(grade_notebook, paths))
    assert [(r["result"], r["exercises"]["causal_mask"]["status"]) for r in reports] == [("ran", "passed")] * 4, [
        r["error"] for r in reports
    ]


def test_a_kernel_that_dies_as_it_starts_is_replaced(tmp_path, monkeypatch):
    started, start = [], NotebookClient.start_new_kernel

    def start_and_kill_the_first(self, **kwargs):
        start(self, **kwargs)
        started.append(self.km)
        if len(started) == 1:  # dead before its first reply, as a kernel whose port was taken
            self.km.provisioner.process.kill()

    monkeypatch.setattr(NotebookClient, "start_new_kernel", start_and_kill_the_first)
    save(tmp_path, "01_right.ipynb", lesson(RIGHT))
    report = grade_notebook(tmp_path / "01_right.ipynb")
    assert len(started) == 2 and started[0] is not started[1]
    assert report["result"] == "ran" and report["exercises"]["causal_mask"]["status"] == "passed", report


def test_a_kernel_that_never_starts_is_not_the_learners_failure(tmp_path, monkeypatch, capsys):
    tries = []

    def never_starts(self, **kwargs):
        tries.append(1)
        raise RuntimeError("Kernel died before replying to kernel_info")

    monkeypatch.setattr(NotebookClient, "start_new_kernel", never_starts)
    save(tmp_path, "01_right.ipynb", lesson(RIGHT))
    report = grade_notebook(tmp_path / "01_right.ipynb")
    assert len(tries) == KERNEL_TRIES == 3
    assert report["result"] == "kernel failed to start"
    assert "a problem of the grading machine, not of the notebook" in report["error"]
    assert "Kernel died before replying to kernel_info" in report["error"]
    assert report["exercises"]["causal_mask"]["status"] == "not graded"
    assert "**kernel failed to start**" in markdown([report])
    assert capsys.readouterr().out.count("the kernel did not start (try") == 3
