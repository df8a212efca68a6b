"""The benchmark model zoo: training steps for MLP, Wide ResNet, stacked LSTM and GPT.

Every model comes in two flavours (``"tf"``: tf.Variable + tf ops; ``"keras"``:
Keras 3 layers) and with two optimizers (``"sgd"``, ``"adam"``), at any size::

    step = models.build("wresnet", depth=152, width=10, batch=8, materialize=False)
    with step.context():
      g = tf_tofu.trace(step.fn, *step.input_signature)

``TINY`` holds the sizes the tests use; ``PAPER`` the sizes of Tofu's evaluation.
"""

from __future__ import annotations

from typing import Any, Callable

from tf_tofu.core.errors import TofuError
from tf_tofu.models import gpt, lstm, mlp, wresnet
from tf_tofu.models.common import DTYPES, FLAVORS, OPTIMIZERS, TrainStep

BUILDERS: dict[str, Callable[..., TrainStep]] = {
    "mlp": mlp.build,
    "wresnet": wresnet.build,
    "lstm": lstm.build,
    "gpt": gpt.build,
}

TINY: dict[str, dict[str, Any]] = {
    "mlp": dict(depth=2, width=8, batch=4, in_dim=6, classes=5),
    "wresnet": dict(depth=50, blocks=(1, 1, 1, 1), width=1, base=(4, 8, 16, 16, 32), batch=2,
                    image=32, classes=5),
    "lstm": dict(layers=2, hidden=4, steps=3, batch=2, vocab=7),
    "gpt": dict(layers=1, d_model=8, heads=2, seq=4, vocab=11, batch=2, tied=True),
    "gpt_untied": dict(layers=1, d_model=8, heads=2, seq=4, vocab=11, batch=2, tied=False),
}

PAPER: dict[str, dict[str, Any]] = {
    "wresnet152": dict(depth=152, width=10, batch=8, image=224, classes=1000),
    "wresnet101": dict(depth=101, width=10, batch=8, image=224, classes=1000),
    "wresnet50": dict(depth=50, width=10, batch=8, image=224, classes=1000),
    "lstm10": dict(layers=10, hidden=8192, steps=20, batch=8, vocab=10000),
    "gpt": dict(layers=24, d_model=2048, heads=16, seq=1024, vocab=50257, batch=8, tied=True),
}


def builder_of(key: str) -> Callable[..., TrainStep]:
  """The builder for a zoo key (``"wresnet152"``, ``"gpt_untied"`` -> its family)."""
  for family in sorted(BUILDERS, key=len, reverse=True):
    if key.startswith(family):
      return BUILDERS[family]
  raise TofuError(f"no zoo model {key!r}; families: {', '.join(sorted(BUILDERS))}")


def build(key: str, *, flavor: str = "tf", optimizer: str = "sgd", materialize: bool = True,
          dtype: str = "float32", **sizes: Any) -> TrainStep:
  """Builds zoo model ``key`` (a family name) with the given sizes and float dtype."""
  return builder_of(key)(flavor=flavor, optimizer=optimizer, materialize=materialize,
                         dtype=dtype, **sizes)


def tiny(key: str, *, flavor: str = "tf", optimizer: str = "sgd",
         materialize: bool = True, dtype: str = "float32") -> TrainStep:
  """The tiny version of ``key`` (a key of ``TINY``), as the tests use it."""
  return build(key, flavor=flavor, optimizer=optimizer, materialize=materialize, dtype=dtype,
               **TINY[key])


def paper(key: str, *, flavor: str = "tf", optimizer: str = "sgd",
          materialize: bool = False) -> TrainStep:
  """The paper-sized ``key`` (a key of ``PAPER``), unmaterialised by default."""
  return build(key, flavor=flavor, optimizer=optimizer, materialize=materialize, **PAPER[key])


__all__ = ["BUILDERS", "DTYPES", "FLAVORS", "OPTIMIZERS", "PAPER", "TINY", "TrainStep", "build",
           "builder_of", "paper", "tiny"]
