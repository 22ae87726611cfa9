"""Input checks of the course's reference functions, in one place.

Each check raises a clear error that says what was expected (and, for the usual slips, how
to fix them); none changes its inputs (a few return a size as a plain int). A reference
function calls its checks first, as ``_validate.<check>(...)`` statements at the top of its
body, so the rest reads like the lesson: ``show_solution`` leaves those statements out and
prints the algorithm a learner writes.
"""

import math
import numbers
import operator

import torch

# ---------------------------------------------------------------- sizes, q/k/v, masks, multi-head attention
# (course_utils.attention; positive_int serves every module)


def whole_number(value):
    """value as a Python int if it is one (numpy integers and 0-d integer tensors too), else None."""
    # operator.index accepts int, np.int64, a 0-d integer tensor ...; it refuses 2.0 and "2".
    # bool is an int in Python (True == 1), but as a count or an index it is always a slip.
    try:
        return None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        return None


def positive_int(value, name):
    """``value`` as a Python int if it is a whole number >= 1 (numpy integers too), else a clear error."""
    number = whole_number(value)
    if number is None or number < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    return number


def not_a_tensor(name, x):
    """The fix for the usual non-tensors: numpy arrays (float64) and nested lists."""
    if type(x).__module__ == "numpy":
        fix = f"torch.from_numpy({name}).float() (numpy gives float64; the course works in float32)"
    else:
        fix = f"torch.tensor({name}, dtype=torch.float32)"
    return TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}: convert it with {fix}")


def qkv(q, k, v):
    """Tensors [..., L, features] of one floating dtype and device, d_k and L_k matching, batch dims broadcasting."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise not_a_tensor(name, t)
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape [..., seq_len, features], got {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor (e.g. float32), got {t.dtype}: use {name}.float()")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}: convert them with "
            f".float() (torch.from_numpy gives float64)"
        )
    if not q.device == k.device == v.device:
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device} and {v.device}: move them with .to(device)"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same feature size d_k to take dot products: "
            f"q is {tuple(q.shape)}, k is {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of positions (one value per key): "
            f"k is {tuple(k.shape)}, v is {tuple(v.shape)}"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch, head) dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} "
            f"and v {tuple(v.shape)} do not broadcast: they must be equal (or 1)"
        ) from None


def zero_one(mask, name, meaning):
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of 0/1 or bool, got {type(mask).__name__}: {meaning}")
    if mask.dtype != torch.bool and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{name} must hold only 0/1 (or False/True): {meaning}")


def batch_first_advice(mask, scores_shape):
    """Why a mask whose first dim is the batch size did not fit, and what does."""
    batch, n = scores_shape[0], len(scores_shape)
    if n < 3 or batch == 1 or mask.dim() >= n or mask.shape[0] != batch:
        return ""
    advice = f". Its first dim looks like the batch size {batch}, but a mask lines up with the scores from the right"
    if n <= 4:
        axes = ["batch", "heads", "L_q", "L_k"] if n == 4 else ["batch", "L_q", "L_k"]
        advice += f": a {mask.dim()}-D mask is read as [{', '.join(axes[-mask.dim() :])}]"
    singletons = ", ".join(["None"] * (n - mask.dim()))
    advice += f". Keep the batch first with one singleton dim per missing axis: mask[:, {singletons}]"
    if mask.dim() == 2:
        advice += " (padding_mask() returns [batch, 1, 1, L_k]), or pass the [batch, L_k] mask as key_padding_mask=mask"
    return advice


def mask_fits(mask, scores_shape, device):
    zero_one(mask, "mask", "1 = may attend, 0 = may not")
    try:
        # the mask may broadcast *to* the scores' shape, never enlarge it
        # (a [B, 1, 1, L] padding mask on 3-D scores would silently give [B, B, L, L])
        fits = torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(scores_shape)} ([..., L_q, L_k]); 1/True marks allowed positions"
            + batch_first_advice(mask, scores_shape)
        )
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device} but q, k, v are on {device}: use mask.to(q.device)")


def key_padding_mask_fits(key_padding_mask, scores_shape, device):
    zero_one(key_padding_mask, "key_padding_mask", "1 = a real token that may be attended, 0 = padding")
    if len(scores_shape) < 3:
        raise ValueError(
            "key_padding_mask needs batched inputs q [batch, ..., L_q, d_k]; "
            "for one unbatched sequence pass its [L_k] mask as mask="
        )
    expected = (scores_shape[0], scores_shape[-1])
    if tuple(key_padding_mask.shape) != expected:
        raise ValueError(
            f"key_padding_mask must have shape [batch, L_k] = [{expected[0]}, {expected[1]}], "
            f"got {tuple(key_padding_mask.shape)}"
        )
    if key_padding_mask.device != device:
        raise ValueError(f"key_padding_mask is on {key_padding_mask.device} but q, k, v are on {device}")


def attention_masks(mask, key_padding_mask, q, k):
    """Both masks of scaled_dot_product_attention fit the scores q k^T [..., L_q, L_k] (either may be None)."""
    scores_shape = torch.Size((*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2]))
    if mask is not None:
        mask_fits(mask, scores_shape, q.device)
    if key_padding_mask is not None:
        key_padding_mask_fits(key_padding_mask, scores_shape, q.device)


def describe(x):
    """What a shape check got instead of a tensor, in words a learner can act on."""
    if isinstance(x, torch.Tensor):
        return f"shape {tuple(x.shape)}"
    if isinstance(x, tuple):
        # the usual slip: scaled_dot_product_attention returns the pair (output, weights)
        return "a tuple: scaled_dot_product_attention returns (output, weights); pass on the output only"
    return type(x).__name__


def split_heads_inputs(x, num_heads):
    """num_heads as an int, if x is [batch, seq_len, d_model] and d_model splits into num_heads heads."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"split_heads expects a [batch, seq_len, d_model] tensor, got {describe(x)}")
    num_heads = positive_int(num_heads, "num_heads")
    d_model = x.shape[-1]
    if d_model % num_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    return num_heads


