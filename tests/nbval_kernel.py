"""How nbval starts each notebook's kernel here: on Unix sockets, and again if it does not start.

nbval's kernels listen on TCP ports that jupyter_client finds by asking the system for free ones and
letting them go; until the kernel binds them, another process can take one (the other pytest worker's
kernel, or any outgoing connection: they draw from the same range of ports). A kernel that loses a port
dies or never answers, and every cell of its notebook errors: "Kernel didn't respond in 60 seconds" hit
all 48 cells of lesson 04 in one clean-clone CI run. Unix sockets, named for this kernel alone, cannot be
taken; a start that fails anyway is tried again, with a warning, as the grader does (course_utils/tools/grade.py).
"""

import functools
import itertools
import os
import tempfile
import warnings

import jupyter_client
import nbval.kernel

TRIES = 3
_nbval_start_new_kernel = nbval.kernel.start_new_kernel
_kernels = itertools.count()


@functools.cache
def _sockets_folder():
    """One folder per pytest process for its kernels' sockets, removed when the process ends."""
    return tempfile.TemporaryDirectory(prefix="nbval-kernels-", ignore_cleanup_errors=True)


class KernelOnUnixSockets(jupyter_client.KernelManager):
    """nbval's kernel manager, its socket files in a folder of this process (TCP where there are none)."""

    def __init__(self, **kwargs):
        if os.name == "posix":
            kwargs.update(transport="ipc", ip=os.path.join(_sockets_folder().name, f"kernel{next(_kernels)}"))
        super().__init__(**kwargs)


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


def install():
    nbval.kernel.KernelManager = KernelOnUnixSockets
    nbval.kernel.start_new_kernel = start_new_kernel
