"""How the tests start notebook kernels: on Unix sockets, and (nbval's) again if one does not start.

A kernel listens on TCP ports that jupyter_client finds by asking the system for free ones and letting
them go; until the kernel binds them, another process can take one (the other pytest worker picking
ports for its kernel, the same way). A kernel that loses a port dies or never answers, and every cell of
its notebook errors: "Kernel didn't respond in 60 seconds" hit all 48 cells of lesson 04 in one
clean-clone CI run. Unix sockets, named for one kernel alone, cannot be taken. The grader does the same
(course_utils/tools/grade.py).
"""

import functools
import itertools
import os
import tempfile
import warnings

import jupyter_client
import nbval.kernel
from traitlets.config import Config

TRIES = 3
_nbval_start_new_kernel = nbval.kernel.start_new_kernel
_kernels = itertools.count()


@functools.cache
def _sockets_folder():
    """One folder per pytest process for its kernels' sockets, removed when the process ends."""
    return tempfile.TemporaryDirectory(prefix="kernels-", ignore_cleanup_errors=True)


def unix_sockets():
    """Settings of a kernel manager for sockets no other kernel uses ({} where there are no Unix sockets)."""
    if os.name != "posix":
        return {}
    return {"transport": "ipc", "ip": os.path.join(_sockets_folder().name, f"kernel{next(_kernels)}")}


def unix_sockets_config():
    """The same as traitlets config, for nbclient's NotebookClient and papermill (``config=``)."""
    return Config({"KernelManager": unix_sockets()})


class KernelOnUnixSockets(jupyter_client.KernelManager):
    """nbval's kernel manager, on Unix sockets of its own."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs, **unix_sockets())


def start_new_kernel(*args, **kwargs):
    """nbval's kernel start, tried up to TRIES times: a kernel that fails to start is the machine's problem."""
    for attempt in range(1, TRIES + 1):
        try:
            return _nbval_start_new_kernel(*args, **kwargs)  # it shuts a kernel that fails down itself
        except RuntimeError as failure:
            if attempt == TRIES:
                raise RuntimeError(
                    f"no kernel started in {TRIES} tries (last: {failure}): a problem of this machine, "
                    "not of the notebook"
                ) from failure
            why = f"a notebook's kernel did not start ({failure}); try {attempt + 1} of {TRIES}"
            warnings.warn(why, stacklevel=2)


def install_in_nbval():
    nbval.kernel.KernelManager = KernelOnUnixSockets
    nbval.kernel.start_new_kernel = start_new_kernel
