"""Induction heads: a two-layer attention-only model that learns to copy (lesson 11).

The circuit of Elhage et al. (2021), "A Mathematical Framework for Transformer Circuits",
studied at scale by Olsson et al. (2022), "In-context Learning and Induction Heads":

    layer 0, previous-token head:  position j writes "the token before me was A" into the stream
    layer 1, induction head:       at a query holding A, its keys look for "the token before me was A",
                                   so it attends to the token *after* the earlier A, and copies it

On a sequence made of one random half repeated (``a b c d | a b c d``), the query at
position t (second half) holds the token of position t - half_len, so the induction head
attends to key t - half_len + 1, the token that came next last time.

    model, history = train(SETTINGS, seed=0, steps=100)  # a fresh AttentionOnly model, trained
    tokens = repeated_tokens(8, 12, SETTINGS["vocab_size"], torch.Generator().manual_seed(0))
    weights = model.attention(tokens)                     # [B, layers, heads, T, T]
    induction_scores(weights.mean(0), 12)                  # [layers, heads]

Also here: the composition scores between a layer-0 head and a layer-1 head, the path
intervention (the induction head's keys read a stream without the previous-token head),
and head ablation measured as the loss on the second half, with bootstrap intervals.
"""

import json
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils import _validate
from course_utils.attention import MultiHeadAttention, causal_mask
from course_utils.data import DATA_DIR

__all__ = [
    "induction_scores",
    "repeated_tokens",
    "training_batch",
    "AttentionOnly",
    "head_outputs",
    "half_losses",
    "train",
    "qk_matrix",
    "ov_matrix",
    "composition_score",
    "k_composition",
    "composition_scores",
    "random_composition_scores",
    "path_patched_logits",
    "second_half_loss",
    "lookup_floor",
    "copy_share",
    "bootstrap_interval",
    "load_runs",
    "load_model",
]

# The lesson's model and training (scripts/train_induction.py stored runs made with these).
# A training sequence has 2 * half_lens[1] - 1 <= max_len tokens (the last one is only a target).
SETTINGS = {
    "vocab_size": 48,
    "d_model": 64,
    "num_heads": 4,
    "num_layers": 2,
    "max_len": 32,
    "half_lens": (6, 16),
    "batch": 64,
    "steps": 1500,
    "lr": 3e-3,
    "warmup": 30,
    "eval_half_len": 12,
    "eval_batch": 256,
    "eval_every": 25,
}


# ---------------------------------------------------------------------------
# The score that finds an induction head
# ---------------------------------------------------------------------------


def induction_scores(weights, half_len):
    """[..., heads, T, T] weights on one random half repeated -> [..., heads] induction scores.

    The mean, over the queries t of the second half (t >= half_len), of the weight on key
    t - half_len + 1: the token that followed the current token's first occurrence.
    1 = a perfect induction head; a head spreading its weight evenly scores about 1/t.
    """
    half_len = _validate.induction_input(weights, half_len)
    # the diagonal at offset -(half_len - 1) holds weights[t, t - half_len + 1] for t = half_len - 1 .. T - 1;
    # its first entry is query half_len - 1 (still the first half), so drop it
    diagonal = weights.diagonal(offset=-(half_len - 1), dim1=-2, dim2=-1)
    return diagonal[..., 1:].mean(-1)


# ---------------------------------------------------------------------------
# Data: random tokens, the second half repeating the first
# ---------------------------------------------------------------------------


def repeated_tokens(batch, half_len, vocab_size, generator):
    """[batch, 2 * half_len] token ids: a random half, then the same half again."""
    batch, half_len = _validate.positive_int(batch, "batch"), _validate.positive_int(half_len, "half_len")
    vocab_size = _validate.positive_int(vocab_size, "vocab_size")
    half = torch.randint(vocab_size, (batch, half_len), generator=generator)
    return torch.cat([half, half], dim=1)


def training_batch(
    generator, batch=SETTINGS["batch"], half_lens=SETTINGS["half_lens"], vocab_size=SETTINGS["vocab_size"]
):
    """(inputs, targets) for next-token prediction on repeated random tokens.

    The half length is drawn per batch (uniform in half_lens, both ends included), so the
    model cannot copy by position ("look back half_len places"): it must find the earlier
    copy of the current token by its content, which is what an induction head does.
    The defaults are the lesson's (``SETTINGS``), whose sequences fit ``AttentionOnly(max_len=32)``.
    """
    low, high = _validate.length_range(half_lens, "half_lens")
    half_len = int(torch.randint(low, high + 1, (1,), generator=generator))
    tokens = repeated_tokens(batch, half_len, vocab_size, generator)
    return tokens[:, :-1], tokens[:, 1:]


