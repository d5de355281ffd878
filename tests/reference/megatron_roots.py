"""Where the Megatron-Core reference is: the `megatron` package folders to look in — MEGATRON_LM_DIR's
megatron/ when that variable is set (a Megatron-LM checkout), else the installed megatron-core
package's (scripts/requirements-ref-nodeps.txt) — and how to name that origin in messages."""
import importlib.metadata
import importlib.util
import os


def megatron_roots():
    """(folders, origin): candidate `megatron` package folders, and a phrase naming where they came from."""
    override = os.environ.get("MEGATRON_LM_DIR")
    if override:
        return [os.path.join(os.path.abspath(override), "megatron")], f"MEGATRON_LM_DIR={override}"
    spec = importlib.util.find_spec("megatron")
    roots = list(spec.submodule_search_locations) if spec else []
    try:
        origin = f"megatron-core {importlib.metadata.version('megatron-core')}"
    except importlib.metadata.PackageNotFoundError:
        origin = "sys.path (is megatron-core installed?)"
    return roots, origin
