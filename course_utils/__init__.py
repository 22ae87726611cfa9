"""Helpers for the attention course: one concept per module.

- environment:  ``setup()`` for the first cell of every lesson
- toy:          the toy sentence "Orange is my favorite fruit" and its attention weights
- softmax:      the numerically stable softmax (lesson 02)
- attention:    scaled dot-product attention, masks, multi-head attention (lessons 02-03)
- viz:          heatmaps, head, model and neuron views (lesson 04): colour, inputs, figures, interactive, neuron
- transformer:  the encoder layer and stack (lesson 05); toy_task: its tiny training task
- training:     the training loop every trained model of the course uses (lessons 05-05d, 10-12)
- long_range:   DNA hairpins, a GRU against attention, accuracy by distance (lesson 05b)
- translation:  English->French phrases and an encoder-decoder with cross-attention (lesson 05c)
- vision:       images as patches, a tiny Vision Transformer and a small CNN (lesson 05d)
- pretrained:   MiniLM loaded into the course's own encoder (lesson 06); head_scores: what a head attends
                to, by numbers (most attended token, entropy: lesson 04; head patterns: lesson 06)
- ablation:     removing heads and measuring what changes (lesson 06b)
- efficient:    online softmax, tiled attention, KV cache, measuring helpers (lesson 07)
- modern:       grouped-query attention, RoPE, sliding windows, masks as functions (lesson 08)
- flash:        FlashAttention forward and backward, its autograd.Function, causal block skipping (lesson 09)
- flash_triton: the same in Triton kernels, compiled on a GPU or run by the interpreter on a CPU (lesson 09)
- stories:      the course's own story corpus, generated offline, and its exact entropy (lesson 10)
- language_model: a tiny decoder-only GPT, next-token loss, sampling, the KV cache, attention sinks (lesson 10)
- context_use:  does a trained model read its context: a name swapped, words said twice, a short window (lesson 10)
- induction:    induction heads: the attention-only model, induction scores, composition, path patching (lesson 11)
- linear_attention: linear attention's parallel and recurrent forms, the delta rule, decoding memory (lesson 12)
- recall:       multi-query associative recall and five one-layer models to compare on it (lesson 12)
- serving:      a paged KV cache, static and continuous batching, chunked prefill, prefix caching (lesson 13)
- long_context: RoPE scaling past the trained length: interpolation, NTK, dynamic NTK, YaRN, Llama 3 (lesson 14)
- exercises:    ``check``, ``hint(id, level)``, ``show_solution``; exercises.tamper_guard: the checks'
                comparison functions kept as they were, so replacing one cannot forge a pass
- data:         the lessons' small data files, and data_path(name) to find them
- _validate:    the reference functions' input checks (show_solution leaves them out)
- tools:        the command-line tools, not lessons: progress, grade, doctor, bootstrap (`make progress`,
                `make grade`, `make doctor`, `make install`'s checks)
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
