"""Host-side fitting: the cost model's parameters from measured rows (``perfmodel fit DIR``).

No module here imports torch (tests/test_architecture.py checks it): the rows come from ``perfmodel.measure``
(or ``perfmodel import``) through ``perfmodel.measure.store``, a plain JSON-lines reader.

- :mod:`.latency`: kernel latency (GEMM, attention, memory kernels, MoE), launch costs, held-out validation;
- :mod:`.layers`: whole decoder layers, predicted, never fitted;
- :mod:`.collectives`: collective alpha and bus bandwidth, overlap, whole TP layers;
- :mod:`.training`: training kernels; :mod:`.power`: the power model;
- :mod:`.directory`: ``fit_directory``, the command's whole run; :mod:`.docs`: the committed calibration docs.
"""
