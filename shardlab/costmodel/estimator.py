"""The one convention every cost model follows (analytic and neural alike), after scikit-learn:

- configuration is the constructor's arguments, stored under the same names and never changed
  by ``fit``; :meth:`Estimator.config` reads them back, derived from ``__init__``'s signature
  (no parameter list is kept by hand), and model files store it;
- learned state ends in an underscore (``coef_fw_``, ``net_``, ``profile_`` ...), empty until
  ``fit`` or ``load``; ``profile_`` is the hardware profile of the training data (at least its
  ``name`` and ``batch_size``), ``provenance_`` and ``metrics_`` what the trainer records;
- ``fit(samples, val_samples=None) -> self`` is the one signature: typed records of
  :mod:`shardlab.profile.records` (JSON rows are accepted too and parsed once, at the top of fit);
- ``predict`` (and ``embed`` / ``predict_sums`` where a model costs incrementally) raise
  :class:`~shardlab.errors.NotFittedError` before ``fit``;
- ``save(path)`` / ``load(path)`` and the ``source`` label of Evaluations.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, Sequence

from shardlab.errors import NotFittedError


class Estimator:
    """Base of every cost model (module docstring). Subclasses set ``target``, store their
    constructor arguments as attributes of the same names, call :meth:`_reset` for the learned
    state, and implement ``fitted``, ``source``, ``fit``, ``predict``, ``save`` and ``load``."""

    #: What it predicts: ``"compute"`` or ``"comm"`` (see :mod:`shardlab.costmodel.base`).
    target: ClassVar[str] = ""

    profile_: dict[str, Any]
    provenance_: dict[str, Any]
    metrics_: dict[str, Any]

    def _reset(self) -> None:
        """Learned state shared by all models, empty (subclasses add their own)."""
        self.profile_ = {}
        self.provenance_ = {}
        self.metrics_ = {}

    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        """Names of the constructor's arguments (the configuration), from its signature."""
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))

    def config(self) -> dict[str, Any]:
        """The configuration: every constructor argument by name (``fit`` never changes it)."""
        return {k: getattr(self, k) for k in self.param_names()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.config().items())})"

    @property
    def fitted(self) -> bool:
        """Whether the learned state is there (after ``fit`` or ``load``)."""
        raise NotImplementedError

    def check_fitted(self) -> None:
        """Raise :class:`~shardlab.errors.NotFittedError` (one line, naming the model) unless fitted."""
        if not self.fitted:
            raise NotFittedError(f"{type(self).__name__}: not fitted (call fit, or load a model file)")

    @property
    def source(self) -> str:
        """Evaluation label: ``model:<name>@<profile>[batch_size=<B>]`` or ``analytic:<profile>[...]``."""
        raise NotImplementedError

    def fit(self, samples: Sequence[Any], val_samples: Sequence[Any] | None = None) -> Any:
        """Learn from measured samples (records or rows); ``val_samples``: validation data where
        the model selects on it (else the model's own rule, see each class); returns self."""
        raise NotImplementedError

    def save(self, path: str) -> None:
        """Write the model file (configuration, learned state, provenance, metrics) atomically."""
        raise NotImplementedError

    @classmethod
    def load(cls, path: str) -> Any:
        """Read a model file written by :meth:`save` (one-line errors for a foreign file)."""
        raise NotImplementedError
