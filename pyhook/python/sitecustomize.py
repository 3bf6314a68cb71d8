"""dlrr's Python entry point: first on PYTHONPATH, put there by dlrecord.

Installs the hook (dormant until torch is imported), then runs the user's own
sitecustomize further down sys.path, if any, as Python would have without us: it is
imported under its own name with this directory hidden from the search, and its errors
reach site.py unchanged.  A failure of the hook itself never stops the job.
"""


def _dlrr_install():
    try:
        import dlrr_hook
        dlrr_hook.install()
    except Exception as exc:  # the hook must never break the job
        try:
            import sys
            sys.stderr.write("dlrr: python hook not installed: %s: %s\n" % (type(exc).__name__, exc))
        except Exception:
            pass


def _dlrr_run_user_sitecustomize():
    import importlib
    import os
    import sys

    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))

    def ours(entry):
        try:
            return os.path.realpath(entry or os.getcwd()) == here
        except (OSError, ValueError, TypeError):
            return False

    removed = [(i, entry) for i, entry in enumerate(sys.path) if ours(entry)]
    if not removed:
        return
    this = sys.modules.pop(__name__, None)
    for i, _ in reversed(removed):
        del sys.path[i]
    try:
        importlib.import_module(__name__)
    except ImportError as exc:
        if exc.name != __name__:
            raise
        if this is not None:  # none further down: we stay the sitecustomize module
            sys.modules[__name__] = this
    finally:
        # Put our entries back where they were, keeping what the user's file changed.
        for i, entry in removed:
            sys.path.insert(min(i, len(sys.path)), entry)


_dlrr_install()
_dlrr_run_user_sitecustomize()