def combine_heads_input(x):
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"combine_heads expects a [batch, heads, seq_len, head_dim] tensor, got {describe(x)}")


def mha_sizes(d_model, num_heads):
    """(d_model, num_heads) as ints, if every head gets the same number of features."""
    d_model, num_heads = positive_int(d_model, "d_model"), positive_int(num_heads, "num_heads")
    if d_model % num_heads != 0:
        raise ValueError(
            f"d_model={d_model} must be divisible by num_heads={num_heads} "
            f"so every head gets d_model // num_heads features"
        )
    return d_model, num_heads


def mha_inputs(mha, query, key, value):
    """query, key, value must fit the layer: [batch, length, d_model], the weights' dtype and device."""
    weight = mha.query_linear.weight
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise not_a_tensor(name, t)
        if t.dim() != 3 or t.shape[-1] != mha.d_model:
            raise ValueError(f"{name} must have shape [batch, seq_len, d_model={mha.d_model}], got {tuple(t.shape)}")
        if t.dtype != weight.dtype:
            raise TypeError(
                f"{name} is {t.dtype} but the layer's weights are {weight.dtype}: use {name}.to({weight.dtype}) "
                f"(torch.from_numpy gives float64), or convert the layer to match"
            )
        if t.device != weight.device:
            raise ValueError(f"{name} is on {t.device} but the layer is on {weight.device}: use {name}.to(device)")
    if not query.shape[0] == key.shape[0] == value.shape[0]:
        raise ValueError(
            f"query, key and value must have the same batch size, got "
            f"{query.shape[0]}, {key.shape[0]} and {value.shape[0]}"
        )
    if key.shape[1] != value.shape[1]:
        raise ValueError(
            f"key and value must have the same length L_k (one value per key), got "
            f"key {tuple(key.shape)} and value {tuple(value.shape)}"
        )


# ---------------------------------------------------------------- softmax (course_utils.softmax)


def softmax_input(x):
    if not isinstance(x, torch.Tensor):
        fix = "torch.from_numpy(x).float()" if type(x).__module__ == "numpy" else "torch.tensor(x, dtype=torch.float32)"
        raise TypeError(f"softmax needs a floating-point tensor (e.g. float32), got {type(x).__name__}: use {fix}")
    if not x.is_floating_point():
        raise TypeError(f"softmax needs a floating-point tensor (e.g. float32), got {x.dtype}: use x.float()")


# ---------------------------------------------------------------- online softmax, tiled attention (course_utils.efficient)


def online_softmax_input(x):
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 1 or x.shape[-1] == 0:
        what = f"a {x.dtype} tensor of shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be a non-empty floating-point tensor [..., n], got {what}")


