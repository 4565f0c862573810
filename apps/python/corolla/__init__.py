"""Corolla's Python client: a model whose blocks run on a swarm, in the shape Petals and transformers give it.

    from corolla import AutoDistributedModelForCausalLM, AutoTokenizer

    model = AutoDistributedModelForCausalLM.from_pretrained("org/name", initial_peers=["127.0.0.1:31330"])
    tokenizer = AutoTokenizer.from_pretrained("org/name")
    inputs = tokenizer("A cat sat", return_tensors="np")["input_ids"]
    outputs = model.generate(inputs, max_new_tokens=5)
    print(tokenizer.decode(outputs[0]))

The client talks to the swarm through Corolla's client actors in this process (the C++ extension _corolla), not
through HTTP. Models are a local folder or .gguf file, or a Hugging Face Hub name (only the tokenizer, embeddings,
final norm and LM head are fetched).
"""
import contextlib

import numpy as np

from . import _corolla
from ._corolla import RemoteSession, Tokenizer  # noqa: F401

__all__ = ["AutoDistributedModelForCausalLM", "DistributedModelForCausalLM", "AutoTokenizer", "InferenceSession"]


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def _rows(input_ids):
    """input_ids (list, numpy array or torch tensor; one sequence or a batch) as a list of lists of ints, and
    whether it came as a torch tensor."""
    torch = _torch()
    is_torch = torch is not None and isinstance(input_ids, torch.Tensor)
    if isinstance(input_ids, (list, tuple)) and input_ids and isinstance(input_ids[0], (list, tuple, np.ndarray)):
        return [[int(x) for x in row] for row in input_ids], False  # rows of different lengths
    a = np.asarray(input_ids.cpu().numpy() if is_torch else input_ids)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise ValueError("input_ids must be [batch, tokens] or [tokens]")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError("input_ids must hold integers")
    return [[int(x) for x in row] for row in a], is_torch


def _output(rows, is_torch, pad_id):
    width = max(len(r) for r in rows)
    rows = [r + [pad_id] * (width - len(r)) for r in rows]  # shorter rows padded on the right, as transformers does
    out = np.asarray(rows, dtype=np.int64)
    return _torch().from_numpy(out) if is_torch else out


class InferenceSession:
    """A conversation whose attention caches stay on the servers between generate() calls (Petals'
    model.inference_session). Use as a context manager; closing frees the servers' caches."""

    def __init__(self, remote, max_length):
        self._session = remote.open_session(int(max_length))

    @property
    def position(self):
        return self._session.position

    @property
    def max_length(self):
        return self._session.max_length

    def close(self):
        self._session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class DistributedModelForCausalLM:
    def __init__(self, name_or_path, initial_peers, swarm_id="", mode="push", request_timeout=30.0):
        if isinstance(initial_peers, str):
            initial_peers = [initial_peers]
        self._remote = _corolla.RemoteModel(name_or_path, list(initial_peers or []), swarm_id, mode,
                                            float(request_timeout))
        self.name_or_path = name_or_path
        self.config = type("Config", (), {
            "vocab_size": self._remote.vocab_size, "hidden_size": self._remote.hidden_size,
            "num_hidden_layers": self._remote.num_blocks, "eos_token_id": self._remote.eos_token_ids,
            # What shorter rows of a batch's output are padded with: the first end token, as transformers pads.
            "pad_token_id": (self._remote.eos_token_ids or [0])[0],
        })()

    def inference_session(self, max_length):
        return InferenceSession(self._remote, max_length)

    def generate(self, input_ids=None, max_new_tokens=None, max_length=None, do_sample=False, temperature=1.0,
                 top_k=None, top_p=None, repetition_penalty=None, session=None, seed=0, ignore_eos=False):
        """Generates after each row of input_ids; returns [batch, tokens] ids, each row its input followed by the new
        tokens (as transformers' generate). With `session`, input_ids continue the session's conversation (one
        row, or None to go on from the last generated token, which is fed first either way, as in Petals)."""
        rows, is_torch = _rows([] if input_ids is None else input_ids)
        if not rows:
            rows = [[]]
        if max_new_tokens is None:
            if max_length is None:
                raise ValueError("give max_new_tokens (or max_length)")
            held = session.position if session is not None else 0
            max_new_tokens = int(max_length) - held - len(rows[0])
        sampling = (int(max_new_tokens), bool(do_sample), float(temperature if do_sample else 1.0),
                    int(top_k or 0), float(top_p if top_p is not None else 1.0),
                    float(repetition_penalty if repetition_penalty is not None else 1.0), int(seed), not ignore_eos)
        if session is not None:
            if len(rows) != 1:
                raise ValueError("a session holds one sequence: give one row of input_ids")
            new = session._session.generate(rows[0], *sampling)
            return _output([rows[0] + new], is_torch, self.config.pad_token_id)
        if any(not r for r in rows):
            raise ValueError("input_ids is empty")
        outputs = [r + self._remote.generate(r, *sampling) for r in rows]
        return _output(outputs, is_torch, self.config.pad_token_id)

    # The pieces prompt tuning trains with: embeddings and logits here, the blocks on the swarm.
    def embed(self, input_ids):
        rows, _ = _rows(input_ids)
        flat = [i for r in rows for i in r]
        return self._remote.embed(flat, len(rows))

    def logits(self, hidden):
        hidden = np.ascontiguousarray(hidden, dtype=np.float32)
        flat = self._remote.logits(hidden)
        return flat.reshape(hidden.shape[0], hidden.shape[1], -1)

    def remote_forward(self, hidden, positions=None):
        """The swarm's blocks on hidden [batch, tokens, hidden]: (output, pass), pass naming it for remote_backward."""
        hidden = np.ascontiguousarray(hidden, dtype=np.float32)
        if positions is None:
            positions = list(range(hidden.shape[1]))
        return self._remote.forward(hidden, list(positions))

    def remote_backward(self, pass_id, grad_output):
        """The gradient of a remote_forward's input for the gradient of its output."""
        return self._remote.backward(pass_id, np.ascontiguousarray(grad_output, dtype=np.float32))

    def remote_blocks(self):
        """The swarm's blocks as a torch.autograd function of hidden states (torch must be installed):
        out = model.remote_blocks()(hidden), and out.backward() brings the gradient back through the swarm."""
        torch = _torch()
        if torch is None:
            raise ImportError("remote_blocks needs torch")
        model = self

        class RemoteBlocks(torch.autograd.Function):
            @staticmethod
            def forward(ctx, hidden):
                out, pass_id = model.remote_forward(hidden.detach().cpu().float().numpy())
                ctx.pass_id = pass_id
                return torch.from_numpy(out).to(hidden.dtype)

            @staticmethod
            def backward(ctx, grad_output):
                grad = model.remote_backward(ctx.pass_id, grad_output.detach().cpu().float().numpy())
                return torch.from_numpy(grad).to(grad_output.dtype)

        return RemoteBlocks.apply


