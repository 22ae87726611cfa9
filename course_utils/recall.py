"""Associative recall: how many key-value pairs can a model look up again? (lesson 12)

Multi-query associative recall (Arora, Eyuboglu, Timalsina, Johnson, Poli, Zou, Rudra and
Ré 2023, "Zoology: Measuring and Improving Recall in Efficient Language Models"): a
sequence shows ``P`` pairs (key, value), then asks for the values of some of its keys.
Here each pair is one token that carries both ids (the sum of a key embedding and a
value embedding), and a query is a token with a key and the value "?" (id
``QUESTION``). So one mixing layer can answer: the query finds its key, reads the value.
Keys are distinct within a sequence; values are random; chance is 1 in ``NUM_VALUES``.

    tokens, targets = recall_sequences(keys, values, queries)     # the lesson's exercise
    tokens, targets, distances = random_recall_batch(64, 16, 8, generator)
    model = RecallModel("delta")                                   # or any of MIXERS and VARIANTS
    history = train_on_recall(model, steps=1500, seed=0)
    accuracy_by_pairs(model, eval_sets)                            # {pairs: accuracy}
    present_value_accuracy(eval_sets)                              # {pairs: accuracy of a guess among the values shown}
    stored = stored_results()                                      # what scripts/train_recall.py stored in data/

Every model is embedding -> one mixer (with a residual) -> LayerNorm -> read-out over
the values. The mixers: softmax attention, linear attention, the delta rule as DeltaNet
has it (queries and keys through SiLU, then L2-normalised: Yang, Wang, Zhang, Shen and Kim
2024), sliding-window attention (each query sees its own and the window - 1 tokens
before), and a GRU whose hidden size makes its parameter count as close as it gets to the
attention mixers'. ``VARIANTS``: the delta rule without the SiLU (the lesson's exercise, L2
only), and two models of two mixers each: a delta layer then a softmax layer (a hybrid, as
in the 2025-26 models that mix them) and, as its control, two delta layers.
"""

import json

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils import _validate
from course_utils.attention import causal_mask, scaled_dot_product_attention
from course_utils.data import data_path
from course_utils.linear_attention import delta_rule, linear_attention_parallel
from course_utils.modern import sliding_window_mask
from course_utils.training import fit, training_step

__all__ = [
    "NUM_KEYS",
    "NUM_VALUES",
    "QUESTION",
    "MIXERS",
    "VARIANTS",
    "recall_sequences",
    "random_recall_batch",
    "RecallModel",
    "count_parameters",
    "gru_hidden_size",
    "state_numbers",
    "train_on_recall",
    "evaluation_sets",
    "accuracy_by_pairs",
    "accuracy_by_distance",
    "present_value_accuracy",
    "RESULTS_FILE",
    "stored_results",
]

NUM_KEYS = 64
NUM_VALUES = 64
QUESTION = NUM_VALUES  # the value id of a query token: "which value goes with this key?"
MIXERS = ("softmax", "linear", "delta", "window", "gru")  # one mixing layer each
VARIANTS = ("delta-no-silu", "delta+delta", "delta+softmax")
_LAYERS = {"delta+delta": ("delta", "delta"), "delta+softmax": ("delta", "softmax")}  # first layer first
RESULTS_FILE = "recall_results.json"  # what scripts/train_recall.py stored, in data/


def recall_sequences(keys, values, queries):
    """The pairs, then the queries: (tokens [B, P + Q, 2], targets [B, P + Q]).

    keys, values: [B, P] ids; queries: [B, Q] indices of the pairs asked for.
    tokens[..., 0] is a key id, tokens[..., 1] a value id (QUESTION on the queries);
    targets are -100 (ignored by the loss) on the pairs and the asked value on each query.
    """
    _validate.recall_ids(keys, values, queries, NUM_KEYS, NUM_VALUES)
    asked_keys = keys.gather(1, queries)  # [B, Q]: the key of each pair asked for
    answers = values.gather(1, queries)  # [B, Q]: and its value, what the model must say
    pairs = torch.stack([keys, values], dim=-1)  # [B, P, 2]
    questions = torch.stack([asked_keys, torch.full_like(asked_keys, QUESTION)], dim=-1)  # [B, Q, 2]
    nothing_to_say = torch.full_like(keys, -100)  # no target on a pair: it only shows information
    return torch.cat([pairs, questions], dim=1), torch.cat([nothing_to_say, answers], dim=1)