def tiled_inputs(q, k, v, causal):
    qkv(q, k, v)  # tensors of one dtype and device, matching sizes, batch dims that broadcast
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        raise ValueError(f"q and k need at least one position, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if causal and q.shape[-2] > k.shape[-2]:
        raise ValueError(
            f"causal=True needs L_q <= L_k (the queries are the last L_q positions), "
            f"got L_q={q.shape[-2]}, L_k={k.shape[-2]}"
        )


# ---------------------------------------------------------------- FlashAttention (course_utils.flash)


def score_blocks(blocks):
    if len(blocks) == 0:
        raise ValueError("score_blocks must hold at least one block of scores [..., L_q, B_k]")


def block_statistics(q_i, lse_i, d_i):
    """lse_i and d_i hold one number per query of q_i (a wrong shape would broadcast silently)."""
    if lse_i.shape != q_i.shape[:-1] or d_i.shape != q_i.shape[:-1]:
        raise ValueError(
            f"lse_i and d_i must have shape {tuple(q_i.shape[:-1])}, one number per query of q_i, "
            f"got {tuple(lse_i.shape)} and {tuple(d_i.shape)}"
        )


# ---------------------------------------------------------------- modern attention (course_utils.modern)


def tensor(name, x, min_dim, layout):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {layout}, got {type(x).__name__}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have shape {layout}, got {tuple(x.shape)}")


def repeat_kv_inputs(x, n_rep):
    """n_rep as an int, if x is [batch, kv_heads, seq_len, head_dim]."""
    tensor("x", x, 4, "[batch, kv_heads, seq_len, head_dim]")
    if x.dim() != 4:
        raise ValueError(f"x must have shape [batch, kv_heads, seq_len, head_dim], got {tuple(x.shape)}")
    return positive_int(n_rep, "n_rep")


def rope_inputs(x, positions):
    tensor("x", x, 2, "[..., seq_len, head_dim]")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
    if not isinstance(positions, torch.Tensor) or positions.dim() != 1 or positions.is_floating_point():
        got = tuple(positions.shape) if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise ValueError(f"positions must be a 1-D integer tensor [seq_len], got {got}")
    if positions.shape[0] != x.shape[-2]:
        raise ValueError(f"one position per token: x has {x.shape[-2]} tokens, positions has {positions.shape[0]}")


def gqa_inputs(q, k, v, positions, rope_base):
    for name, t in (("q", q), ("k", k), ("v", v)):
        tensor(name, t, 4, "[batch, heads, seq_len, head_dim]")
    num_heads, num_kv_heads = q.shape[1], k.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(f"q has {num_heads} heads, not a multiple of the {num_kv_heads} key/value heads")
    if rope_base is None and positions is not None:
        raise ValueError(
            "positions were given, but rope_base=None means no position embedding, so they would be ignored: "
            "pass rope_base (e.g. 10000.0) to rotate q and k by their positions, or leave out positions"
        )


def document_ids(ids):
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.is_floating_point():
        raise ValueError("document_ids must be a 1-D integer tensor, one document id per position")


# ---------------------------------------------------------------- language model (course_utils.language_model)


def logits_tensor(logits, min_dim, layout):
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a torch.Tensor {layout}, got {type(logits).__name__}")
    if not logits.is_floating_point():
        raise TypeError(f"logits must be floating point (scores, e.g. float32), got {logits.dtype}: use logits.float()")
    if logits.dim() < min_dim:
        raise ValueError(f"logits must have shape {layout}, got {tuple(logits.shape)}")


def batch_logits(logits):
    """logits [batch, vocab], one row per sequence to draw a token for."""
    logits_tensor(logits, 2, "[batch, vocab]")
    if logits.dim() != 2:
        raise ValueError(f"logits must have shape [batch, vocab], got {tuple(logits.shape)}")


def loss_inputs(logits, tokens):
    logits_tensor(logits, 3, "[batch, seq_len, vocab]")
    if logits.dim() != 3:
        raise ValueError(f"logits must have shape [batch, seq_len, vocab], got {tuple(logits.shape)}")
    if not isinstance(tokens, torch.Tensor) or tokens.is_floating_point() or tokens.dim() != 2:
        got = f"{tokens.dtype} {tuple(tokens.shape)}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"tokens must be an integer tensor [batch, seq_len], got {got}")
    if tokens.shape != logits.shape[:2]:
        raise ValueError(
            f"logits {tuple(logits.shape)} and tokens {tuple(tokens.shape)} must share [batch, seq_len]: "
            f"the logits are the model's output on these tokens"
        )
    if tokens.shape[1] < 2:
        raise ValueError(f"predicting the next token needs seq_len >= 2, got {tokens.shape[1]}")


def optional_positive_int(value, name):
    if value is None:
        return None
    number = whole_number(value)
    if number is None or number < 1:
        raise ValueError(f"{name} must be None or an int >= 1, got {value!r}")
    return number


def filter_inputs(logits, temperature, top_k, top_p):
    logits_tensor(logits, 1, "[..., vocab]")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a number > 0, got {temperature!r} (for greedy decoding use argmax)")
    top_k = optional_positive_int(top_k, "top_k")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be None or a number in (0, 1], got {top_p!r}")
    return top_k


def prompt_inputs(model, prompt, steps):
    model._check_tokens(prompt)
    if prompt.shape[1] < 1:
        raise ValueError("the prompt needs at least one token")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")


def greedy_settings(temperature, top_k, top_p, generator):
    """temperature=None decodes greedily, so the sampling settings would be ignored: refuse them."""
    given = [
        name for name, value in (("top_k", top_k), ("top_p", top_p), ("generator", generator)) if value is not None
    ]
    if temperature is None and given:
        raise ValueError(
            f"{' and '.join(given)} only matter when sampling, but temperature=None decodes greedily (the most "
            f"probable token) and would ignore them: pass a temperature too, e.g. temperature=1.0"
        )


def layer_caches(caches, num_blocks, cache_class):
    """One cache_class (language_model.LayerCache, passed in: that module imports this one) per block."""
    name = cache_class.__name__
    if not isinstance(caches, (list, tuple)) or not all(isinstance(c, cache_class) for c in caches):
        got = type(caches).__name__ if not isinstance(caches, (list, tuple)) else [type(c).__name__ for c in caches]
        raise TypeError(f"caches must be a list of {name}, one per block ({num_blocks}), got {got}")
    if len(caches) != num_blocks:
        raise ValueError(f"give one {name} per block ({num_blocks}), got {len(caches)}")
    if len({id(c) for c in caches}) < num_blocks:
        # one object in several places: every layer would append its keys to the others' and read them all
        raise ValueError(
            f"every layer shares one cache: caches lists the same {name} object more than once "
            f"([{name}()] * {num_blocks} is one object listed {num_blocks} times); each layer has keys and "
            f"values of its own, so make one per block: [{name}() for _ in model.blocks]"
        )


def token_ids(ids, name, vocab_size=None, min_len=1):
    """ids: a 1-D integer tensor of at least ``min_len`` ids (in 0 .. vocab_size - 1 if vocab_size is given)."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.is_floating_point():
        got = f"{ids.dtype} {tuple(ids.shape)}" if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"{name} must be a 1-D integer tensor of token ids [n], got {got}")
    if len(ids) < min_len:
        raise ValueError(f"{name} must hold at least {min_len} tokens, got {len(ids)}")
    if vocab_size is not None and len(ids) and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(
            f"{name} must hold ids in 0..{vocab_size - 1} (vocab_size={vocab_size}), "
            f"got {ids.min().item()}..{ids.max().item()}"
        )


def stored_seed(seed, seeds):
    """seed as an int, if it is one of the stored runs' seeds (0.0 or True would name no file)."""
    number = whole_number(seed)
    if number is None or number not in seeds:
        raise ValueError(f"seed must be an int among the stored seeds {list(seeds)}, got {seed!r}")
    return number


# ---------------------------------------------------------------- linear attention, delta rule (course_utils.linear_attention)


def shape_or_type(x):
    return f"a tensor of shape {list(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__


def linear_qkv(q, k, v):
    """q, k [..., T, d_k] and v [..., T, d_v]: floating tensors on one device, same batch axes, T >= 1."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() < 2:
            raise ValueError(f"{name} must be a tensor [..., T, d] (at least 2 dims), got {shape_or_type(x)}")
        if not x.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape [..., T, d_k], got {list(q.shape)} and {list(k.shape)}")
    if v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"v must be [..., T, d_v] with k's leading axes {list(k.shape[:-1])}, got {list(v.shape)}")
    if k.shape[-2] == 0:
        raise ValueError("the sequence is empty (T = 0): there is nothing to attend to")
    if len({q.device, k.device, v.device}) > 1 or len({q.dtype, k.dtype, v.dtype}) > 1:
        raise ValueError(
            f"q, k and v must share one device and dtype, got {q.device}/{q.dtype}, {k.device}/{k.dtype}, "
            f"{v.device}/{v.dtype}"
        )


def beta_gates(beta, k):
    """beta [..., T]: one writing strength per token, between 0 (keep the state) and 2."""
    if not isinstance(beta, torch.Tensor) or beta.shape != k.shape[:-1]:
        raise ValueError(f"beta must be a tensor [..., T] of shape {list(k.shape[:-1])}, got {shape_or_type(beta)}")
    if beta.dtype != k.dtype or beta.device != k.device:
        raise ValueError(
            f"beta must have k's dtype and device ({k.dtype}, {k.device}), got {beta.dtype}, {beta.device}"
        )
    if not ((beta >= 0) & (beta <= 2)).all():
        low, high = beta.min().item(), beta.max().item()
        raise ValueError(
            f"beta must lie in [0, 2] (0 keeps the state, 1 overwrites, above 2 the error grows at every write), "
            f"got values from {low:.3g} to {high:.3g}"
        )


# ---------------------------------------------------------------- recurrence and gradients (course_utils.long_range)


def recurrent_inputs(x, W_xh, W_hh, b, h0):
    names = {"x": x, "W_xh": W_xh, "W_hh": W_hh, "b": b, "h0": h0}
    for name, value in names.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if x.dim() != 3:
        hint = " (one sequence [T, d_in]? pass x[None] and h0[None]: the batch comes first)" if x.dim() == 2 else ""
        raise ValueError(f"x must be [B, T, d_in] (batch first), got shape {tuple(x.shape)}{hint}")
    d_in, d_h = x.shape[2], W_hh.shape[-1]
    expected = {"W_xh": (d_in, d_h), "W_hh": (d_h, d_h), "b": (d_h,), "h0": (x.shape[0], d_h)}
    for name, shape in expected.items():
        if tuple(names[name].shape) != shape:
            raise ValueError(
                f"{name} must have shape {list(shape)} for x [B, T, d_in] = {list(x.shape)} and d_h = {d_h} "
                f"(W_xh [d_in, d_h], W_hh [d_h, d_h], b [d_h], h0 [B, d_h]), got {list(names[name].shape)}"
            )


def gradient_inputs(layer, inputs, distances, probe):
    if not callable(layer):
        raise TypeError(f"layer must be a function of x [B, T, d] -> [B, T, d_out], got {type(layer).__name__}")
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 3 or not inputs.is_floating_point():
        raise ValueError(f"inputs must be a float tensor [B, T, d], got {getattr(inputs, 'shape', type(inputs))}")
    if not isinstance(probe, torch.Tensor) or probe.dim() != 1:
        raise ValueError(f"probe must be one direction [d_out], got {getattr(probe, 'shape', type(probe))}")
    bad = [t for t in distances if not 0 <= int(t) < inputs.shape[1]]
    if bad:
        raise ValueError(
            f"distances must be positions 0..{inputs.shape[1] - 1} of the {inputs.shape[1]} inputs, got {bad}"
        )


# ---------------------------------------------------------------- attention weights and induction heads
# (course_utils.head_scores, course_utils.induction)


def attention_weights(attn):
    """Weights, not raw scores: every entry >= 0 and every row sums to 1 (what softmax gives)."""
    if not attn.is_floating_point():
        raise ValueError(f"attn must hold floating-point attention weights, got {attn.dtype}")
    # float16/bfloat16 keep about 3 significant digits, so their rows sum to 1 less exactly
    tolerance = 1e-3 if attn.dtype in (torch.float32, torch.float64) else 3e-2
    row_sums = attn.double().sum(-1)
    if bool((attn < 0).any()) or not bool(((row_sums - 1).abs() <= tolerance).all()):
        raise ValueError(
            f"attn must be attention weights, every entry >= 0 and every row summing to 1; got entries from "
            f"{attn.min().item():.3g} to {attn.max().item():.3g} and row sums from {row_sums.min().item():.3g} to "
            f"{row_sums.max().item():.3g}. Raw scores (q k^T / sqrt(d_k)) need torch.softmax(scores, dim=-1) first"
        )


def attention_map(attn, min_len=1):
    if not isinstance(attn, torch.Tensor) or attn.dim() < 2 or attn.shape[-1] != attn.shape[-2]:
        shape = tuple(attn.shape) if isinstance(attn, torch.Tensor) else type(attn).__name__
        raise ValueError(f"attn must be a tensor [..., seq, seq] of self-attention weights, got {shape}")
    if attn.shape[-1] < min_len:
        raise ValueError(f"this score needs at least {min_len} tokens, got {attn.shape[-1]}")
    attention_weights(attn)


def tokens_for(attn, tokens):
    if isinstance(tokens, str) or not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
        what = "one string" if isinstance(tokens, str) else type(tokens).__name__
        raise TypeError(
            f"tokens must be a list (or tuple) of strings, one per position, got {what}; "
            f"attention_maps() returns such a list with its weights"
        )
    if len(tokens) != attn.shape[-1]:
        raise ValueError(f"{len(tokens)} tokens for attention over {attn.shape[-1]} positions")


def induction_input(weights, half_len):
    if not isinstance(weights, torch.Tensor) or weights.dim() < 3:
        got = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"weights must be attention weights [..., heads, T, T], got {got}")
    if weights.shape[-1] != weights.shape[-2]:
        raise ValueError(
            f"weights must be square self-attention maps [..., heads, T, T] (one row per query, one column per "
            f"key of the same sequence), got {tuple(weights.shape)}"
        )
    half_len = repeated_half(weights.shape[-1], half_len)
    attention_weights(weights)
    return half_len


def repeated_half(length, half_len, min_half=1):
    """half_len as an int, if a sequence of ``length`` positions is one half of half_len tokens, repeated."""
    number = whole_number(half_len)
    if number is None or number < min_half:
        raise ValueError(
            f"half_len must be a positive int{'' if min_half == 1 else f' >= {min_half}'}, the length of the "
            f"repeated half, got {half_len!r} ({type(half_len).__name__})"
        )
    if length != 2 * number:
        raise ValueError(
            f"the sequence has T = {length} positions but half_len = {number}: a sequence made of one "
            f"half repeated has T = 2 * half_len = {2 * number} positions"
        )
    return number


def repeat_losses(logits, tokens, half_len):
    """half_len as an int, if logits [B, T, V] are a model's output on tokens [B, T] of one half repeated."""
    logits_tensor(logits, 3, "[batch, T, vocab]")
    if logits.dim() != 3:
        raise ValueError(f"logits must have shape [batch, T, vocab], got {tuple(logits.shape)}")
    if not isinstance(tokens, torch.Tensor) or tokens.is_floating_point() or tokens.shape != logits.shape[:2]:
        got = f"{tokens.dtype} {tuple(tokens.shape)}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(
            f"tokens must be the integer ids [batch, T] = {list(logits.shape[:2])} the logits were computed on, "
            f"got {got}"
        )
    # a half of one token leaves no prediction inside the first half: its loss would be nan
    return repeated_half(tokens.shape[1], half_len, min_half=2)


