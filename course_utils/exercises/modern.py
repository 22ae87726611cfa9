"""Lesson 08's exercises: repeat_kv, apply_rope, sliding_window_mask, grouped_query_attention
and a FlexAttention mask function for packed documents.

The solutions are the course's reference code in ``course_utils.modern``. The
expected answers come from independent oracles written here in a different way
(indexing with j // n_rep, rotating 2-D pairs explicitly, comparing i and j one
by one, F.scaled_dot_product_attention with enable_gqa), so a bug in the
reference cannot hide in the checker.

Each known mistake is recomputed on the same inputs and named when the learner's
output matches it.
"""

import torch
import torch.nn.functional as F

from course_utils import modern
from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    Mistake,
    NotAttempted,
    call,
    diagnose,
    expect_plain,
    expect_same_dtype,
    expect_tensor,
    generator,
    randn,
)

# Distinctive phrases, one per mistake (the tests look for them).
KV_TILED = "you tiled the heads"
KV_WRONG_DIM = "you repeated along the wrong axis"
KV_NOT_REPEATED = "the key/value heads were not repeated"
KV_NOT_RESHAPED = "you expanded but did not merge the two head axes"

ROPE_INTERLEAVED = "you rotated neighbouring pairs (2i, 2i+1)"
ROPE_POSITIONS_PLUS_ONE = "your positions are one too high"
ROPE_POSITIONS_MINUS_ONE = "your positions are one too low"
ROPE_IGNORED_POSITIONS = "you used 0..S-1 instead of the positions you were given"
ROPE_EXPONENT_I = "wrong frequency exponent: base^(-i/d)"
ROPE_EXPONENT_SIGN = "wrong frequency exponent: the minus sign is missing"
ROPE_IGNORED_BASE = "you ignored the base argument"
ROPE_DIRECTION = "you rotated the wrong way"
ROPE_LAYOUT_MIX = "you mixed the two layouts"

SW_WINDOW_PLUS_ONE = "your window is one too wide"
SW_WINDOW_MINUS_ONE = "your window is one too narrow"
SW_NOT_CAUSAL = "you forgot causality"
SW_TRANSPOSED = "your mask is transposed"
SW_INVERTED = "your mask marks the forbidden positions"
SW_NO_DIAGONAL = "the diagonal is missing"
SW_ONLY_CAUSAL = "there is no window"
SW_VALUES = "a mask holds only True/False or 1/0"

GQA_ROPE_ON_V = "you applied RoPE to the values too"
GQA_NO_ROPE = "you did not apply RoPE"
GQA_ROPE_Q_ONLY = "you applied RoPE to the queries only"
GQA_ROPE_K_ONLY = "you applied RoPE to the keys only"
GQA_TILED = "the query heads use the wrong key/value heads"
GQA_MASK_IGNORED = "the mask was ignored"
GQA_NO_SCALE = "you did not scale the scores by 1/sqrt(head_dim)"
GQA_POSITIONS_IGNORED = "you ignored the positions"

DOC_NOT_CAUSAL = "tokens see the future of their own document"
DOC_NO_DOCUMENTS = "tokens see other documents"
DOC_TRANSPOSED = "causality points the wrong way"
DOC_CONTROL_FLOW = "FlexAttention calls your mask_mod on tensors"
DOC_NOT_A_FUNCTION = "return a mask_mod function"


# --------------------------------------------------------------------------- repeat_kv


def _grouped(x, n_rep):
    """Oracle: query head j reads key/value head j // n_rep."""
    index = torch.arange(x.shape[1] * n_rep) // n_rep
    return x[:, index]