# ---------------------------------------------------------------------------
# The model: embeddings, two attention layers, no MLPs, unembedding
# ---------------------------------------------------------------------------


def head_outputs(attention, query_input, key_input=None, value_input=None, mask=None):
    """What each head of ``attention`` (a MultiHeadAttention) adds to the stream: [B, heads, S, d_model].

    The layer's output is the sum of these over the heads plus the output bias: W_O is
    [d_model, heads * head_dim], so head h owns the columns h * head_dim .. (h + 1) * head_dim.
    Keys and values may come from another stream than the queries (the path intervention).
    """
    key_input = query_input if key_input is None else key_input
    value_input = query_input if value_input is None else value_input
    q = attention.split_heads(attention.query_linear(query_input))
    k = attention.split_heads(attention.key_linear(key_input))
    v = attention.split_heads(attention.value_linear(value_input))
    context = attention.compute_attention(q, k, v, mask)  # [B, H, S, head_dim]
    heads, head_dim = attention.num_heads, attention.head_dim
    w_o = attention.output_linear.weight.T.reshape(heads, head_dim, attention.d_model)  # [H, head_dim, d_model]
    return torch.einsum("bhsd,hdm->bhsm", context, w_o)


class AttentionOnly(nn.Module):
    """A decoder of attention layers only (no MLPs, no LayerNorm): the model of Elhage et al. (2021).

    The residual stream is token embedding + position embedding; each layer adds its heads'
    outputs; the unembedding reads the final stream. With nothing but attention, everything
    the model computes is in the heads, so we can read, remove and re-route them one by one.
    """

    def __init__(self, vocab_size=48, max_len=32, d_model=64, num_heads=4, num_layers=2):
        super().__init__()
        self.vocab_size, self.max_len = vocab_size, max_len
        self.num_layers, self.num_heads = num_layers, num_heads
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(MultiHeadAttention(d_model, num_heads) for _ in range(num_layers))
        self.unembed = nn.Linear(d_model, vocab_size)

    def _check_tokens(self, tokens, head_mask=None):
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
            got = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise ValueError(f"tokens must be integer token ids [batch, seq_len], got {got}")
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"the model has positions for {self.max_len} tokens, got {tokens.shape[1]}")
        if bool((tokens < 0).any()) or bool((tokens >= self.vocab_size).any()):
            raise ValueError(f"token ids must lie in 0 .. {self.vocab_size - 1}")
        expected = (self.num_layers, self.num_heads)
        if head_mask is not None and not isinstance(head_mask, torch.Tensor):
            raise TypeError(f"head_mask must be a tensor [layers, heads] = {expected}, got {type(head_mask).__name__}")
        if head_mask is not None and tuple(head_mask.shape) != expected:
            raise ValueError(f"head_mask must be [layers, heads] = {expected}, got {tuple(head_mask.shape)}")

    def embed(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.token_embedding(tokens) + self.position_embedding(positions)

    def run(self, tokens, head_mask=None):
        """(logits [B, S, V], streams: the residual stream entering each layer and after the last,
        per_head: each layer's head outputs [B, heads, S, d_model], weights [B, layers, heads, S, S]).

        head_mask [layers, heads]: 1 keeps a head, 0 removes its output (as in lesson 06b).
        """
        self._check_tokens(tokens, head_mask)
        mask = causal_mask(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens)
        streams, per_head, weights = [x], [], []
        for index, layer in enumerate(self.layers):
            outputs = head_outputs(layer, x, mask=mask)
            if head_mask is not None:
                outputs = outputs * head_mask[index].to(outputs)[None, :, None, None]
            x = x + outputs.sum(1) + layer.output_linear.bias
            streams.append(x)
            per_head.append(outputs)
            weights.append(layer.attention_weights)
        return self.unembed(x), streams, per_head, torch.stack(weights, dim=1)

    def forward(self, tokens, head_mask=None):
        return self.run(tokens, head_mask)[0]

    @torch.no_grad()
    def attention(self, tokens):
        """[B, layers, heads, S, S]: every head's attention weights on these tokens."""
        return self.run(tokens)[3]


def half_losses(logits, tokens, half_len):
    """(first-half loss, second-half loss) of next-token predictions on a repeated sequence.

    First half: predicting tokens 1 .. half_len - 1 (random: nothing to learn, about log V).
    Second half: predicting tokens half_len + 1 .. T - 1, each a repeat of a token seen
    half_len places earlier. (Token half_len, the first of the repeat, is left out: nothing
    in the sequence so far says that the repeat starts there.)
    """
    half_len = _validate.repeat_losses(logits, tokens, half_len)
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")  # [B, T-1]
    # losses[:, t] is the loss of predicting token t + 1
    return losses[:, : half_len - 1].mean(), losses[:, half_len:].mean()


# ---------------------------------------------------------------------------
# Training (the course's loop, lesson 05), with the two half losses along the way
# ---------------------------------------------------------------------------


def make_model(settings=SETTINGS, seed=0):
    """A fresh AttentionOnly model of these settings, initialised from ``seed``.

    The seed is used inside fork_rng, so making a model leaves the global random state as it was.
    """
    keys = ("vocab_size", "max_len", "d_model", "num_heads", "num_layers")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return AttentionOnly(**{k: settings[k] for k in keys})


def evaluation_tokens(settings=SETTINGS, seed=1234):
    """Fixed held-out sequences (one half of eval_half_len tokens, repeated) for every measurement."""
    g = torch.Generator().manual_seed(seed)
    return repeated_tokens(settings["eval_batch"], settings["eval_half_len"], settings["vocab_size"], g)


def train(settings=SETTINGS, seed=0, steps=None):
    """A fresh model trained from ``seed`` with AdamW; returns (model, history).

    The learning rate warms up linearly, then stays constant (no decay), so the first
    n steps of a long run are exactly a run of n steps: the lesson's live run and the
    stored longer runs of scripts/train_induction.py can be compared step by step.
    history: "loss" per step, "eval_steps", and the "first_half" and "second_half" losses
    on the fixed evaluation sequences every eval_every steps (and at step 0).
    """
    from course_utils.training import training_step

    if not isinstance(settings, dict):
        raise TypeError(
            f"settings must be a dict like SETTINGS, got {type(settings).__name__}: train builds its own model, "
            f"model, history = train(SETTINGS, seed=0)"
        )
    steps = settings["steps"] if steps is None else steps
    model = make_model(settings, seed)
    tokens = evaluation_tokens(settings)
    half = settings["eval_half_len"]
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["lr"], weight_decay=0.01)
    history = {"loss": [], "eval_steps": [], "first_half": [], "second_half": []}

    @torch.no_grad()
    def evaluate(step):
        model.eval()
        first, second = half_losses(model(tokens), tokens, half)
        history["eval_steps"].append(step)
        history["first_half"].append(round(first.item(), 4))
        history["second_half"].append(round(second.item(), 4))

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains faster on one thread, and the same on every machine
    try:
        evaluate(0)
        for step in range(steps):
            for group in optimizer.param_groups:
                group["lr"] = settings["lr"] * min(1.0, (step + 1) / settings["warmup"])
            inputs, targets = training_batch(
                generator, settings["batch"], tuple(settings["half_lens"]), settings["vocab_size"]
            )
            history["loss"].append(round(training_step(model, optimizer, inputs, targets), 4))
            if (step + 1) % settings["eval_every"] == 0:
                evaluate(step + 1)
    finally:
        torch.set_num_threads(threads)
    return model.eval(), history