class AutoDistributedModelForCausalLM:
    @staticmethod
    def from_pretrained(name_or_path, initial_peers, swarm_id="", mode="push", request_timeout=30.0):
        """A model by local path or Hub name ("org/name[@revision]"), its blocks served by the swarm that
        initial_peers (HOST:PORT of any of its servers or DHT nodes, or Petals multiaddresses) belong to."""
        return DistributedModelForCausalLM(name_or_path, initial_peers, swarm_id, mode, request_timeout)


class _CorollaTokenizer:
    """Corolla's own tokenizer in transformers' shape, for machines without transformers."""

    def __init__(self, path):
        self._tok = Tokenizer(path)
        self.bos_token_id = self._tok.bos_token_id if self._tok.bos_token_id >= 0 else None
        self.eos_token_id = self._tok.eos_token_id if self._tok.eos_token_id >= 0 else None

    def encode(self, text, add_special_tokens=True):
        return self._tok.encode(text, add_special_tokens)

    def decode(self, ids, skip_special_tokens=False):
        rows, _ = _rows(ids)
        return self._tok.decode(rows[0], skip_special_tokens)

    def __call__(self, text, return_tensors=None, add_special_tokens=True):
        texts = [text] if isinstance(text, str) else list(text)
        ids = [self.encode(t, add_special_tokens) for t in texts]
        if return_tensors is None:
            return {"input_ids": ids[0] if isinstance(text, str) else ids}
        if len({len(r) for r in ids}) != 1:
            raise ValueError("texts of different lengths cannot form one tensor")
        out = np.asarray(ids, dtype=np.int64)
        if return_tensors == "pt":
            out = _torch().from_numpy(out)
        elif return_tensors != "np":
            raise ValueError("return_tensors must be 'np' or 'pt'")
        return {"input_ids": out}


class AutoTokenizer:
    @staticmethod
    def from_pretrained(name_or_path, prefer_transformers=True):
        """transformers' AutoTokenizer when it is installed (and prefer_transformers), else Corolla's own; a Hub
        name is fetched into the shared Hub cache either way."""
        path = _corolla.locate_model(name_or_path)
        if prefer_transformers:
            try:
                import transformers
                return transformers.AutoTokenizer.from_pretrained(path)
            except ImportError:
                pass
        return _CorollaTokenizer(path)