def head_index(head, num_heads, name="head"):
    number = whole_number(head)
    if number is None or not 0 <= number < num_heads:
        raise ValueError(f"{name} must be a head of the layer, an int in 0..{num_heads - 1}, got {head!r}")
    return number


def head_list(heads, num_heads, name):
    """heads: one head (an int) or a list of distinct heads, each in 0 .. num_heads - 1; returned as a list."""
    many = isinstance(heads, (list, tuple, range))
    numbers = [whole_number(h) for h in heads] if many else [whole_number(heads)]
    if not numbers or any(h is None or not 0 <= h < num_heads for h in numbers) or len(set(numbers)) < len(numbers):
        raise ValueError(
            f"{name} must be a head (an int in 0..{num_heads - 1}) or a list of distinct heads, got {heads!r}"
        )
    return numbers


def length_range(lengths, name):
    """(low, high) as ints, 1 <= low <= high: a range of lengths, both ends included."""
    pair = list(lengths) if isinstance(lengths, (list, tuple)) else []
    numbers = [whole_number(x) for x in pair]
    if len(numbers) != 2 or None in numbers or not 1 <= numbers[0] <= numbers[1]:
        raise ValueError(f"{name} must be a pair (low, high) of ints with 1 <= low <= high, got {lengths!r}")
    return numbers[0], numbers[1]