# ---------------------------------------------------------------------------
# Composition: does a layer-1 head read what a layer-0 head wrote?
# ---------------------------------------------------------------------------


def _head_slice(attention, head):
    head = _validate.head_index(head, attention.num_heads)  # a slice past the last head would be empty: zeros
    rows = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
    return rows


def qk_matrix(attention, head):
    """W_QK = W_Q^T W_K [d_model, d_model]: the score of query stream x_q and key stream x_k is x_q^T W_QK x_k."""
    rows = _head_slice(attention, head)
    return attention.query_linear.weight[rows].T @ attention.key_linear.weight[rows]


def ov_matrix(attention, head):
    """W_OV = W_O W_V [d_model, d_model]: what the head writes when it attends to a position holding x."""
    rows = _head_slice(attention, head)
    return attention.output_linear.weight[:, rows] @ attention.value_linear.weight[rows]


def composition_score(reader, writer):
    """||reader @ writer||_F / (||reader||_F ||writer||_F): how much of what ``writer`` writes ``reader`` reads.

    Elhage et al. (2021): 1 when the two line up completely, near 0 when they use unrelated
    directions of the stream. K-composition: reader = W_QK of the layer-1 head (it reads the
    key's stream from the right), writer = W_OV of the layer-0 head.
    """
    norm = torch.linalg.matrix_norm  # Frobenius: the square root of the sum of the squared entries
    return (norm(reader @ writer) / (norm(reader) * norm(writer))).item()


