"""Stub out torchvision and sgl_kernel (CUDA-only kernels; imported at module level by mem_cache/ but never called on the
front-end path measured here). torchvision: only multimodal configs import it."""
import sys, types, importlib.abc, importlib.machinery
from unittest.mock import MagicMock

class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    PREFIXES = ("torchvision", "sgl_kernel")
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.PREFIXES:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        m = MagicMock(name=spec.name); m.__path__ = []; m.__spec__ = spec
        m.__name__ = spec.name
        return m
    def exec_module(self, module):
        pass
sys.meta_path.insert(0, _Finder())

# make transformers treat torchvision as absent (the stub has no version)
import transformers.utils.import_utils as _iu
_orig = _iu._is_package_available
def _is_pkg(name, *a, **k):
    if name == "torchvision":
        return (False, "N/A") if (a or k) else (False, "N/A")
    return _orig(name, *a, **k)
_iu._is_package_available = _is_pkg
for _f in ("is_torchvision_available", "is_torchvision_v2_available", "is_torchvision_greater_or_equal"):
    _g = getattr(_iu, _f, None)
    if hasattr(_g, "cache_clear"):
        _g.cache_clear()
