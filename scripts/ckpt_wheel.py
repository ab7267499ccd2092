"""Builds ckpt's wheel: the pure-Python package over libckpt.so, with the
`ckpt` command-line tool, for any CPython 3.9+ on Linux.

    /usr/bin/python3 scripts/ckpt_wheel.py BUILD_DIR OUT_DIR

writes OUT_DIR/ckpt-<version>-py3-none-linux_<arch>.whl from python/ckpt/*.py,
BUILD_DIR/src/capi/libckpt.so.1 (and libckpt_mpi.so.1 where the build has
it) and BUILD_DIR/tools/ckpt/ckpt. Under ckpt/_lib/ it bundles every shared
library libckpt.so.1 and the tool need that is not part of glibc, each with
the run path $ORIGIN (patchelf), so that the wheel installs with pip into any
environment, with no compiler and no network. The tool is ckpt/_bin/ckpt
(run path $ORIGIN/../_lib); the wheel's entry point puts a `ckpt` command on
the environment's PATH that runs it (ckpt/__main__.py, also `python -m
ckpt`). Open MPI is not bundled: libckpt_mpi.so.1 finds libckpt.so.1 beside
it and Open MPI where the system keeps it, and only ckpt.mpi_communicator()
loads it.

The same module is the PEP 517 build backend of pyproject.toml (`pip install
.`): build_wheel() configures build/wheel with CMake and builds only the
library and the tool there (or takes the build folder named by
$CKPT_BUILD_DIR, compiling nothing), then assembles the same wheel.

The wheel is deterministic: entries sorted, fixed times ($SOURCE_DATE_EPOCH,
else 1980-01-01) and permissions. Standard library only (Python 3.9+), plus
patchelf, ldd and, when present, strip.
"""

import base64
import hashlib
import io
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

NAME = "ckpt"
SUMMARY = ("Durable, atomic checkpoints of NumPy arrays, PyTorch tensors and "
           "buffers for training jobs")
REQUIRES_PYTHON = ">=3.9"
SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The shared libraries the wheel carries from the build folder, under the
# names their users ask for (the SONAMEs).
LIBRARY = "libckpt.so.1"
MPI_LIBRARY = "libckpt_mpi.so.1"
# The command-line tool: where the build puts it, where the wheel carries it,
# and the console script that runs it.
CLI_BUILT = os.path.join("tools", "ckpt", "ckpt")
CLI = "_bin/ckpt"
ENTRY_POINTS = "[console_scripts]\nckpt = ckpt.__main__:main\n"

# glibc's own libraries: every Linux system has them, in the version its
# other libraries need, so they are never bundled.
GLIBC = {"libc", "libm", "libmvec", "libpthread", "libdl", "librt",
         "libresolv", "libutil", "libanl", "libBrokenLocale", "libthread_db"}
# The compiler's runtime is linked statically into libckpt.so; should it
# ever appear as a dependency it is bundled, with a warning.
COMPILER_RUNTIME = {"libstdc++", "libgcc_s"}


class BuildError(Exception):
    pass


def log(msg):
    print(f"ckpt_wheel: {msg}", file=sys.stderr, flush=True)


def run(cmd, **kwargs):
    try:
        return subprocess.run(cmd, check=True, text=True, **kwargs)
    except FileNotFoundError:
        raise BuildError(f"{cmd[0]} is not installed") from None
    except subprocess.CalledProcessError as e:
        detail = (e.stderr or "").strip()
        raise BuildError(f"{' '.join(cmd)} failed (exit {e.returncode})"
                         + (f": {detail}" if detail else "")) from None


