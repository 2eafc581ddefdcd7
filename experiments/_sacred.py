"""Sacred, imported once without its import-time warnings.

sacred 0.8.7 imports `pkg_resources`, which setuptools deprecates (and whose
import warns about other packages' namespace declarations). Nothing to fix on our
side, and under `-W error` (our tests) the warning would abort the import.

Sacred also imports pandas eagerly if it is installed (gymnax pulls it in), only
to serialise pandas objects we never log: half a second of every run's start-up.
We hide pandas while Sacred loads; it stays importable for everyone else.
"""

import sys
import warnings

_hide_pandas = "pandas" not in sys.modules
if _hide_pandas:
    sys.modules["pandas"] = None  # type: ignore[assignment]  # import -> ImportError
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
    from sacred import Experiment as Experiment
    from sacred.observers import (
        FileStorageObserver as FileStorageObserver,
        MongoObserver as MongoObserver,
    )
    from sacred.utils import (
        SacredError as SacredError,
        apply_backspaces_and_linefeeds as apply_backspaces_and_linefeeds,
    )
if _hide_pandas:
    del sys.modules["pandas"]
