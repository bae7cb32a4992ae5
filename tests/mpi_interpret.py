"""The StableHLO interpreter's ``interpreter.run_parallel`` tests for as many processes as
this MPI job has ranks (``tests/test_mpi.py`` launches it): rank 0 prints one JSON line per
test with its verdict (``hlo2dace.paralleltests``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hlo2dace import mpi, paralleltests


def main(root: Path) -> None:
    tests = [test for path in sorted(root.rglob("*.mlir"))
             for test in paralleltests.find(path, path.relative_to(root).as_posix())
             if test.size == mpi.size()]
    for result in paralleltests.run(tests):
        print(json.dumps({"id": result.id, "status": result.status,
                          "message": result.message}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