@exercise(
    "repeat_kv",
    solution=modern.repeat_kv,
    hints=[
        "Query head j uses key/value head j // n_rep: the n_rep copies of head 0 come first, then those of head 1.",
        "`x.repeat(1, n_rep, 1, 1)` tiles (0, 1, 0, 1); `x.repeat_interleave(n_rep, dim=1)` groups (0, 0, 1, 1).",
        "`return x.repeat_interleave(n_rep, dim=1)`",
    ],
)
def check_repeat_kv(candidate):
    g = generator(8)
    cases = [
        ("2 KV heads, n_rep 3: x [2, 2, 5, 4]", randn(g, 2, 2, 5, 4), 3),
        ("4 KV heads, n_rep 2: x [1, 4, 3, 8]", randn(g, 1, 4, 3, 8), 2),
        ("multi-query, 1 KV head, n_rep 4: x [2, 1, 6, 4]", randn(g, 2, 1, 6, 4), 4),
        ("n_rep 1 (plain multi-head): x [1, 3, 4, 2]", randn(g, 1, 3, 4, 2), 1),
    ]
    for description, x, n_rep in cases:
        expected = _grouped(x, n_rep)
        got = call(candidate, x, n_rep)
        if isinstance(got, torch.Tensor) and got.shape != expected.shape:
            b, h, s, d = x.shape
            if got.dim() == 5:
                raise Mistake(
                    f"{KV_NOT_RESHAPED}: you got shape {tuple(got.shape)}; reshape [B, H_kv, n_rep, S, d] to "
                    f"[B, H_kv * n_rep, S, d] ({description})."
                )
            if tuple(got.shape) == (b, h, s, d):
                raise Mistake(
                    f"{KV_NOT_REPEATED}: the result still has {h} heads, it needs {h * n_rep} ({description})."
                )
            wrong_axes = {0: "batch", 2: "sequence", 3: "feature"}
            for axis, name in wrong_axes.items():
                shape = list(x.shape)
                shape[axis] *= n_rep
                if list(got.shape) == shape:
                    raise Mistake(
                        f"{KV_WRONG_DIM}: you repeated the {name} axis (dim={axis}); the heads are dim=1 of "
                        f"[B, H_kv, S, d] ({description})."
                    )
        diagnose(
            got,
            expected,
            [
                (
                    f"{KV_TILED} (x.repeat gives heads 0, 1, 0, 1, ...): query head j must use key/value head "
                    f"j // n_rep, so the copies of one head sit together (0, 0, 1, 1): use repeat_interleave.",
                    x.repeat(1, n_rep, 1, 1),
                )
            ],
            atol=0,
            rtol=0,
            context=description,
        )


# --------------------------------------------------------------------------- apply_rope


def _rope_layout_mix(x, positions, base, pairs):
    """The pairing of one layout with the angles of the other (not a rotation at all).

    pairs="half": rotate_half's pairs (i, i + d/2) with the interleaved angles theta_0, theta_0,
    theta_1, theta_1, ...; pairs="interleaved": neighbours (2i, 2i+1) with cat(angles, angles)."""
    d = x.shape[-1]
    theta = base ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
    per_feature = theta.repeat_interleave(2) if pairs == "half" else torch.cat((theta, theta))
    angle = positions.double()[:, None] * per_feature  # [S, d], one angle per feature
    xd = x.double()
    if pairs == "half":
        x1, x2 = xd.chunk(2, dim=-1)
        partner = torch.cat((-x2, x1), dim=-1)
    else:
        partner = torch.stack((-xd[..., 1::2], xd[..., 0::2]), dim=-1).flatten(-2)
    return (xd * angle.cos() + partner * angle.sin()).to(x.dtype)