@torch.no_grad()
def k_composition(model):
    """[layer-1 heads, layer-0 heads]: how much each layer-1 head's keys read each layer-0 head's output.

    The layer-1 score of query x_q and key x_k is x_q^T W_QK x_k; the part of x_k that the
    layer-0 head wrote is W_OV x, so the key side reads it through W_QK @ W_OV.
    """
    first, second = model.layers[0], model.layers[1]
    scores = torch.zeros(second.num_heads, first.num_heads)
    for reader_head in range(second.num_heads):
        for writer_head in range(first.num_heads):
            reader = qk_matrix(second, reader_head)
            writer = ov_matrix(first, writer_head)
            scores[reader_head, writer_head] = composition_score(reader, writer)
    return scores


@torch.no_grad()
def composition_scores(model, kind="K"):
    """[layer-1 heads, layer-0 heads]: K-, Q- or V-composition scores between every pair of heads.

    K: the layer-1 head's keys read the writer (W_QK @ W_OV); Q: its queries do (W_QK^T @ W_OV);
    V: its values do (W_OV^1 @ W_OV^0).
    """
    readers = {
        "K": qk_matrix,
        "Q": lambda attention, head: qk_matrix(attention, head).T,
        "V": ov_matrix,
    }
    if kind not in readers:
        raise ValueError(f"kind must be 'K', 'Q' or 'V', got {kind!r}")
    first, second = model.layers[0], model.layers[1]
    scores = torch.zeros(second.num_heads, first.num_heads)
    for reader_head in range(second.num_heads):
        for writer_head in range(first.num_heads):
            reader = readers[kind](second, reader_head)
            scores[reader_head, writer_head] = composition_score(reader, ov_matrix(first, writer_head))
    return scores


def random_composition_scores(d_model, head_dim, draws, generator):
    """``draws`` composition scores of random W_QK and W_OV of the model's shapes (rank head_dim).

    The baseline: two matrices that were never trained to fit each other still score above 0,
    and how much depends on the sizes, so a trained score means something only next to this.
    """
    # a size of 0 would give empty matrices and a score of 0 / 0
    d_model, head_dim = _validate.positive_int(d_model, "d_model"), _validate.positive_int(head_dim, "head_dim")
    draws = _validate.positive_int(draws, "draws")
    scores = []
    for _ in range(draws):
        w_q, w_k, w_v = (torch.randn(head_dim, d_model, generator=generator) for _ in range(3))
        w_o = torch.randn(d_model, head_dim, generator=generator)
        scores.append(composition_score(w_q.T @ w_k, w_o @ w_v))
    return torch.tensor(scores)


# ---------------------------------------------------------------------------
# The path intervention: the induction head's keys without the previous-token head
# ---------------------------------------------------------------------------


@torch.no_grad()
def path_patched_logits(model, tokens, writers, readers, path="key"):
    """(logits, the readers' weights [B, readers, S, S]) when layer-1 heads read a stream without layer-0 heads.

    writers, readers: a head (int) or a list of heads of layer 0 and layer 1; path: "key",
    "query" or "value", the input of the readers through which the writers' output is removed.
    Everything else (the other heads, the readers' other inputs, the writers' direct path to
    the logits) is unchanged.
    """
    if path not in ("key", "query", "value"):
        raise ValueError(f"path must be 'key', 'query' or 'value', got {path!r}")
    # a head listed twice would be removed (or patched) twice
    writers = _validate.head_list(writers, model.layers[0].num_heads, "writers")
    readers = _validate.head_list(readers, model.layers[1].num_heads, "readers")
    _, streams, per_head, _ = model.run(tokens)
    stream, without = streams[1], streams[1] - per_head[0][:, writers].sum(1)
    inputs = {"query": stream, "key": stream, "value": stream, path: without}
    mask = causal_mask(tokens.shape[1], device=tokens.device)
    layer = model.layers[1]
    patched = head_outputs(layer, inputs["query"], inputs["key"], inputs["value"], mask)[:, readers]
    # swap the readers' outputs in the final stream for their patched outputs
    final = streams[2] - per_head[1][:, readers].sum(1) + patched.sum(1)
    return model.unembed(final), layer.attention_weights[:, readers]


