"""The blind cross-generation backtest's accuracy, pinned (tests/test_accuracy_pins.py holds the rules)."""
from __future__ import annotations

import pytest
from test_accuracy_pins import _check, _tool


@pytest.mark.slow
def test_blind_backtest_pins():
    _check("backtest_blind", _tool().SLOW["backtest_blind"]())
