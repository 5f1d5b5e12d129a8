"""Importers of third-party measurement data into this project's calibration and validation formats."""
