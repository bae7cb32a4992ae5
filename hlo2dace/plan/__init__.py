"""The plan stage: IR-to-IR passes that decide how each op is computed (``pipeline.py``
lists them), recording each decision on the IR (``annotations.py``)."""
