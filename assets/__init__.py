"""The project's data files, shipped as the package `specdec_assets` (pyproject.toml maps this
folder to it); specdec_core/assets.py reads them."""