def per_sequence_values(per_sequence, draws, level):
    """One number per sequence, [n]: a bootstrap draws sequences, so a 2-D tensor would mix them up."""
    if not isinstance(per_sequence, torch.Tensor) or per_sequence.dim() != 1 or not per_sequence.is_floating_point():
        got = (
            f"{per_sequence.dtype} {tuple(per_sequence.shape)}"
            if isinstance(per_sequence, torch.Tensor)
            else type(per_sequence).__name__
        )
        raise ValueError(
            f"per_sequence must be a 1-D float tensor [n], one value per sequence (as second_half_loss returns), "
            f"got {got}; for losses [n, T] take each sequence's mean first, losses.mean(-1)"
        )
    if len(per_sequence) == 0:
        raise ValueError("per_sequence is empty: a bootstrap needs at least one sequence")
    positive_int(draws, "draws")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1), e.g. 0.95, got {level!r}")


# ---------------------------------------------------------------- associative recall (course_utils.recall)


def recall_ids(keys, values, queries, num_keys, num_values):
    for name, x in (("keys", keys), ("values", values), ("queries", queries)):
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.is_floating_point():
            raise ValueError(f"{name} must be an integer tensor [B, n], got {getattr(x, 'shape', type(x).__name__)}")
    if values.shape != keys.shape or queries.shape[0] != keys.shape[0]:
        raise ValueError(
            f"keys and values must be [B, P] alike and queries [B, Q] with the same B, got "
            f"{list(keys.shape)}, {list(values.shape)}, {list(queries.shape)}"
        )
    if keys.shape[1] == 0 or queries.shape[1] == 0:
        raise ValueError("a recall sequence needs at least one pair and one query")
    if queries.min() < 0 or queries.max() >= keys.shape[1]:
        raise ValueError(f"queries are indices of pairs, 0..{keys.shape[1] - 1}, got {queries.min()}..{queries.max()}")
    id_range(keys, "keys", "key ids", num_keys)
    id_range(values, "values", f"value ids (id {num_values} is the question mark of a query)", num_values)
    if (keys.sort(dim=1).values.diff(dim=1) == 0).any():
        raise ValueError("the keys of a sequence must be distinct: a query for a repeated key would have two answers")


