"""Sacred, imported once without its import-time warnings.

sacred 0.8.7 imports `pkg_resources`, which setuptools deprecates (and whose
import warns about other packages' namespace declarations). Nothing to fix on our
side, and under `-W error` (our tests) the warning would abort the import.
"""

import warnings

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