def random_recall_batch(batch_size, num_pairs, num_queries, generator=None):
    """Random sequences: (tokens, targets, distances [B, Q]) with ``distances`` from each query back to its pair."""
    batch_size = _validate.positive_int(batch_size, "batch_size")
    num_pairs = _validate.positive_int(num_pairs, "num_pairs")
    num_queries = _validate.positive_int(num_queries, "num_queries")
    if num_pairs > NUM_KEYS or num_queries > num_pairs:
        raise ValueError(f"need num_queries <= num_pairs <= {NUM_KEYS}, got {num_queries} and {num_pairs}")
    keys = torch.rand(batch_size, NUM_KEYS, generator=generator).argsort(dim=1)[:, :num_pairs]  # distinct
    values = torch.randint(0, NUM_VALUES, (batch_size, num_pairs), generator=generator)
    queries = torch.rand(batch_size, num_pairs, generator=generator).argsort(dim=1)[:, :num_queries]
    tokens, targets = recall_sequences(keys, values, queries)
    distances = num_pairs + torch.arange(num_queries) - queries  # query j sits at position P + j
    return tokens, targets, distances


class _Attention(nn.Module):
    """One head of softmax, linear, delta-rule or sliding-window attention, d_model -> d_model."""

    def __init__(self, d_model, kind, window):
        super().__init__()
        self.kind, self.window = kind, window
        self.query_linear = nn.Linear(d_model, d_model, bias=False)
        self.key_linear = nn.Linear(d_model, d_model, bias=False)
        self.value_linear = nn.Linear(d_model, d_model, bias=False)
        self.output_linear = nn.Linear(d_model, d_model, bias=False)
        if kind.startswith("delta"):  # DeltaNet's writing strength, one per token, sigmoid -> (0, 1)
            self.beta_linear = nn.Linear(d_model, 1)

    def forward(self, x):
        q, k, v = self.query_linear(x), self.key_linear(x), self.value_linear(x)
        T = x.shape[1]
        if self.kind == "softmax":
            out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, x.device))
        elif self.kind == "window":
            out, _ = scaled_dot_product_attention(q, k, v, sliding_window_mask(T, self.window, device=x.device))
        elif self.kind == "linear":
            out = linear_attention_parallel(q, k, v)
        else:
            if self.kind == "delta":  # DeltaNet: SiLU first; delta_rule then L2-normalises q and k
                q, k = F.silu(q), F.silu(k)
            out = delta_rule(q, k, v, torch.sigmoid(self.beta_linear(x))[..., 0])
        return self.output_linear(out)


class _GRU(nn.Module):
    def __init__(self, d_model, hidden_size):
        super().__init__()
        self.gru = nn.GRU(d_model, hidden_size, batch_first=True)
        self.output_linear = nn.Linear(hidden_size, d_model)

    def forward(self, x):
        states, _ = self.gru(x)  # state t has read tokens 0..t
        return self.output_linear(states)


def _mixer_parameters(d_model, hidden_size):
    gru = 3 * (d_model * hidden_size + hidden_size * hidden_size + 2 * hidden_size)
    return gru + hidden_size * d_model + d_model


def gru_hidden_size(d_model):
    """The GRU hidden size whose mixer has the parameter count closest to one attention head's 4 d_model^2."""
    d_model = _validate.positive_int(d_model, "d_model")
    target = 4 * d_model * d_model
    return min(range(1, 4 * d_model), key=lambda h: abs(_mixer_parameters(d_model, h) - target))


def _one_mixer(kind, d_model, window):
    return _GRU(d_model, gru_hidden_size(d_model)) if kind == "gru" else _Attention(d_model, kind, window)


class RecallModel(nn.Module):
    """Key and value embeddings -> one mixer (two for "delta+...") with a residual -> LayerNorm -> scores over the values."""

    def __init__(self, mixer, d_model=32, window=16):
        super().__init__()
        if mixer not in MIXERS + VARIANTS:
            raise ValueError(f"mixer must be one of {MIXERS + VARIANTS}, got {mixer!r}")
        d_model, window = _validate.positive_int(d_model, "d_model"), _validate.positive_int(window, "window")
        self.mixer_name, self.d_model, self.window = mixer, d_model, window
        self.kinds = _LAYERS.get(mixer, (mixer,))
        self.key_embedding = nn.Embedding(NUM_KEYS, d_model)
        self.value_embedding = nn.Embedding(NUM_VALUES + 1, d_model)  # + 1: QUESTION
        layers = [_one_mixer(kind, d_model, window) for kind in self.kinds]
        self.mixer = layers[0] if len(layers) == 1 else nn.ModuleList(layers)
        self.norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, NUM_VALUES)

    def forward(self, tokens):
        # [B, T] ids (no pair axis) would be read as B pairs and run silently for some mixers
        _validate.recall_tokens(tokens, NUM_KEYS, NUM_VALUES)
        x = self.key_embedding(tokens[..., 0]) + self.value_embedding(tokens[..., 1])  # one token, both ids
        for layer in self.mixer if isinstance(self.mixer, nn.ModuleList) else [self.mixer]:
            x = x + layer(x)
        return self.readout(self.norm(x))


def count_parameters(module):
    return sum(p.numel() for p in module.parameters())