def id_range(ids, name, what, count):
    if ids.numel() and (ids.min() < 0 or ids.max() >= count):
        raise ValueError(f"{name} must be {what} in 0..{count - 1}, got {ids.min().item()}..{ids.max().item()}")


def recall_tokens(tokens, num_keys, num_values):
    """tokens [B, T, 2]: a key id and a value id (or the question mark, id num_values) per token."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 3 or tokens.shape[-1] != 2 or tokens.is_floating_point():
        got = f"{tokens.dtype} {tuple(tokens.shape)}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(
            f"tokens must be an integer tensor [batch, T, 2], a (key id, value id) pair per token as "
            f"recall_sequences makes them, got {got}"
        )
    if tokens.shape[1] == 0:
        raise ValueError("tokens hold no position (T = 0)")
    id_range(tokens[..., 0], "tokens[..., 0]", "key ids", num_keys)
    id_range(tokens[..., 1], "tokens[..., 1]", f"value ids or the question mark {num_values}", num_values + 1)


def recall_answers(tokens, targets, distances):
    """targets [B, T] for tokens [B, T, 2]; distances [B, Q], one per query (the last Q positions)."""
    for name, x, dims in (("targets", targets, 2), ("distances", distances, 2)):
        if not isinstance(x, torch.Tensor) or x.dim() != dims or x.is_floating_point():
            raise ValueError(f"{name} must be an integer tensor [batch, n], got {shape_or_type(x)}")
    if (
        targets.shape != tokens.shape[:2]
        or distances.shape[0] != tokens.shape[0]
        or distances.shape[1] > tokens.shape[1]
    ):
        raise ValueError(
            f"tokens [B, T, 2], targets [B, T] and distances [B, Q <= T] must come from one batch "
            f"(random_recall_batch returns them), got {list(tokens.shape)}, {list(targets.shape)}, "
            f"{list(distances.shape)}"
        )


# ---------------------------------------------------------------- translation (course_utils.translation)


def swap_inputs(sentences, donors, position):
    if isinstance(sentences, str) or isinstance(donors, str):
        raise TypeError("sentences and donors must be lists of strings, e.g. ['the blue car'] and ['the blue dog']")
    sentences, donors = list(sentences), list(donors)
    if len(sentences) != len(donors) or not sentences:
        raise ValueError(f"one donor per sentence: got {len(sentences)} sentences and {len(donors)} donors")
    for sentence, donor in zip(sentences, donors, strict=True):
        if len(sentence.split()) != len(donor.split()):
            raise ValueError(
                f"a donor must have as many words as its sentence, so that position {position} is the same word "
                f"slot in both: {sentence!r} and {donor!r}"
            )
    longest = max(len(s.split()) for s in sentences)
    if not isinstance(position, int) or not 0 <= position < longest:
        raise ValueError(f"position must be a word position 0..{longest - 1} of the sentences, got {position!r}")


# ---------------------------------------------------------------- images and patches (course_utils.vision)


def image_batch(images):
    """[B, C, H, W]; a channels-last batch [B, H, W, C] (as image libraries store it) is refused by name."""
    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"images must be a tensor [batch, channels, height, width], got {shape}")
    _, c, h, w = images.shape
    if w in (1, 3, 4) and c == h and c > 4:  # e.g. [2, 16, 16, 4]: a 16x16 RGBA image read as 16 channels
        raise ValueError(
            f"images of shape {tuple(images.shape)} look channels-last [batch, height, width, channels] "
            f"({h}x{c} pixels, {w} channels); the course's images are channels-first [batch, channels, height, "
            f"width]: pass images.permute(0, 3, 1, 2)"
        )


def whole_patches(image_height, image_width, patch_size):
    """patch_size as an int, if the image is a whole number of patches high and wide."""
    p = positive_int(patch_size, "patch_size")
    if image_height % p or image_width % p:
        raise ValueError(
            f"an image of {image_height}x{image_width} pixels cannot be cut into whole {p}x{p} patches: "
            f"height and width must be multiples of patch_size={p} (crop or pad the image first)"
        )
    return p


def occlusion_inputs(images, which, patch_size, background):
    image_batch(images)
    b, _, h, w = images.shape
    p = whole_patches(h, w, patch_size)
    rows, cols = h // p, w // p
    if not isinstance(which, torch.Tensor) or tuple(which.shape) != (b, rows * cols) or which.dtype != torch.bool:
        got = f"{tuple(which.shape)} {which.dtype}" if isinstance(which, torch.Tensor) else type(which).__name__
        raise ValueError(
            f"which must be a bool tensor [batch, num_patches] = [{b}, {rows * cols}] (True = replace this patch, "
            f"numbered as patchify numbers them), got {got}"
        )
    if not isinstance(background, torch.Tensor) or background.shape != images.shape:
        got = tuple(background.shape) if isinstance(background, torch.Tensor) else type(background).__name__
        raise ValueError(f"background must be a tensor of the images' shape {tuple(images.shape)}, got {got}")


# ---------------------------------------------------------------- serving (course_utils.serving, lesson 13)


def gather_inputs(pool, block_table, length):
    if not isinstance(pool, torch.Tensor) or pool.dim() != 4:
        got = f"shape {tuple(pool.shape)}" if isinstance(pool, torch.Tensor) else type(pool).__name__
        raise ValueError(f"pool must be a tensor [num_blocks, block_size, H_kv, d], got {got}")
    if not isinstance(block_table, (list, tuple)) or not all(
        isinstance(b, int) and not isinstance(b, bool) for b in block_table
    ):
        raise ValueError(f"block_table must be a list of block ids (ints), got {block_table!r}")
    bad = [b for b in block_table if not 0 <= b < pool.shape[0]]
    if bad:
        raise ValueError(f"block ids {bad} are not blocks of this pool (0..{pool.shape[0] - 1})")
    if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= len(block_table) * pool.shape[1]:
        raise ValueError(
            f"length must be an int from 0 to {len(block_table) * pool.shape[1]} (the table's {len(block_table)} "
            f"blocks of {pool.shape[1]} slots), got {length!r}"
        )


def chunk_sizes(num_cached, chunk_length):
    if isinstance(num_cached, bool) or not isinstance(num_cached, int) or num_cached < 0:
        raise ValueError(f"num_cached must be an int >= 0 (slots already in the cache), got {num_cached!r}")
    positive_int(chunk_length, "chunk_length")


def admit_inputs(waiting_lengths, num_running, num_free_blocks, block_size, max_batch):
    if not isinstance(waiting_lengths, (list, tuple)) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in waiting_lengths
    ):
        raise ValueError(f"waiting_lengths must be a list of prompt lengths (ints >= 1), got {waiting_lengths!r}")
    for name, value in (("num_running", num_running), ("num_free_blocks", num_free_blocks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    positive_int(block_size, "block_size")
    positive_int(max_batch, "max_batch")


def paged_append(cache, layer, keys, values):
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < cache.num_layers:
        raise ValueError(f"layer must be an int from 0 to {cache.num_layers - 1}, got {layer!r}")
    expected = tuple(cache.keys[layer].shape[2:])
    for name, x in (("keys", keys), ("values", values)):
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or (x.shape[0], x.shape[2]) != expected:
            got = f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(
                f"{name} must be [H_kv, t, d] = [{expected[0]}, t, {expected[1]}] (one sequence, before RoPE), got {got}"
            )
    if keys.shape != values.shape:
        raise ValueError(f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must have one shape")
    dtype = cache.keys[layer].dtype
    if keys.dtype != dtype or values.dtype != dtype:
        other = f", or make the cache with PagedKVCache(..., dtype={keys.dtype})" if keys.dtype == values.dtype else ""
        raise TypeError(
            f"keys and values are {keys.dtype} and {values.dtype}, the cache {dtype}: convert them with .to({dtype}){other}"
        )


def cache_layer(cache, layer):
    """A layer of the cache: 0 .. num_layers - 1, or counted from the end as Python does (-1: the last)."""
    number = whole_number(layer)
    if number is None or not -cache.num_layers <= number < cache.num_layers:
        raise ValueError(f"layer must be an int from 0 to {cache.num_layers - 1} (or -1 for the last), got {layer!r}")
    return number


def token_list(tokens, name, vocab_size=None):
    """A list of token ids (Python ints; numpy ints too), each below vocab_size where given, else a clear error."""
    ids = []
    for token in tokens:
        ids.append(whole_number(token))
        if ids[-1] is None:
            raise ValueError(f"{name} must hold token ids as ints (tensor.tolist() gives them), found {token!r}")
        if ids[-1] < 0 or (vocab_size is not None and ids[-1] >= vocab_size):
            allowed = f"from 0 to {vocab_size - 1}" if vocab_size is not None else ">= 0"
            raise ValueError(f"{name} must hold token ids {allowed}, found {ids[-1]}")
    return ids


def serve_inputs(model, prompts, max_new_tokens, scheduler, max_batch, prefill_chunk):
    """The requests as given, checked; returns the prompts as lists of ints and max_new_tokens one int per prompt."""
    if scheduler not in ("continuous", "static"):
        raise ValueError(f'scheduler must be "continuous" or "static", got {scheduler!r}')
    positive_int(max_batch, "max_batch")
    optional_positive_int(prefill_chunk, "prefill_chunk")
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts must be a non-empty list of prompts, each a list of token ids")
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, torch.Tensor):
            raise ValueError(f"prompt {i} is a tensor: give each prompt as a list of token ids (tensor.tolist())")
        if not isinstance(prompt, (list, tuple)) or not prompt:
            raise ValueError(f"prompt {i} must be a non-empty list of token ids, got {prompt!r}")
        token_list(prompt, f"prompt {i}", model.vocab_size)
    running = min(max_batch, len(prompts))  # the most requests that can decode in one pass
    if prefill_chunk is not None and prefill_chunk < running:
        raise ValueError(
            f"prefill_chunk ({prefill_chunk}) must be at least {running}, the requests that can run at once "
            f"(max_batch, or fewer prompts): each decodes one token per pass within the budget (vLLM asks the "
            f"same of max_num_batched_tokens)"
        )
    if isinstance(max_new_tokens, torch.Tensor):
        raise ValueError("max_new_tokens must be one int, or a list of one int per prompt (tensor.tolist())")
    counts = [max_new_tokens] * len(prompts) if not isinstance(max_new_tokens, (list, tuple)) else list(max_new_tokens)
    if len(counts) != len(prompts):
        raise ValueError(f"max_new_tokens gives {len(counts)} counts for {len(prompts)} prompts: one int, or one each")
    counts = [positive_int(n, "max_new_tokens (one int, or a list of one per prompt)") for n in counts]
    for i, (prompt, n) in enumerate(zip(prompts, counts, strict=True)):
        if len(prompt) + n > model.context:
            raise ValueError(
                f"prompt {i} has {len(prompt)} tokens and asks for {n} more: {len(prompt) + n} is longer than the "
                f"model's context of {model.context} tokens; shorten the prompt or ask for fewer new tokens"
            )
    return [token_list(prompt, f"prompt {i}") for i, prompt in enumerate(prompts)], counts


def requests_fit(prompts, counts, cache):
    """Refuse a request that would not fit the whole pool alone (preempting others could never make room)."""
    for i, (prompt, n) in enumerate(zip(prompts, counts, strict=True)):
        needed = -(-(len(prompt) + n) // cache.block_size)
        if needed > cache.num_blocks:
            raise ValueError(
                f"request {i} needs {needed} blocks of {cache.block_size} slots ({len(prompt)} + {n} tokens), more than "
                f"the pool's {cache.num_blocks}: refused. Give num_blocks >= {needed}"
            )


# ---------------------------------------------------------------- long context (course_utils.long_context, lesson 14)

ROPE_OPTIONS = {
    "default": (),
    "linear": (),
    "ntk": (),
    "dynamic": ("seq_len",),
    "yarn": ("beta_fast", "beta_slow", "attention_factor"),
    "llama3": ("low_freq_factor", "high_freq_factor"),
}


def positive_number(value, name):
    """A finite real number > 0 (numpy scalars too), else a clear error; infinity would turn every speed to 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
        fix = ": use .item() to take the number out of a tensor" if isinstance(value, torch.Tensor) else ""
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}{fix}")
    return value


