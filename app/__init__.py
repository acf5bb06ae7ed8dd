"""SpecDec Chat desktop app (Qt). Never imports torch on the GUI thread's import path."""
