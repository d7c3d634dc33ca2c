"""Shell jobs of this kernel.

The host starts jobs (``job_run`` frames) and stops them (``job_kill``); each runs
``/bin/sh -c command`` in its own process group and its output goes to the host as raw
bytes. From a cell, :func:`running` shows which jobs are alive.
"""

import kennel


def running():
    """Return {job id: pid} of the jobs that have started and not yet ended."""
    return kennel._runtime().jobs.running()
