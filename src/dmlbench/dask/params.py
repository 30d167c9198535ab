"""Routed parameters, as skorch routes them: the estimator's constructor takes
``module__*``, ``optimizer__*``, ``loss__*`` and ``batch_size__*`` keywords besides its
own, keeps them unchanged as attributes, and passes each route's to what it builds.
``get_params``, ``set_params``, ``clone`` and pickling see them as parameters, so
``Pipeline`` and ``GridSearchCV`` can search them."""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Self

from sklearn.base import BaseEstimator

ROUTES = ("module", "optimizer", "loss", "batch_size")
PREFIXES = tuple(f"{route}__" for route in ROUTES)


def suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


class RoutedParams(BaseEstimator):
    """A scikit-learn estimator with routed parameters (see the module)."""

    def _take_routed(self, kwargs: dict[str, Any]) -> None:
        """Keep the constructor's routed keywords; any other is refused."""
        for key, value in kwargs.items():
            if not key.startswith(PREFIXES):
                raise TypeError(
                    f"{type(self).__name__} got an unknown parameter {key!r}"
                    f"{suggest(key, self._param_names())}; routed parameters "
                    f"start with {', '.join(PREFIXES)}"
                )
            setattr(self, key, value)

    @classmethod
    def _param_names(cls) -> list[str]:
        return sorted(super()._get_param_names())

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's parameters plus the routed ones (``module__features`` …).
        Never recurses into a damper: its options are the ``batch_size__*`` parameters."""
        params = {name: getattr(self, name) for name in self._param_names()}
        params.update({k: v for k, v in vars(self).items() if k.startswith(PREFIXES)})
        return params

    def set_params(self, **params: Any) -> Self:
        known = self._param_names()
        for key, value in params.items():
            if key not in known and not key.startswith(PREFIXES):
                raise ValueError(
                    f"{type(self).__name__} has no parameter {key!r}{suggest(key, known)}"
                )
            setattr(self, key, value)
        return self

    def routed(self, route: str) -> dict[str, Any]:
        prefix = f"{route}__"
        return {k[len(prefix) :]: v for k, v in self.get_params().items() if k.startswith(prefix)}

    def _build(self, what: str, factory: Any, kwargs: dict[str, Any], *args: Any) -> Any:
        name = getattr(factory, "__name__", type(factory).__name__)
        if isinstance(factory, type):
            signature = inspect.signature(factory)
            accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
            named = [p for p in signature.parameters if p not in ("self", "params")]
            for key in kwargs:
                if not accepts_any and key not in named:
                    raise ValueError(
                        f"{name} has no parameter {key!r} (from {what}__{key}){suggest(key, named)}"
                    )
        try:
            return factory(*args, **kwargs)
        except Exception as error:
            shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
            raise ValueError(
                f"{what} {name}({shown}) failed to build: {type(error).__name__}: {error}"
            ) from None