def project_version(source_dir=SOURCE_DIR):
    """The version of project(ckpt VERSION x.y.z) in CMakeLists.txt."""
    with open(os.path.join(source_dir, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*ckpt\s+VERSION\s+([0-9][0-9.]*)", f.read())
    if not m:
        raise BuildError("CMakeLists.txt has no project(ckpt VERSION ...)")
    return m.group(1)


def library_version(path):
    """ckpt_version() of the library at `path`, in a process of its own."""
    code = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
            "lib.ckpt_version.restype = ctypes.c_char_p; "
            "print(lib.ckpt_version().decode())")
    out = run([sys.executable, "-c", code, path], capture_output=True)
    return out.stdout.strip()


def platform_tag():
    if sys.platform != "linux":
        raise BuildError(f"the wheel is built on Linux, not {sys.platform}")
    return "linux_" + platform.machine()


def wheel_name(version):
    return f"{NAME}-{version}-py3-none-{platform_tag()}.whl"


def library_base(soname):
    """'libcurl' for 'libcurl.so.4', 'ld-linux-x86-64' for the loader."""
    return os.path.basename(soname).split(".so")[0]


def is_glibc(soname):
    base = library_base(soname)
    return (base in GLIBC or base.startswith("ld-linux")
            or base.startswith("linux-vdso") or base.startswith("libnss_"))


def dependencies(path):
    """{soname: resolved path} of every library `path` loads (ldd: the
    whole closure), in ldd's order. A library that cannot be found fails."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    out = run(["ldd", path], capture_output=True, env=env).stdout
    deps = {}
    for line in out.splitlines():
        line = line.strip()
        if "=>" not in line:
            continue  # the vdso and the loader, named by path alone
        soname, rest = (s.strip() for s in line.split("=>", 1))
        if rest.startswith("not found"):
            raise BuildError(f"{path} needs {soname}, which is not found")
        deps[soname] = os.path.realpath(rest.split(" (")[0].strip())
    return deps


def needed(path):
    """The DT_NEEDED entries of `path`."""
    return run(["patchelf", "--print-needed", path],
               capture_output=True).stdout.split()


def copy_library(src, dest, strip):
    shutil.copyfile(src, dest)
    os.chmod(dest, 0o755)
    if strip and shutil.which("strip"):
        # Before patchelf: strip after patchelf can damage what it moved.
        run(["strip", "--strip-debug", dest])


def assemble_libraries(build_dir, lib_dir, cli):
    """Copies libckpt.so.1 (+ libckpt_mpi.so.1) and the non-glibc
    dependencies of libckpt.so.1 and of the tool into lib_dir, each with the
    run path $ORIGIN, and the tool to `cli`, with the run path of lib_dir.
    Returns the names of what it bundled beyond the two libraries."""
    capi = os.path.join(build_dir, "src", "capi")
    main = os.path.join(capi, LIBRARY)
    tool = os.path.join(build_dir, CLI_BUILT)
    for path, target in ((main, "ckpt_c"), (tool, "ckpt_cli")):
        if not os.path.exists(path):
            raise BuildError(f"{path} does not exist: build the targets "
                             f"{target}, ckpt_c_mpi and ckpt_cli first (make "
                             "build)")
    os.makedirs(lib_dir)
    os.makedirs(os.path.dirname(cli))
    ours = [LIBRARY]
    copy_library(main, os.path.join(lib_dir, LIBRARY), strip=True)
    copy_library(tool, cli, strip=True)
    mpi = os.path.join(capi, MPI_LIBRARY)
    if os.path.exists(mpi):
        ours.append(MPI_LIBRARY)
        copy_library(mpi, os.path.join(lib_dir, MPI_LIBRARY), strip=True)
    else:
        log(f"{mpi} is not built: the wheel has no MPI communicator")

    bundled = {}
    for soname, path in dependencies(os.path.join(lib_dir, LIBRARY)).items():
        if is_glibc(soname):
            continue
        if library_base(soname) in COMPILER_RUNTIME:
            log(f"warning: {LIBRARY} needs {soname}, which should be linked "
                "statically; bundling it")
        bundled[soname] = path
    # The tool is a process of its own, so the C++ runtime it needs (through
    # libfmt, which Debian ships only as a shared library) is bundled for it
    # without harm: libckpt.so.1 never loads it.
    for soname, path in dependencies(cli).items():
        if not is_glibc(soname):
            bundled.setdefault(soname, path)
    if MPI_LIBRARY in ours:
        # What libckpt_mpi.so.1 needs itself, beyond libckpt.so.1's closure
        # and Open MPI (the system's, with everything it loads).
        mpi_copy = os.path.join(lib_dir, MPI_LIBRARY)
        mpi_deps = dependencies(mpi_copy)
        system = set()
        for soname in needed(mpi_copy):
            if library_base(soname).startswith(("libmpi", "libopen-")):
                system.add(soname)
                if soname in mpi_deps:
                    system.update(dependencies(mpi_deps[soname]))
        for soname, path in mpi_deps.items():
            if not (is_glibc(soname) or soname in system or soname in ours
                    or soname in bundled):
                bundled[soname] = path
    for soname, path in sorted(bundled.items()):
        copy_library(path, os.path.join(lib_dir, soname), strip=False)
    for name in ours + sorted(bundled):
        run(["patchelf", "--set-rpath", "$ORIGIN",
             os.path.join(lib_dir, name)])
    rpath = "$ORIGIN/" + os.path.relpath(lib_dir, os.path.dirname(cli))
    run(["patchelf", "--set-rpath", rpath, cli])
    check_libraries(lib_dir, ours, bundled, cli)
    return sorted(bundled)


def check_libraries(lib_dir, ours, bundled, cli):
    """Every library of lib_dir, and the tool, find their non-glibc
    dependencies in lib_dir (libckpt_mpi.so.1: libckpt.so.1 there, Open MPI
    in the system)."""
    binaries = [os.path.join(lib_dir, name)
                for name in [LIBRARY] + sorted(bundled)] + [cli]
    for binary in binaries:
        for soname, path in dependencies(binary).items():
            if not is_glibc(soname) and os.path.dirname(path) != lib_dir:
                raise BuildError(f"bundled {os.path.basename(binary)} loads "
                                 f"{soname} from {path}, not from the wheel")
    if MPI_LIBRARY in ours:
        deps = dependencies(os.path.join(lib_dir, MPI_LIBRARY))
        if os.path.dirname(deps.get(LIBRARY, "")) != lib_dir:
            raise BuildError(f"{MPI_LIBRARY} does not load the bundled "
                             f"{LIBRARY}")


def glibc_needed(binaries):
    """The newest glibc symbol version the binaries use ('2.34'), or None
    without objdump."""
    if not shutil.which("objdump"):
        return None
    newest = (0,)
    for path in binaries:
        out = run(["objdump", "-T", path], capture_output=True).stdout
        for v in re.findall(r"GLIBC_([0-9.]+)", out):
            newest = max(newest, tuple(int(x) for x in v.split(".")))
    return ".".join(map(str, newest)) if newest > (0,) else None


def metadata_text(version):
    return (f"Metadata-Version: 2.1\n"
            f"Name: {NAME}\n"
            f"Version: {version}\n"
            f"Summary: {SUMMARY}\n"
            f"Requires-Python: {REQUIRES_PYTHON}\n"
            f"Classifier: Programming Language :: Python :: 3\n"
            f"Classifier: Operating System :: POSIX :: Linux\n"
            f"\n"
            f"ckpt makes long training jobs survive failure: it writes a "
            f"job's state\ndurably from every rank, commits it atomically and "
            f"hands the newest\ncomplete state back, bit for bit. NumPy and "
            f"PyTorch are optional; any\nobject with the buffer protocol "
            f"saves as a tensor.\n")


def wheel_text():
    return ("Wheel-Version: 1.0\n"
            "Generator: ckpt scripts/ckpt_wheel.py\n"
            "Root-Is-Purelib: false\n"
            f"Tag: py3-none-{platform_tag()}\n")


def write_dist_info(directory, version):
    """The .dist-info folder without RECORD, for
    prepare_metadata_for_build_wheel."""
    name = f"{NAME}-{version}.dist-info"
    path = os.path.join(directory, name)
    os.makedirs(path, exist_ok=True)
    for file, text in (("METADATA", metadata_text(version)),
                       ("WHEEL", wheel_text()),
                       ("entry_points.txt", ENTRY_POINTS)):
        with open(os.path.join(path, file), "w") as f:
            f.write(text)
    return name


def zip_time():
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    return time.gmtime(max(epoch, 315532800))[:6]  # zip starts at 1980


def record_hash(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def write_wheel(path, files, version):
    """files: {archive name: (bytes, executable)}; adds the .dist-info."""
    info = f"{NAME}-{version}.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = (metadata_text(version).encode(), False)
    files[f"{info}/WHEEL"] = (wheel_text().encode(), False)
    files[f"{info}/top_level.txt"] = (f"{NAME}\n".encode(), False)
    files[f"{info}/entry_points.txt"] = (ENTRY_POINTS.encode(), False)
    names = sorted(files)
    record = io.StringIO()
    for name in names:
        data = files[name][0]
        record.write(f"{name},{record_hash(data)},{len(data)}\n")
    record.write(f"{info}/RECORD,,\n")
    names.append(f"{info}/RECORD")
    files[f"{info}/RECORD"] = (record.getvalue().encode(), False)

    stamp = zip_time()
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name in names:
            data, executable = files[name]
            entry = zipfile.ZipInfo(name, date_time=stamp)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.create_system = 3  # Unix, so the mode below is honoured
            entry.external_attr = (0o100755 if executable else 0o100644) << 16
            z.writestr(entry, data, compresslevel=6)
    os.replace(tmp, path)


def assemble(build_dir, out_dir, source_dir=SOURCE_DIR):
    """Writes the wheel into out_dir from the built build_dir; returns its
    path."""
    build_dir = os.path.abspath(build_dir)
    version = project_version(source_dir)
    package = os.path.join(source_dir, "python", NAME)
    sources = sorted(f for f in os.listdir(package) if f.endswith(".py"))
    if "__init__.py" not in sources:
        raise BuildError(f"{package} has no __init__.py")
    files = {}
    for f in sources:
        with open(os.path.join(package, f), "rb") as fh:
            data = fh.read()
        # A syntax error fails here, not at import.
        compile(data, os.path.join(package, f), "exec")
        files[f"{NAME}/{f}"] = (data, False)

    with tempfile.TemporaryDirectory(prefix="ckpt-wheel-") as tmp:
        lib_dir = os.path.join(tmp, "_lib")
        cli = os.path.join(tmp, CLI)
        bundled = assemble_libraries(build_dir, lib_dir, cli)
        built = library_version(os.path.join(lib_dir, LIBRARY))
        if built != version:
            raise BuildError(f"{build_dir} holds libckpt {built}, the source "
                             f"is {version}: rebuild it")
        tool = run([cli, "--version"], capture_output=True).stdout.strip()
        if tool != f"ckpt {version}":
            raise BuildError(f"{build_dir}'s ckpt --version says {tool!r}, "
                             f"the source is {version}: rebuild it")
        names = [os.path.join("_lib", n) for n in os.listdir(lib_dir)] + [CLI]
        glibc = glibc_needed([os.path.join(tmp, n) for n in names])
        for name in sorted(names):
            with open(os.path.join(tmp, name), "rb") as fh:
                files[f"{NAME}/{name}"] = (fh.read(), True)

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(os.path.abspath(out_dir), wheel_name(version))
    write_wheel(path, files, version)
    size = os.path.getsize(path)
    log(f"bundled {len(bundled)} libraries: {' '.join(bundled) or 'none'}")
    if glibc:
        log(f"the libraries need glibc {glibc} or newer")
    log(f"wrote {path} ({size / 2**20:.1f} MiB)")
    return path


def cmake_build(build_dir, source_dir=SOURCE_DIR):
    """Configures build_dir without the tests (so GoogleTest need not be
    installed) and builds only libckpt.so.1, the ckpt tool and, where CMake
    finds MPI, libckpt_mpi.so.1 (no test, benchmark or example is
    compiled)."""
    # The release preset's optimization (-O2) without its debug information:
    # the wheel strips that anyway, and compiling it slows the build. Unity
    # batches, as in the presets: a build from nothing compiles each
    # library's shared headers once per batch, not once per file.
    configure = ["cmake", "-S", source_dir, "-B", build_dir,
                 "-DCMAKE_BUILD_TYPE=Release",
                 "-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG",
                 "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG",
                 "-DCMAKE_UNITY_BUILD=ON",
                 "-DCKPT_BUILD_TESTS=OFF"]
    if (shutil.which("ninja")
            and not os.path.exists(os.path.join(build_dir, "CMakeCache.txt"))):
        configure += ["-G", "Ninja"]
    log(" ".join(configure))
    run(configure, stdout=sys.stderr)
    build = ["cmake", "--build", build_dir]
    if "CMAKE_BUILD_PARALLEL_LEVEL" not in os.environ:
        build += ["--parallel", str(os.cpu_count() or 1)]
    targets = run(build + ["--target", "help"], capture_output=True).stdout
    wanted = ["ckpt_c", "ckpt_cli"]
    if re.search(r"\bckpt_c_mpi\b", targets):
        wanted.append("ckpt_c_mpi")
    # One build of all of them, so that both jobs stay busy throughout.
    log(" ".join(build + ["--target"] + wanted))
    run(build + ["--target"] + wanted, stdout=sys.stderr)


# PEP 517 hooks (pyproject.toml: build-backend = "ckpt_wheel").

def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return write_dist_info(metadata_directory, project_version())


def build_wheel(wheel_directory, config_settings=None,
                metadata_directory=None):
    """Builds the library ($CKPT_BUILD_DIR, or the config setting build-dir,
    names a built folder to take instead) and assembles the wheel."""
    build_dir = (os.environ.get("CKPT_BUILD_DIR")
                 or (config_settings or {}).get("build-dir"))
    try:
        if build_dir:
            # A relative path is relative to the checkout.
            build_dir = os.path.join(SOURCE_DIR, build_dir)
            log(f"using the built {build_dir}")
        else:
            build_dir = os.path.join(SOURCE_DIR, "build", "wheel")
            cmake_build(build_dir)
        return os.path.basename(assemble(build_dir, wheel_directory))
    except BuildError as e:
        raise SystemExit(f"ckpt_wheel: {e}") from None


def main(argv):
    if len(argv) != 3 or argv[1].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        assemble(argv[1], argv[2])
    except BuildError as e:
        log(str(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
