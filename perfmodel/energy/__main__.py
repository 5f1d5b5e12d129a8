"""python -m perfmodel.energy DIR: fit the power model to a calibration folder's power rows and print it."""
from .fit import main

raise SystemExit(main())