def _rope_oracle(x, positions, base=10000.0, *, pairs="half", shift=0, exponent="right", sign=1):
    """RoPE by rotating explicit 2-D pairs; the keyword arguments plant the mistakes."""
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64)
    exponents = {"right": -2 * i / d, "i/d": -i / d, "positive": 2 * i / d}[exponent]
    theta = base**exponents
    angle = sign * (positions.double() + shift)[:, None] * theta  # [S, d/2]
    cos, sin = angle.cos(), angle.sin()
    if pairs == "half":
        first, second = list(range(d // 2)), list(range(d // 2, d))
    else:  # the paper's neighbours
        first, second = list(range(0, d, 2)), list(range(1, d, 2))
    a, b = x.double()[..., first], x.double()[..., second]
    out = torch.empty_like(x, dtype=torch.float64)
    out[..., first] = a * cos - b * sin
    out[..., second] = a * sin + b * cos
    return out.to(x.dtype)


def _rope_cases():
    g = generator(9)
    return [
        ("x [6, 8] at positions 0..5", randn(g, 6, 8), torch.arange(6), None),
        ("x [2, 3, 5, 16] at positions [0, 1, 2, 7, 20]", randn(g, 2, 3, 5, 16), torch.tensor([0, 1, 2, 7, 20]), None),
        ("x [4, 32] at positions [100, 101, 102, 103]", randn(g, 4, 32), torch.arange(100, 104), None),
        ("x [1, 5, 8] with base=500000", randn(g, 1, 5, 8), torch.tensor([3, 1, 4, 1, 5]), 500000.0),
        (
            "float64 x [2, 4, 16] at positions [0, 5, 9, 300]",
            randn(g, 2, 4, 16).double(),
            torch.tensor([0, 5, 9, 300]),
            None,
        ),
        ("float16 x [3, 8] at positions 0..2", randn(g, 3, 8).half(), torch.arange(3), None),
        (
            "bfloat16 x [2, 3, 16] at positions [4, 8, 15]",
            randn(g, 2, 3, 16).bfloat16(),
            torch.tensor([4, 8, 15]),
            None,
        ),
    ]


# (atol, rtol) by dtype: the course's reference rounds cos and sin to x's dtype, as LLaMA does
_ROPE_TOLERANCE = {torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 2e-2)}


@exercise(
    "apply_rope",
    solution=modern.apply_rope,
    hints=[
        "theta_i = base ** (-2 * i / d) for i = 0 .. d/2 - 1, i.e. `base ** (-torch.arange(0, d, 2) / d)`; "
        "the angle of pair i at position m is m * theta_i.",
        "In this (LLaMA) layout feature i is paired with feature i + d/2. Make the angles [S, d/2], then "
        "`torch.cat((angles, angles), dim=-1)` so both halves of a pair share one angle.",
        "`rotate_half(x)` = cat(-x2, x1) with x1, x2 = the two halves of x; "
        "`return x * angles.cos() + rotate_half(x) * angles.sin()`.",
    ],
)
def check_apply_rope(candidate):
    for description, x, positions, base in _rope_cases():
        args = (x, positions) if base is None else (x, positions, base)
        base = 10000.0 if base is None else base
        got = call(candidate, *args)
        expected = _rope_oracle(x, positions, base)
        case = f"(case: {description})"
        mistakes = [
            (
                f"{ROPE_INTERLEAVED}, as in the RoFormer paper; here use LLaMA's layout, which pairs feature i "
                f"with feature i + d/2 (rotate_half). {case}",
                _rope_oracle(x, positions, base, pairs="interleaved"),
            ),
            (
                f"{ROPE_LAYOUT_MIX}: you pair feature i with feature i + d/2 (rotate_half, LLaMA's layout) but "
                f"gave the features the interleaved angles theta_0, theta_0, theta_1, theta_1, ... (the paper's "
                f"layout), so the two features of a pair turn by different angles. In this layout the angles are "
                f"`torch.cat((angles, angles), dim=-1)`, not `angles.repeat_interleave(2, dim=-1)`. {case}",
                _rope_layout_mix(x, positions, base, "half"),
            ),
            (
                f"{ROPE_LAYOUT_MIX}: you rotate neighbouring pairs (2i, 2i+1), the paper's layout, but with the "
                f"angles of LLaMA's layout, cat(angles, angles). Use LLaMA's layout throughout: pair feature i with "
                f"feature i + d/2 (rotate_half) and give both the angle of pair i. {case}",
                _rope_layout_mix(x, positions, base, "interleaved"),
            ),
            (
                f"{ROPE_DIRECTION} (by minus the angle): it is x * cos + rotate_half(x) * sin, with a plus, and "
                f"rotate_half(x) = cat(-x2, x1), the second half negated first. {case}",
                _rope_oracle(x, positions, base, sign=-1),
            ),
            (
                f"{ROPE_POSITIONS_PLUS_ONE}: the first token of a text is at position 0. {case}",
                _rope_oracle(x, positions, base, shift=1),
            ),
            (
                f"{ROPE_POSITIONS_MINUS_ONE}: use the positions as given. {case}",
                _rope_oracle(x, positions, base, shift=-1),
            ),
            (
                f"{ROPE_EXPONENT_I} with i = 0..d/2-1; it is base^(-2i/d), so the slowest pair turns at "
                f"about 1/base radians per position. {case}",
                _rope_oracle(x, positions, base, exponent="i/d"),
            ),
            (
                f"{ROPE_EXPONENT_SIGN}: theta_i = base^(-2i/d) gets smaller with i (slow rotations for the later "
                f"pairs). {case}",
                _rope_oracle(x, positions, base, exponent="positive"),
            ),
        ]
        if not torch.equal(positions, torch.arange(len(positions))):
            mistakes.append(
                (
                    f"{ROPE_IGNORED_POSITIONS} (a token's position is not always its index, e.g. after a prompt "
                    f"already in the KV cache). {case}",
                    _rope_oracle(x, torch.arange(len(positions)), base),
                )
            )
        if base != 10000.0:
            mistakes.append(
                (
                    f"{ROPE_IGNORED_BASE} (Llama 3 uses 500000): theta_i = base^(-2i/d). {case}",
                    _rope_oracle(x, positions, 10000.0),
                )
            )
        expect_same_dtype(got, x.dtype, "result", description, _ROPE_DTYPE_ADVICE)
        atol, rtol = _ROPE_TOLERANCE.get(x.dtype, (1e-4, 1e-4))
        diagnose(got, expected, mistakes, atol=atol, rtol=rtol, context=description)


_ROPE_DTYPE_ADVICE = (
    "The angles are float32 (or float64): x * angles.cos() promotes x to their dtype. Cast cos and sin to x's "
    "dtype first, `cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)`."
)


# --------------------------------------------------------------------------- sliding_window_mask


def _window_oracle(seq_len, window, *, causal=True, offset=0):
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for i in range(seq_len):
        for j in range(seq_len):
            near = abs(i - j) < window + offset
            mask[i, j] = near and (j <= i or not causal)
    return mask


@exercise(
    "sliding_window_mask",
    solution=modern.sliding_window_mask,
    hints=[
        "Query i may attend key j when j <= i (causal) and i - j < window: itself and the window - 1 keys before it.",
        "Make a column of query indices and a row of key indices: `i = torch.arange(n)[:, None]`, "
        "`j = torch.arange(n)[None, :]`; comparisons then broadcast to [n, n].",
        "`return (j <= i) & (i - j < window)`",
    ],
)
def check_sliding_window_mask(candidate):
    for seq_len, window in ((8, 3), (6, 1), (7, 7), (5, 9), (12, 4)):
        description = f"seq_len={seq_len}, window={window}"
        got = call(candidate, seq_len, window)
        expect_tensor(got, (seq_len, seq_len), what=f"mask for {description}")
        expect_plain(got, torch.device("cpu"), f"mask for {description}")
        if got.dtype != torch.bool:
            if got.is_floating_point() and torch.isinf(got).any():
                raise Mistake(
                    f"{SW_VALUES}: this looks like an additive 0/-inf mask; return True where i may attend j."
                )
            if not ((got == 0) | (got == 1)).all():
                raise Mistake(f"{SW_VALUES}, 1/True where query i may attend key j; you returned other values.")
            got = got != 0
        expected = _window_oracle(seq_len, window)
        mistakes = [
            (
                f"{SW_WINDOW_PLUS_ONE}: a query sees itself and window - 1 earlier keys, so i - j < window (not <=).",
                _window_oracle(seq_len, window, offset=1),
            ),
            (
                f"{SW_WINDOW_MINUS_ONE}: a query sees window keys in all, itself included: i - j < window.",
                _window_oracle(seq_len, window, offset=-1),
            ),
            (
                f"{SW_NOT_CAUSAL}: a decoder must not see keys after the query (j <= i), only the window before it.",
                _window_oracle(seq_len, window, causal=False),
            ),
            (
                f"{SW_TRANSPOSED}: rows are queries i, columns keys j; query i sees the keys before it (j <= i).",
                expected.T,
            ),
            (f"{SW_INVERTED}: True means 'may attend'.", ~expected),
            (
                f"{SW_NO_DIAGONAL}: every query may attend to itself (i - j = 0 < window).",
                expected & ~torch.eye(seq_len, dtype=torch.bool),
            ),
            (
                f"{SW_ONLY_CAUSAL}: that is the plain causal mask; also require i - j < window.",
                torch.ones(seq_len, seq_len, dtype=torch.bool).tril(),
            ),
        ]
        if torch.equal(got, expected):
            continue
        for message, wrong in mistakes:
            if torch.equal(got, wrong):
                raise Mistake(f"{message} ({description})")
        wrong_pairs = (got != expected).nonzero().tolist()[:4]
        raise Mistake(
            f"the mask is not right for {description}: e.g. (query, key) {wrong_pairs} differ.\n"
            f"expected:\n{expected.int()}\ngot:\n{got.int()}"
        )


# --------------------------------------------------------------------------- grouped_query_attention


def _gqa_variant(q, k, v, positions, mask, *, rope="qk", group=True, scale=True):
    """Attention as one (possibly wrong) GQA computes it; the oracle is F.scaled_dot_product_attention."""
    if "q" in rope:
        q = _rope_oracle(q, positions)
    if "k" in rope:
        k = _rope_oracle(k, positions)
    if "v" in rope:
        v = _rope_oracle(v, positions)
    n_rep = q.shape[1] // k.shape[1]
    if group:
        k, v = _grouped(k, n_rep), _grouped(v, n_rep)
    else:
        k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=None if scale else 1.0)


