"""Front end: StableHLO text -> the IR of :mod:`hlo2dace.ir`."""
