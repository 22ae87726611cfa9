"""The course's tools, run from the command line (the Makefile) rather than by the lessons.

- progress:  `make progress`, my exercises from my saved notebooks (standard library only)
- doctor:    `make doctor`, what is wrong with this machine for the course, and the fix for each
- grade:     `make grade`, run copies of learners' notebooks and check every exercise
- bootstrap: `make install`'s checks of the Python and .venv, run before .venv exists

Each is run as `python -m course_utils.tools.<name>`; bootstrap by its path, with the machine's Python.
"""
