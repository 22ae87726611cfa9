"""Helpers for the attention course: one concept per module.

- environment: ``setup()`` for the first cell of every lesson
- attention:   scaled dot-product attention, masks, multi-head attention
- exercises:   ``check``, ``hint``, ``show_solution``
- data:        where the lessons' small data files live
"""

from course_utils.environment import setup

__all__ = ["setup"]