# ---------------------------------------------------------------------------
# Ablation, with intervals
# ---------------------------------------------------------------------------


@torch.no_grad()
def second_half_loss(logits, tokens, half_len):
    """[B]: each sequence's mean loss on the second half (the part an induction head can predict)."""
    half_len = _validate.repeat_losses(logits, tokens, half_len)
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
    return losses[:, half_len:].mean(-1)


def lookup_floor(tokens, half_len):
    """[B]: each sequence's second-half loss for a perfect lookup by the current token alone.

    Such a lookup finds every earlier position holding the current token and bets on what came
    next there, in proportion to how often: certain (loss 0) where the token occurs once before,
    -log(share of right successors) where it occurs several times with different ones. An
    induction head keys on the current token only, so this is the floor of its kind of copying.
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
        raise ValueError("tokens must be integer token ids [batch, T], each row one half repeated")
    half_len = _validate.repeated_half(tokens.shape[1], half_len, min_half=2)
    losses = []
    for t in range(half_len, tokens.shape[1] - 1):  # predict token t + 1 from token t
        earlier = tokens[:, :t] == tokens[:, t : t + 1]  # [B, t]: positions j < t holding the same token
        right = earlier & (tokens[:, 1 : t + 1] == tokens[:, t + 1 : t + 2])  # ... followed by the right one
        losses.append(-(right.sum(1).double() / earlier.sum(1)).log())  # position t - half_len is always both
    return torch.stack(losses, dim=1).mean(1).float()


@torch.no_grad()
def copy_share(model, tokens, half_len, head):
    """The share of second-half predictions whose top token, read from layer-1 ``head``'s output alone
    (its direct path through the unembedding, no bias), is the right one: how often that head copies."""
    head = _validate.head_list(head, model.num_heads, "head")[0]
    per_head = model.run(tokens)[2]  # checks the tokens first
    half_len = _validate.repeated_half(tokens.shape[1], half_len, min_half=2)
    direct = per_head[1][:, head] @ model.unembed.weight.T  # [B, S, V]: what the head alone says
    predicted = direct[:, half_len:-1].argmax(-1)  # at positions half_len .. T - 2
    return (predicted == tokens[:, half_len + 1 :]).float().mean().item()


def bootstrap_interval(per_sequence, draws=1000, level=0.95, seed=0):
    """(mean, low, high): a percentile bootstrap interval of the mean of per_sequence [n], one value a sequence."""
    _validate.per_sequence_values(per_sequence, draws, level)
    g = torch.Generator().manual_seed(seed)
    n = len(per_sequence)
    means = per_sequence[torch.randint(n, (draws, n), generator=g)].mean(-1)
    tail = (1 - level) / 2
    low, high = torch.quantile(means.double(), torch.tensor([tail, 1 - tail], dtype=torch.float64))
    return per_sequence.mean().item(), low.item(), high.item()


# ---------------------------------------------------------------------------
# The stored runs of scripts/train_induction.py
# ---------------------------------------------------------------------------


def load_runs(path=None):
    """The settings and per-seed histories stored by scripts/train_induction.py."""
    return json.loads(Path(path or DATA_DIR / "induction_runs.json").read_text())


def load_model(seed, path=None):
    """The model trained from ``seed`` by scripts/train_induction.py, in eval mode."""
    stored = torch.load(Path(path or DATA_DIR / "induction_weights.pt"), weights_only=True)
    seed = _validate.stored_seed(seed, sorted(int(s) for s in stored["models"]))
    settings = {**SETTINGS, **stored["settings"]}
    model = make_model(settings)
    model.load_state_dict(stored["models"][str(seed)])
    return model.eval()