def _gqa_cases():
    g = generator(10)
    s = 6
    positions = torch.tensor([0, 1, 2, 5, 6, 9])  # with a gap, so "0..S-1" is a different answer
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    return [
        (
            "4 query heads, 2 KV heads, causal",
            randn(g, 2, 4, s, 8),
            randn(g, 2, 2, s, 8),
            randn(g, 2, 2, s, 8),
            positions,
            causal,
        ),
        (
            "6 query heads, 3 KV heads, no mask",
            randn(g, 1, 6, s, 4),
            randn(g, 1, 3, s, 4),
            randn(g, 1, 3, s, 4),
            positions,
            None,
        ),
        (
            "4 query heads, 1 KV head (MQA), causal",
            randn(g, 1, 4, s, 8),
            randn(g, 1, 1, s, 8),
            randn(g, 1, 1, s, 8),
            torch.arange(s),
            causal,
        ),
        (
            "float64, 4 query heads, 2 KV heads, causal",
            randn(g, 1, 4, s, 8).double(),
            randn(g, 1, 2, s, 8).double(),
            randn(g, 1, 2, s, 8).double(),
            positions,
            causal,
        ),
        (
            "bfloat16, 4 query heads, 2 KV heads, no mask",
            randn(g, 1, 4, s, 8).bfloat16(),
            randn(g, 1, 2, s, 8).bfloat16(),
            randn(g, 1, 2, s, 8).bfloat16(),
            positions,
            None,
        ),
    ]