def rope_scaling_inputs(kind, head_dim, base, factor, original_length, options, kinds):
    """The options of one RoPE scaling method, checked (each must be a number; seq_len an int >= 1)."""
    if kind not in kinds:
        raise ValueError(f"kind must be one of {', '.join(repr(k) for k in kinds)}, got {kind!r}")
    head_dim = positive_int(head_dim, "head_dim")
    if head_dim % 2 or head_dim < 4:
        raise ValueError(f"RoPE rotates pairs of features: head_dim must be even and at least 4, got {head_dim}")
    positive_number(base, "base")
    positive_number(factor, "factor")
    if not base > 1:
        raise ValueError(f"base must be > 1 (lesson 08's RoPE uses 10000.0), got {base!r}")
    if not factor >= 1:
        raise ValueError(
            f"factor must be >= 1: how many times the trained length the text may be (1 changes nothing), got {factor!r}"
        )
    if kind in ("dynamic", "yarn", "llama3"):
        positive_int(original_length, "original_length (the trained context, e.g. 128)")
    unknown = sorted(set(options) - set(ROPE_OPTIONS[kind]))
    if unknown:
        allowed = ", ".join(ROPE_OPTIONS[kind]) or "none"
        raise ValueError(f"{kind!r} takes no option {', '.join(unknown)} (its options: {allowed})")
    for name, value in options.items():
        if name != "seq_len":  # a count of tokens: checked as an int below
            positive_number(value, name)
    if kind == "dynamic":
        if "seq_len" not in options:
            raise ValueError("dynamic NTK scales to the length being read: pass seq_len=<tokens read so far>")
        positive_int(options["seq_len"], "seq_len (the length being read)")
    if kind == "yarn" and options.get("beta_fast", 32) <= options.get("beta_slow", 1):
        raise ValueError("beta_fast must be larger than beta_slow: turns over the trained length (YaRN: 32 and 1)")
    if kind == "llama3" and options.get("high_freq_factor", 4.0) <= options.get("low_freq_factor", 1.0):
        raise ValueError("high_freq_factor must be larger than low_freq_factor (Llama 3.1: 4 and 1)")
    return options


def rope_frequencies_for(inv_freq, head_dim):
    if not isinstance(inv_freq, torch.Tensor) or tuple(inv_freq.shape) != (head_dim // 2,):
        got = tuple(inv_freq.shape) if isinstance(inv_freq, torch.Tensor) else type(inv_freq).__name__
        raise ValueError(
            f"inv_freq must be a tensor [head_dim / 2] = [{head_dim // 2}] for this model's heads of {head_dim} "
            f"(rope_inverse_frequencies(kind, {head_dim}, ...)[0]), got {got}"
        )
