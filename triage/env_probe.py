import sys
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
def out(k, v):
    sys.stdout.write("%s\t%s\n" % (k, str(v).replace("\n", " ").replace("\t", " ")))
out("python", sys.version.split()[0])
for name in ("numpy", "torch"):
    try:
        m = __import__(name)
        out(name, getattr(m, "__version__", "?"))
    except Exception as e:
        out(name, "<not installed>" if isinstance(e, ImportError) else "<error: %s>" % type(e).__name__)
t = sys.modules.get("torch")
if t is not None:
    out("torch.num_threads", t.get_num_threads())
    out("cuda.compiled", getattr(t.version, "cuda", None) or "<unset>")
    try:
        avail = t.cuda.is_available()
        out("cuda.available", int(avail))
        if avail:
            out("cuda.device_count", t.cuda.device_count())
            for i in range(t.cuda.device_count()):
                out("cuda.device.%d" % i, t.cuda.get_device_name(i))
            out("cudnn.version", t.backends.cudnn.version())
    except Exception as e:
        out("cuda.available", "<error: %s>" % e)
blas = []
try:
    for line in open("/proc/self/maps"):
        f = line.split(None, 5)
        if len(f) == 6:
            p = f[5].strip()
            import re
            if re.search(r"/lib(openblas|blas|cblas|mkl|blis|flexiblas|lapack)[^/]*\.so[^/]*$", p) and p not in blas:
                blas.append(p)
except OSError:
    pass
out("blas", ":".join(blas) or "<unset>")
try:
    from importlib import metadata, util
except ImportError:
    metadata = util = None
for name in sys.argv[1:]:
    v = ""
    if metadata is not None:
        # Recorded names are import names (PIL); a distribution may differ (Pillow).
        dists = [name]
        try:
            dists += metadata.packages_distributions().get(name, [])
        except Exception:
            pass
        for d in dists:
            try:
                v = metadata.version(d)
            except Exception:
                v = ""
            if v:
                break
    if not v:
        m = sys.modules.get(name)
        v = getattr(m, "__version__", "") if m is not None else ""
    if not v and util is not None:
        try:
            v = "<installed, version unknown>" if util.find_spec(name) is not None else "<not installed>"
        except Exception:
            v = "<not installed>"
    out("package." + name, v)
