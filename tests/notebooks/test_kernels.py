"""Notebook kernels start on Unix sockets; nbval's again when a start fails (tests/kernels.py)."""

import os
import subprocess
import sys

import nbformat
import pytest

from tests import kernels
from tests.notebook_tools import ROOT

# the kernel says which transport it listens on; stored as Run All printed it here
TRANSPORT = "from ipykernel.kernelapp import IPKernelApp\nprint(IPKernelApp.instance().transport)"


def _nbval(folder, *plugin):
    command = [sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "-q", "--nbval"]
    done = subprocess.run(
        [*command, "--nbval-current-env", str(folder)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.skipif(os.name != "posix", reason="Unix sockets: on other systems the kernels keep TCP")
def test_notebook_kernels_listen_on_unix_sockets(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells.append(
        nbformat.v4.new_code_cell(
            TRANSPORT, outputs=[nbformat.v4.new_output("stream", name="stdout", text="ipc\n")], execution_count=1
        )
    )
    nbformat.write(nb, tmp_path / "transport.ipynb")
    returncode, report = _nbval(tmp_path, "-p", "conftest")  # the repository's conftest: the notebook lies outside
    assert returncode == 0, report
    # the control: nbval's own kernels listen on TCP, so the same stored output fails without the conftest
    returncode, report = _nbval(tmp_path)
    assert returncode == 1 and "tcp" in report, report


def test_a_kernel_that_fails_to_start_is_started_again(monkeypatch):
    calls = []

    def fails_once(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise RuntimeError("Kernel didn't respond in 60 seconds")
        return "manager", "client"

    monkeypatch.setattr(kernels, "_nbval_start_new_kernel", fails_once)
    with pytest.warns(UserWarning, match=r"did not start \(Kernel didn't respond in 60 seconds\); try 2 of 3"):
        started = kernels.start_new_kernel(startup_timeout=60, kernel_name="k", cwd="here")
    assert started == ("manager", "client")
    assert calls == [{"startup_timeout": 60, "kernel_name": "k", "cwd": "here"}] * 2


def test_a_kernel_that_never_starts_is_the_machines_problem(monkeypatch):
    calls = []

    def never_starts(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("Kernel died before replying to kernel_info")

    monkeypatch.setattr(kernels, "_nbval_start_new_kernel", never_starts)
    with pytest.warns(UserWarning), pytest.raises(RuntimeError) as failure:
        kernels.start_new_kernel(kernel_name="k")
    assert len(calls) == kernels.TRIES == 3
    assert "no kernel started in 3 tries" in str(failure.value)
    assert "not of the notebook" in str(failure.value)
    assert "Kernel died before replying to kernel_info" in str(failure.value)


@pytest.mark.skipif(os.name != "posix", reason="Unix sockets: on other systems the kernels keep TCP")
def test_each_kernel_has_sockets_of_its_own():
    first, second = kernels.KernelOnUnixSockets(), kernels.KernelOnUnixSockets()
    assert first.transport == second.transport == "ipc"
    assert first.ip != second.ip
    assert os.path.dirname(first.ip) == os.path.dirname(second.ip)


@pytest.mark.skipif(os.name != "posix", reason="Unix sockets: on other systems the kernels keep TCP")
@pytest.mark.parametrize("runner", ["nbclient", "papermill"])
def test_kernels_the_tests_start_themselves_listen_on_unix_sockets(runner, tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(TRANSPORT)])
    if runner == "nbclient":
        from nbclient import NotebookClient

        NotebookClient(nb, kernel_name="python3", config=kernels.unix_sockets_config()).execute()
    else:
        import papermill

        nbformat.write(nb, tmp_path / "in.ipynb")
        papermill.execute_notebook(
            str(tmp_path / "in.ipynb"),
            str(tmp_path / "out.ipynb"),
            kernel_name="python3",
            progress_bar=False,
            config=kernels.unix_sockets_config(),
        )
        nb = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert nb.cells[0].outputs[0]["text"] == "ipc\n"
