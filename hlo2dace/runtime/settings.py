"""DaCe's settings for hlo2dace's builds and calls (DaCe's configuration is per thread)."""

from __future__ import annotations

import threading

from .. import folders

_configured = threading.local()


def configure_dace() -> None:
    """Set DaCe's options for this thread (DaCe's configuration is thread-local)."""
    if getattr(_configured, "done", False):
        return
    import dace

    folders.check_dace_config()
    dace.Config.set("compiler", "build_type", value="Release")
    dace.Config.set("debugprint", value=False)
    # DaCe's own build folder, should it need one besides each program's (``build``)
    dace.Config.set("default_build_folder", value=str(folders.native_dir() / "dace-build"))
    # arguments are made C-contiguous by TensorSpec.to_storage; reshaped ones are views
    dace.Config.set("compiler", "allow_view_arguments", value=True)
    _configured.done = True