@exercise(
    "grouped_query_attention",
    solution=modern.grouped_query_attention,
    hints=[
        "Three steps: rotate q and k with apply_rope at the given positions (values carry content, not position, "
        "so they are not rotated); repeat k and v with repeat_kv so every query head has its KV head; attend.",
        "n_rep = q.shape[1] // k.shape[1]; then lesson 02's scaled_dot_product_attention(q, k, v, mask) "
        "returns (output, weights): return the output.",
        "`q, k = apply_rope(q, positions), apply_rope(k, positions)`; "
        "`k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)`; `return scaled_dot_product_attention(q, k, v, mask)[0]`",
    ],
)
def check_grouped_query_attention(candidate):
    for description, q, k, v, positions, mask in _gqa_cases():
        got = call(candidate, q, k, v, positions, mask)
        expected = _gqa_variant(q, k, v, positions, mask)
        mistakes = [
            (
                f"{GQA_ROPE_ON_V}: rotate only q and k. The score q_m . k_n is what needs the positions; the values are what gets mixed.",
                _gqa_variant(q, k, v, positions, mask, rope="qkv"),
            ),
            (
                f"{GQA_NO_ROPE}: rotate q and k with apply_rope(..., positions) before the scores.",
                _gqa_variant(q, k, v, positions, mask, rope=""),
            ),
            (
                f"{GQA_ROPE_Q_ONLY}: rotate the keys as well, so the score depends on the offset m - n.",
                _gqa_variant(q, k, v, positions, mask, rope="q"),
            ),
            (
                f"{GQA_ROPE_K_ONLY}: rotate the queries as well, so the score depends on the offset m - n.",
                _gqa_variant(q, k, v, positions, mask, rope="k"),
            ),
            (
                f"{GQA_TILED}: query head j must use KV head j // n_rep (repeat_interleave / repeat_kv), not j % H_kv (repeat).",
                _gqa_variant(q, k, v, positions, mask, group=False),
            ),
            (f"{GQA_NO_SCALE} before the softmax.", _gqa_variant(q, k, v, positions, mask, scale=False)),
        ]
        if mask is not None:
            mistakes.append(
                (
                    f"{GQA_MASK_IGNORED}: pass it on to the attention (True = may attend).",
                    _gqa_variant(q, k, v, positions, None),
                )
            )
        if not torch.equal(positions, torch.arange(len(positions))):
            mistakes.append(
                (
                    f"{GQA_POSITIONS_IGNORED} and rotated at 0..S-1: use the positions argument.",
                    _gqa_variant(q, k, v, torch.arange(len(positions)), mask),
                )
            )
        expect_same_dtype(got, q.dtype, "output", description)
        atol, rtol = (5e-2, 2e-2) if q.dtype == torch.bfloat16 else (1e-5, 1e-4)
        diagnose(got, expected, mistakes, atol=atol, rtol=rtol, context=description)


