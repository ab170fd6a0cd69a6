"""The random critic, one of the two controls of the evaluation (issue 14, item 6; the
other, the random proposer, is a test double: onboard.testing.team_standin.random_proposer).

- :func:`random_critic`: a critic of the trained one's shape (its card's agents, vocabulary
  and features; its hidden sizes) with weights drawn from a seed, written as ONNX with the
  critic module's MLP export beside a card that says so. If ReAd keeps its SR with it at the
  hardest levels, the trained critic carries no signal there.
"""

from __future__ import annotations

from pathlib import Path

from onboard.base.errors import UsageError
from onboard.collab.card import card_path, load_card, write_card
from onboard.collab.critic import file_sha256

__all__ = ["DEFAULT_HIDDEN", "random_critic"]

#: the hidden sizes of a trained critic whose card does not name them (train.py's default)
DEFAULT_HIDDEN = (64, 64)


def random_critic(trained: Path, out: Path, seed: int) -> Path:
    """Write ``out`` (.onnx) and its card: the shape of the critic at ``trained`` (read from
    its card, which must exist), He-initialised weights drawn with ``seed``. Needs the
    ``onnx`` package (the dev or train extra)."""
    from onboard.collab.mlp import MlpWeights, to_onnx

    card = load_card(card_path(trained))
    hidden = tuple(card.training.hidden) or DEFAULT_HIDDEN
    weights = MlpWeights.random(
        len(card.features), len(card.agents), len(card.vocabulary), hidden, seed
    )
    out = out.with_suffix(".onnx")
    try:
        to_onnx(weights, out)
    except ImportError as exc:
        raise UsageError(
            "--critic random writes an ONNX model: it needs the onnx package "
            "(pip install 'onboard[dev]' or 'onboard[train]')"
        ) from exc
    training = card.training.model_copy(
        update={
            "behaviour": f"none: random weights (control), seed {seed}",
            "steps": 0,
            "trainer": "",
            "hidden": list(hidden),
            "seed": seed,
        }
    )
    write_card(
        card.model_copy(update={"sha256": file_sha256(out), "training": training}), card_path(out)
    )
    return out