def state_numbers(model, seq_len):
    """How many numbers the mixer keeps while it decodes token ``seq_len``: what it can recall from."""
    d, seq_len = model.d_model, _validate.positive_int(seq_len, "seq_len")
    numbers = {
        "softmax": 2 * d * seq_len,  # every key and value: the KV cache
        "window": 2 * d * min(seq_len, model.window),
        "linear": d * d + d,  # S and z
        "delta": d * d,  # S
        "delta-no-silu": d * d,
        "gru": gru_hidden_size(d),  # the hidden state
    }
    return sum(numbers[kind] for kind in model.kinds)  # a model of two mixers keeps both


def evaluation_sets(pair_counts, num_queries=8, size=256, seed=1000):
    """{pairs: (tokens, targets, distances)}: fixed held-out sequences, drawn with their own seed."""
    generator = torch.Generator().manual_seed(seed)
    return {p: random_recall_batch(size, p, min(p, num_queries), generator) for p in pair_counts}


def _query_predictions(model, tokens, num_queries):
    was_training = model.training
    model.eval()
    with torch.no_grad():
        predictions = model(tokens).argmax(-1)[:, -num_queries:]
    model.train(was_training)
    return predictions


def accuracy_by_pairs(model, eval_sets):
    """{pairs: share of queries answered right} on the held-out sets."""
    result = {}
    for pairs, (tokens, targets, distances) in eval_sets.items():
        num_queries = distances.shape[1]
        right = _query_predictions(model, tokens, num_queries) == targets[:, -num_queries:]
        result[pairs] = right.float().mean().item()
    return result


def accuracy_by_distance(model, tokens, targets, distances):
    """(distances [n], accuracy [n]): the share of right answers for each distance from query back to pair."""
    _validate.recall_tokens(tokens, NUM_KEYS, NUM_VALUES)
    _validate.recall_answers(tokens, targets, distances)
    num_queries = distances.shape[1]
    right = (_query_predictions(model, tokens, num_queries) == targets[:, -num_queries:]).float()
    found = distances.unique()
    return found, torch.stack([right[distances == d].mean() for d in found])


def present_value_accuracy(eval_sets):
    """{pairs: expected accuracy of answering with the value of a pair drawn at random from the sequence}.

    A model that knows which values were shown but not which key went with which scores this:
    about 1 / pairs, since most values are shown once (it is above 1 / NUM_VALUES, plain chance).
    """
    result = {}
    for pairs, (tokens, targets, distances) in eval_sets.items():
        num_queries = distances.shape[1]
        shown = tokens[:, :pairs, 1]  # [B, P]: the values of the pairs
        answers = targets[:, -num_queries:]  # [B, Q]
        result[pairs] = (shown[:, None, :] == answers[:, :, None]).float().mean().item()  # share of pairs that match
    return result


class _Stopped(Exception):
    """Raised by the training step once ``stop_after`` steps are done."""


def train_on_recall(
    model, pair_counts=(4, 8, 16, 32, 64), num_queries=8, steps=1500, batch_size=64, lr=1e-2, seed=0,
    eval_sets=None, eval_every=250, progress=True, stop_after=None,
):  # fmt: skip
    """Train on fresh random sequences (a number of pairs drawn per batch) with the course's loop.

    The held-out sets use another seed (``evaluation_sets``); with 64 keys and random values a
    training sequence equal to a held-out one is vanishingly rare (far below one in a billion).
    ``stop_after``: do only the first steps of the same run (same batches, same learning rates,
    scheduled for ``steps``): the history then has their losses and, if ``eval_sets`` is given,
    the accuracy after the last of them.
    """
    pair_counts = tuple(_validate.positive_int(p, "pair count") for p in pair_counts)
    losses = []

    def sample_batch(generator):
        pairs = pair_counts[torch.randint(len(pair_counts), (1,), generator=generator).item()]
        tokens, targets, _ = random_recall_batch(batch_size, pairs, min(pairs, num_queries), generator)
        return tokens, targets

    def step(model, optimizer, inputs, targets):
        if stop_after is not None and len(losses) == stop_after:
            raise _Stopped
        losses.append(training_step(model, optimizer, inputs, targets))
        return losses[-1]

    def evaluate():
        accuracy = accuracy_by_pairs(model, eval_sets)
        return {f"accuracy_{p}": a for p, a in accuracy.items()}

    try:
        return fit(
            model, sample_batch, steps=steps, lr=lr, seed=seed, evaluate=evaluate if eval_sets else None,
            eval_every=eval_every, progress=progress, step=step, desc=f"training {model.mixer_name}",
        )  # fmt: skip
    except _Stopped:
        model.eval()
        history = {"loss": losses, "eval_steps": []}
        if eval_sets:
            history["eval_steps"].append(len(losses))
            for name, value in evaluate().items():
                history[name] = [value]
        return history


def stored_results():
    """What ``scripts/train_recall.py`` stored: its settings and every run's accuracies.

    Found through the package, so a copy of the lesson runs from any folder.
    """
    return json.loads(data_path(RESULTS_FILE).read_text())