# --------------------------------------------------------------------------- a FlexAttention mask_mod


def _doc_cases():
    return [
        ("documents [0, 0, 0, 1, 1, 2, 2, 2]", torch.tensor([0, 0, 0, 1, 1, 2, 2, 2])),
        ("one document of 5 tokens", torch.zeros(5, dtype=torch.long)),
        ("documents [3, 3, 7, 7, 7, 7, 1]", torch.tensor([3, 3, 7, 7, 7, 7, 1])),
    ]


def _mask_of(mask_mod, n):
    from torch.nn.attention.flex_attention import create_mask

    return create_mask(mask_mod, None, None, n, n, device="cpu")[0, 0]


@exercise(
    "document_mask_mod",
    solution=modern.document_mod,
    hints=[
        "The mask_mod answers for one (query, key) pair: may q_idx attend kv_idx? Two conditions: the same "
        "document, and not in the future.",
        "`document_ids[q_idx] == document_ids[kv_idx]` and `q_idx >= kv_idx`; FlexAttention passes tensors, "
        "so combine them with `&`, not `and`.",
        "`def mask_mod(b, h, q_idx, kv_idx): return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)`;"
        " then `return mask_mod`.",
    ],
)
def check_document_mask_mod(candidate):
    for description, docs in _doc_cases():
        mask_mod = call(candidate, docs)
        if not callable(mask_mod):
            raise Mistake(f"{DOC_NOT_A_FUNCTION} (b, h, q_idx, kv_idx) -> bool, not {type(mask_mod).__name__}.")
        try:
            got = _mask_of(mask_mod, len(docs))
        except NotImplementedError:
            raise NotAttempted() from None
        except RuntimeError as e:
            if "data-dependent control flow" in str(e) or "Boolean value of Tensor" in str(e):
                raise Mistake(
                    f"{DOC_CONTROL_FLOW} (all pairs at once, through vmap): `and`, `or`, `not` and `if` need a "
                    f"single True/False. Use `&`, `|`, `~` (and torch.where)."
                ) from None
            raise Mistake(f"your mask_mod raised {type(e).__name__}: {e}") from None
        n = len(docs)
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        same = docs[:, None] == docs[None, :]
        expected = same & (j <= i)
        if torch.equal(got, expected):
            continue
        for message, wrong in (
            (f"{DOC_NOT_CAUSAL}: add q_idx >= kv_idx (the decoder must not look ahead).", same),
            (
                f"{DOC_NO_DOCUMENTS}: packed documents are unrelated; require document_ids[q_idx] == document_ids[kv_idx].",
                j <= i,
            ),
            (f"{DOC_TRANSPOSED}: a query q_idx may attend the keys kv_idx <= q_idx.", same & (j >= i)),
        ):
            if torch.equal(got, wrong):
                raise Mistake(f"{message} ({description})")
        raise Mistake(f"the mask is not right for {description}.\nexpected:\n{expected.int()}\ngot:\n{got.int()}")
