"""Structural and conceptual uncertainty: definitions against direct computation, and the probe offline."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agentuq_nb.uq.embeddings import default_embedder
from agentuq_nb.uq.structural import Choice, conceptual_parts, probe, sparkline, structural_uncertainty


def test_structural_is_mean_over_choices_of_mean_token_entropy():
    choices = [Choice("a", ["a"], np.array([0.2, 0.4]), np.array([0.0, 0.0])),
               Choice("b", ["b"], np.array([0.9]), np.array([0.0]))]
    assert structural_uncertainty(choices) == pytest.approx((0.3 + 0.9) / 2)


def test_conceptual_parts_match_a_direct_computation():
    emb = default_embedder()
    texts = ["The cat sat.", "A dog ran."]
    tokens = [["The", " cat", " sat."], ["A", " dog", " ran."]]
    topk = [[["The", "A"], [" cat", " dog"], [" sat.", " ran."]], [["A", "The"], [" dog", " cat"], [" ran.", " sat."]]]
    pairwise, partial, per_token = conceptual_parts(texts, tokens, topk, emb)
    e = emb.embed(texts)
    assert pairwise == pytest.approx(1 - float(e[0] @ e[1]), abs=1e-6)
    expected = []
    for c in range(2):
        partials = []
        prefix = ""
        for tok, alts in zip(tokens[c], topk[c]):
            partials += [prefix + a for a in alts if a != tok]
            prefix += tok
        p = emb.embed(partials)
        expected.append(float(np.mean(1 - p @ e[c])))
    assert partial == pytest.approx(np.mean(expected), abs=1e-6)
    assert len(per_token[0]) == 3 and np.isfinite(per_token[0]).all()


def test_probe_runs_offline_and_is_reproducible():
    a = probe("Who was the first president of the USA?", n=2, max_tokens=10, seed=3)
    b = probe("Who was the first president of the USA?", n=2, max_tokens=10, seed=3)
    assert 0.0 <= a.structural <= 1.0 and 0.0 <= a.conceptual <= 1.0
    assert (a.structural, a.conceptual) == (b.structural, b.conceptual)
    assert len(a.choices) == 2 and all(len(c.token_entropy) == len(c.tokens) for c in a.choices)
    assert len(sparkline(a.choices[0].token_entropy)) == len(a.choices[0].tokens)


def test_probe_cli_prints_both_numbers(tmp_path):
    exe = Path(sys.executable).with_name("agentuq-nb")
    done = subprocess.run([str(exe), "probe", "Write three sentences.", "--n", "2", "--max-tokens", "8",
                           "--plot", str(tmp_path / "p.png")], capture_output=True, text=True, timeout=600,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "structural uncertainty" in done.stdout and "conceptual uncertainty" in done.stdout
    assert (tmp_path / "p.png").stat().st_size > 1000
