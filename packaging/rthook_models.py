"""PyInstaller runtime hook: make the embedded default pair's data packages findable.

The engine (specdec_core/models/default_pair.py) finds the GGUF parts of the embedded pair
through the *installed distributions* (importlib.metadata: dist-info RECORD), exactly as after
`pip install 'specdec-chat[embedded]'`. A bundle has no site-packages, so this hook adds a
distribution finder over a `models/` folder holding those packages unpacked (each
`<name>.dist-info/` plus `<module>/data/partNN.bin`, i.e. the wheels' contents):

    $SPECDEC_MODELS_DIR                       if set
    <folder of the executable>/models         slim bundles: the user unzips the wheels here
    <bundle internals>/models                 full bundles: put there at build time
    <App>.app/Contents/Resources/models       macOS .app

Only distribution metadata is found there: the folder is never put on sys.path, so nothing
in it can be imported. The parts are then assembled and verified (sha256) into the user cache
by the engine, as from a pip install.
"""


def _install() -> None:
    import os
    import sys
    from importlib import metadata

    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    candidates = [os.environ.get("SPECDEC_MODELS_DIR", ""), os.path.join(exe_dir, "models")]
    if getattr(sys, "_MEIPASS", None):
        candidates.append(os.path.join(sys._MEIPASS, "models"))
    candidates.append(os.path.join(exe_dir, os.pardir, "Resources", "models"))
    dirs = []
    for c in candidates:
        if c and os.path.isdir(c):
            real = os.path.realpath(c)
            if real not in dirs:
                dirs.append(real)
    if not dirs:
        return

    class EmbeddedModelsFinder:
        """A meta-path entry that finds distributions (never modules) in the models folders."""

        @staticmethod
        def find_spec(*args, **kwargs):
            return None

        @staticmethod
        def find_distributions(context=metadata.DistributionFinder.Context()):
            ctx = metadata.DistributionFinder.Context(name=context.name, path=dirs)
            return metadata.MetadataPathFinder.find_distributions(ctx)

    sys.meta_path.append(EmbeddedModelsFinder)


_install()
