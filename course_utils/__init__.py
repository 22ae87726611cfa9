"""Helpers for the attention course: one concept per module.

- environment:  ``setup()`` for the first cell of every lesson
- toy:          the toy sentence "Orange is my favorite fruit" and its attention weights
- softmax:      the numerically stable softmax (lesson 02)
- attention:    scaled dot-product attention, masks, multi-head attention (lessons 02-03)
- viz:          heatmaps, head, model and neuron views (lesson 04)
- transformer:  the encoder layer and stack (lesson 05); toy_task: its tiny training task
- pretrained:   MiniLM loaded into the course's own encoder (lesson 06); head_scores: head patterns
- efficient:    online softmax, tiled attention, KV cache, measuring helpers (lesson 07)
- modern:       grouped-query attention, RoPE, sliding windows, masks as functions (lesson 08)
- exercises:    ``check``, ``hint``, ``show_solution``
- data:         where the lessons' small data files live
- progress, grade, doctor, bootstrap: `make progress`, `make grade`, `make doctor`, `make install`'s checks
"""

__all__ = ["setup", "orange_attention"]


def __getattr__(name):
    # Imported on first use, so `import course_utils` stays light: `make doctor` and `make progress`
    # work without PyTorch, and a broken PyTorch install is reported instead of crashing the import.
    if name == "setup":
        from course_utils.environment import setup

        return setup
    if name == "orange_attention":
        from course_utils.toy import orange_attention

        return orange_attention
    raise AttributeError(f"module 'course_utils' has no attribute {name!r}")
