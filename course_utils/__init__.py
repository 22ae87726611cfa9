"""Helpers for the attention course: one concept per module.

- environment: ``setup()`` for the first cell of every lesson
- attention:   scaled dot-product attention, masks, multi-head attention
- exercises:   ``check``, ``hint``, ``show_solution``
- data:        where the lessons' small data files live
- toy:         the toy sentence "Orange is my favorite fruit" and its attention weights
"""

from course_utils.environment import setup
from course_utils.toy import orange_attention

__all__ = ["setup", "orange_attention"]
