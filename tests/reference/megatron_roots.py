"""Where the Megatron-Core reference is: the `megatron` package folders to look in — MEGATRON_LM_DIR's
megatron/ when that variable is set (a Megatron-LM checkout), else the installed megatron-core
package's (scripts/requirements-ref-nodeps.txt) — and how to name that origin in messages; and
one file of it loaded alone as a module (the references load single files: the package itself
needs a newer torch than Debian's)."""
import importlib.machinery
import importlib.metadata
import importlib.util
import os


def megatron_roots():
    """(folders, origin): candidate `megatron` package folders, and a phrase naming where they came from."""
    override = os.environ.get("MEGATRON_LM_DIR")
    if override:
        return [os.path.join(os.path.abspath(override), "megatron")], f"MEGATRON_LM_DIR={override}"
    spec = importlib.machinery.PathFinder.find_spec("megatron")  # sys.path, not stubs put in sys.modules
    roots = list(spec.submodule_search_locations) if spec else []
    try:
        origin = f"megatron-core {importlib.metadata.version('megatron-core')}"
    except importlib.metadata.PackageNotFoundError:
        origin = "sys.path (is megatron-core installed?)"
    return roots, origin


def load_megatron_file(module_name, *parts):
    """megatron/PARTS… of the first root holding it, executed as module MODULE_NAME; Mismatch naming
    the origin when no root holds it."""
    from ref_process import Mismatch

    roots, origin = megatron_roots()
    paths = [p for p in (os.path.join(r, *parts) for r in roots) if os.path.isfile(p)]
    if not paths:
        raise Mismatch(f"megatron/{'/'.join(parts)} not found ({origin}); run scripts/setup.sh")
    spec = importlib.util.spec_from_file_location(module_name, paths[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print(f"reference: {paths[0]} ({origin})")
    return module
