"""Every public callable of tensord, tensord.linalg, tensord.fft and tensord.nn has a docstring
(issue 33). Functions defined without one get theirs from tensord/_docs.py at import."""
import inspect

import tensord as td


def _missing():
    out = []
    for prefix, mod in (("td", td), ("linalg", td.linalg), ("fft", td.fft), ("nn", td.nn)):
        names = set(getattr(mod, "__all__", [])) | {n for n in dir(mod) if not n.startswith("_")}
        for name in sorted(names):
            f = getattr(mod, name, None)
            if f is None or not callable(f) or inspect.ismodule(f):
                continue
            if not inspect.isfunction(f) and not inspect.isclass(f) and not inspect.isbuiltin(f):
                continue  # dtype objects and other callable values
            if not inspect.getdoc(f):
                out.append(f"{prefix}.{name}")
    return out


def test_every_public_callable_has_a_docstring():
    missing = _missing()
    assert not missing, f"{len(missing)} public callables without a docstring: {' '.join(missing)}"
