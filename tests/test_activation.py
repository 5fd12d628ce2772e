"""Issue 2: the .pth auto-loader, activation rules, launcher detection, patching mechanics, status."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fsguard.config import ALL_OPS
from tests.conftest import TORCHRUN_ENV, clean_env, run_python
from tests.support import venvs

STATE = """
import json, os, shutil, sys
mods = sorted(m for m in sys.modules if m.split('.')[0] in ('fsguard', 'wrapt', 'torch', 'filelock'))
launch = None
if 'fsguard.state' in sys.modules:
    l = sys.modules['fsguard.state'].STATE.launch
    launch = l and dict(launcher=l.launcher, rank=l.rank, local_rank=l.local_rank, world_size=l.world_size, host=l.host)
print(json.dumps(dict(
    patched=[n for n, f in (('makedirs', os.makedirs), ('rename', os.rename), ('replace', os.replace),
                            ('rmtree', shutil.rmtree), ('remove', os.remove), ('rmdir', os.rmdir), ('mkdir', os.mkdir),
                            ('symlink', os.symlink), ('link', os.link)) if hasattr(f, '__wrapped__')],
    modules=mods, launch=launch)))
"""


def state(python: Path, env: dict[str, str], args: tuple[str, ...] = ()) -> tuple[dict, str]:
    result = run_python(python, STATE, env, args=args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result.stderr


@pytest.mark.parametrize("value", [None, "", "0", "false", "off", "no", "OFF"])
def test_disabled_imports_nothing(fsguard_python: Path, value: str | None) -> None:
    env = {} if value is None else {"FSGUARD": value}
    env.update(TORCHRUN_ENV)
    result = run_python(fsguard_python, "pass", env, args=("-X", "importtime"))
    assert result.returncode == 0
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line]
    assert imported, "importtime printed nothing"
    assert not [m for m in imported if m.split(".")[0] in ("fsguard", "wrapt")]
    assert "fsguard:" not in result.stderr


PTH_WHEEL_TAG = "-py310.py311.py312.py313.py314.py315.py316.py317-none-any.whl"


def test_pth_is_installed_at_site_packages_root(fsguard_python: Path, wheel: Path) -> None:
    """The wheel built on 3.11 is the one for 3.10-3.17: the ``.pth`` alone (issue 40: a ``.start`` file costs
    every 3.15+ interpreter CPython's ``pkgutil`` import, fsguard enabled or not)."""
    result = run_python(fsguard_python, "import sysconfig; print(sysconfig.get_path('purelib'))")
    site = Path(result.stdout.strip())
    assert (site / "fsguard.pth").read_text().startswith("import os;")
    assert not (site / "fsguard.start").exists()
    assert wheel.name.endswith(PTH_WHEEL_TAG)


def test_the_wheel_for_318_carries_the_start_file(tmp_path: Path) -> None:
    """From 3.18 ``.pth`` import lines are ignored (PEP 829): that wheel has ``fsguard.start`` beside the
    ``.pth`` (which still starts fsguard before 3.15), tagged ``py3``."""
    built = venvs.build_wheel(tmp_path / "out", flavour="start")
    assert built.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(built) as archive:
        assert archive.read("fsguard.start").decode().strip() == "fsguard._boot:start"
        assert archive.read("fsguard.pth").decode().startswith("import os;")


def test_installers_pick_the_start_wheel_only_where_pth_lines_are_ignored(tmp_path: Path) -> None:
    """With both wheels published, pip takes the most specific tag: the ``.pth`` wheel up to 3.17, the
    ``.start`` wheel from 3.18 (whose list of tags puts ``py3`` before ``py317``)."""
    index = tmp_path / "index"
    index.mkdir()
    for flavour in ("pth", "start"):
        built = venvs.build_wheel(tmp_path / flavour, flavour=flavour)
        built.rename(index / built.name)
    picked = {}
    for version in ("3.10", "3.15", "3.17", "3.18", "3.20"):
        where = tmp_path / f"got{version}"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-index",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--find-links",
                str(index),
                "--python-version",
                version,
                "-d",
                str(where),
                "fsguard",
            ],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        (got,) = where.glob("*.whl")
        picked[version] = "pth" if got.name.endswith(PTH_WHEEL_TAG) else "start"
    assert picked == {"3.10": "pth", "3.15": "pth", "3.17": "pth", "3.18": "start", "3.20": "start"}


@pytest.mark.parametrize("value", ["1", "true", "on", "yes", "TRUE"])
def test_enabled_without_launcher_does_not_patch(fsguard_python: Path, value: str) -> None:
    info, err = state(fsguard_python, {"FSGUARD": value})
    assert info["patched"] == []
    assert "wrapt" not in info["modules"]
    assert err == ""


LAUNCHERS = [
    ("torchrun", TORCHRUN_ENV, 1, 1, 4),
    ("torch.distributed", {"RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "0"}, 2, 0, 3),
    ("accelerate", {**TORCHRUN_ENV, "ACCELERATE_MIXED_PRECISION": "no"}, 1, 1, 4),
    (
        "slurm",
        {
            "SLURM_PROCID": "5",
            "SLURM_NTASKS": "8",
            "SLURM_LOCALID": "1",
            "SLURM_STEP_ID": "0",
            "SLURMD_NODENAME": "node7",
        },
        5,
        1,
        8,
    ),
    ("slurm", {"SLURM_PROCID": "1", "SLURM_NPROCS": "2", "SLURM_STEPID": "0"}, 1, 0, 2),
    ("openmpi", {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3"}, 3, 3, 4),
    ("mpich", {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}, 1, 1, 2),
    ("pmix", {"PMIX_RANK": "2"}, 2, 0, None),
    ("horovod", {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "0"}, 0, 0, 2),
]


@pytest.mark.parametrize("name,env,rank,local_rank,world", LAUNCHERS)
def test_enabled_with_launcher_patches(
    fsguard_python: Path, name: str, env: dict[str, str], rank: int, local_rank: int, world: int | None
) -> None:
    info, err = state(fsguard_python, {"FSGUARD": "1", **env})
    assert info["patched"] == list(ALL_OPS)
    assert info["launch"]["launcher"] == name
    assert (info["launch"]["rank"], info["launch"]["local_rank"], info["launch"]["world_size"]) == (
        rank,
        local_rank,
        world,
    )
    assert "torch" not in info["modules"]
    assert err == ""


@pytest.mark.parametrize(
    "env",
    [
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "1"},  # one task
        {"SLURM_PROCID": "0", "SLURM_JOB_ID": "12"},  # a batch script, not a step's task
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NPROCS": "4"},  # sbatch -n 4: the script itself
        # srun -n 1 inside an allocation of 4, where SLURM_NTASKS still says 4: the step's own count wins
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1"},
        {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"},  # single-process torchrun
        {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"},
    ],
)
def test_single_process_launches_are_not_patched(fsguard_python: Path, env: dict[str, str]) -> None:
    info, _ = state(fsguard_python, {"FSGUARD": "1", **env})
    assert info["patched"] == []


def test_launcher_agent_is_not_patched(fsguard_python: Path, tmp_path: Path) -> None:
    """A torchrun agent started by srun has SLURM task variables but no RANK: it must stay unpatched."""
    agent = tmp_path / "torchrun"
    agent.write_text(STATE)
    env = clean_env({"FSGUARD": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"})
    out = subprocess.run([str(fsguard_python), str(agent)], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["patched"] == []
    worker = tmp_path / "train.py"
    worker.write_text(STATE)
    out = subprocess.run([str(fsguard_python), str(worker)], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["patched"] == list(ALL_OPS)


@pytest.mark.parametrize("args", [("/shared/job/torchrun",), ("--out", "runs/deepspeed"), ("srun",)])
def test_a_rank_whose_arguments_name_a_launcher_is_patched(
    fsguard_python: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Only the program itself can be a launcher agent, never its arguments (found under sbatch: a rank given
    ``.../job/torchrun`` as its output directory was taken for a torchrun agent and left unpatched)."""
    worker = tmp_path / "train.py"
    worker.write_text(STATE)
    env = clean_env({"FSGUARD": "1", **TORCHRUN_ENV})
    done = subprocess.run(
        [str(fsguard_python), "-u", str(worker), *args], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout)["patched"] == list(ALL_OPS)


def test_force_patches_without_launcher(fsguard_python: Path) -> None:
    info, err = state(fsguard_python, {"FSGUARD": "force"})
    assert info["patched"] == list(ALL_OPS)
    assert info["launch"] is None
    assert err == ""


def test_ops_selects_operations(fsguard_python: Path) -> None:
    info, err = state(fsguard_python, {"FSGUARD": "force", "FSGUARD_OPS": "rename, rmtree"})
    assert info["patched"] == ["rename", "rmtree"]
    assert err == ""


def test_pth_processed_twice_patches_once(fsguard_python: Path) -> None:
    code = """
        import os, site, sysconfig
        site.addsitedir(sysconfig.get_path('purelib'))   # processes fsguard.pth a second time
        site.addsitedir(sysconfig.get_path('purelib'))
        inner = os.rename.__wrapped__
        print(type(inner).__name__, hasattr(inner, '__wrapped__'))
    """
    result = run_python(fsguard_python, code, {"FSGUARD": "force"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["builtin_function_or_method", "False"]


@pytest.mark.parametrize(
    "env,expected",
    [
        ({"FSGUARD": "maybe"}, "FSGUARD='maybe' is not understood"),
        ({"FSGUARD": "force", "FSGUARD_OPS": "rename,mkdirz"}, "unknown operation(s) mkdirz"),
        ({"FSGUARD": "force", "FSGUARD_SETTLE_S": "soon"}, "FSGUARD_SETTLE_S='soon' is not a valid number"),
        ({"FSGUARD": "force", "FSGUARD_FRESH_S": "-4"}, "FSGUARD_FRESH_S='-4' is not a valid number"),
        ({"FSGUARD": "force", "FSGUARD_LOCK": "zookeeper"}, "FSGUARD_LOCK='zookeeper' is not one of"),
        ({"FSGUARD": "force", "FSGUARD_SERIALIZE": "perhaps"}, "FSGUARD_SERIALIZE='perhaps' is not a boolean"),
    ],
)
def test_bad_settings_warn_in_one_line_and_go_on(fsguard_python: Path, env: dict[str, str], expected: str) -> None:
    result = run_python(fsguard_python, "print('alive')", env)
    assert result.returncode == 0
    assert result.stdout == "alive\n"
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fsguard: ") and expected in lines[0]


def test_missing_wrapt_warns_in_one_line(fsguard_python: Path, tmp_path: Path) -> None:
    broken = tmp_path / "wrapt"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('No module named wrapt', name='wrapt')\n")
    result = run_python(
        fsguard_python,
        "import os; print(hasattr(os.rename, '__wrapped__'))",
        {"FSGUARD": "force", "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0
    assert result.stdout == "False\n"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fsguard: not active: cannot import wrapt"), result.stderr


def test_unwritable_log_dir_warns_once_and_goes_on(fsguard_python: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = f"""
        import os
        for i in range(3):
            peer = os.path.join({str(tmp_path)!r}, 'peer%d' % i)
            os.mkdir(peer)       # unguarded (FSGUARD_OPS): as if a peer had made it
            os.makedirs(peer)    # absorbed
        print('alive')
    """
    env = {"FSGUARD": "force", "FSGUARD_OPS": "makedirs", "FSGUARD_LOG": str(blocker / "logs")}
    result = run_python(fsguard_python, code, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "alive\n"
    warnings = [line for line in result.stderr.splitlines() if "cannot write records" in line]
    assert len(warnings) == 1
    assert sum("fsguard: absorbed makedirs" in line for line in result.stderr.splitlines()) == 3


def test_patched_functions_keep_their_faces(fsguard_python: Path) -> None:
    code = """
        import inspect, os, shutil, copy, pickle
        assert os.makedirs.__name__ == 'makedirs' and os.makedirs.__doc__ == os.makedirs.__wrapped__.__doc__
        assert str(inspect.signature(os.makedirs)) == '(name, mode=511, exist_ok=False)'
        assert 'onerror' in inspect.signature(shutil.rmtree).parameters
        assert shutil.rmtree.avoids_symlink_attacks is True
        assert os.rename.__name__ == 'rename' and os.replace.__name__ == 'replace'
        assert copy.copy(os.rename) is os.rename and copy.deepcopy(os.rename) is os.rename
        for f in (os.makedirs, os.rename, os.replace, shutil.rmtree):
            assert pickle.loads(pickle.dumps(f)) is f
        print(type(os.rename).__name__)
    """
    result = run_python(fsguard_python, code, {"FSGUARD": "force"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "GuardedFunction"


BINDING = """
    import os, shutil, tempfile
    class Tools:
        make = os.makedirs  # a Python function as a class attribute binds: the instance is its first argument
        remove = shutil.rmtree
        rename = os.rename  # a builtin does not bind
        quiet = staticmethod(shutil.rmtree)
    base = tempfile.mkdtemp()
    tools = Tools()
    for call in (lambda: tools.make(), lambda: tools.remove(), lambda: Tools.make(os.path.join(base, 'a'))):
        try:
            call()
            print('ok')
        except Exception as exc:
            print(type(exc).__name__, str(exc).replace(repr(tools), 'TOOLS'))
    os.makedirs(os.path.join(base, 'b', 'c'))
    tools.rename(os.path.join(base, 'b'), os.path.join(base, 'd'))
    tools.quiet(os.path.join(base, 'd'))
    Tools.remove(base)
    print(type(tools.make).__name__, os.path.exists(base))
"""


def test_guarded_functions_bind_as_the_functions_do(fsguard_python: Path) -> None:
    """As a class attribute, a guarded Python function binds to the instance as the function does (wrapt's bound
    wrapper), a guarded builtin does not: the same output with fsguard as without."""
    guarded = run_python(fsguard_python, BINDING, {"FSGUARD": "force"})
    plain = run_python(fsguard_python, BINDING, {})
    assert guarded.returncode == 0 and plain.returncode == 0, guarded.stderr + plain.stderr
    assert guarded.stdout.splitlines()[:3] == plain.stdout.splitlines()[:3]
    assert plain.stdout.splitlines()[-1] == "method False"
    assert guarded.stdout.splitlines()[-1] == "BoundFunctionWrapper False"


def test_pickles_load_as_the_real_function_where_fsguard_is_off(fsguard_python: Path) -> None:
    dumped = run_python(
        fsguard_python,
        "import os, pickle, sys; sys.stdout.write(pickle.dumps(os.makedirs).hex())",
        {"FSGUARD": "force"},
    )
    assert dumped.returncode == 0, dumped.stderr
    code = f"""
        import os, pickle
        f = pickle.loads(bytes.fromhex({dumped.stdout!r}))
        print(f is os.makedirs, hasattr(f, '__wrapped__'))
    """
    loaded = run_python(fsguard_python, code, {})
    assert loaded.stdout.split() == ["True", "False"], loaded.stderr


def test_spawn_pool_passes_patched_functions(fsguard_python: Path, tmp_path: Path) -> None:
    code = f"""
        import multiprocessing, os, shutil
        if __name__ == '__main__':
            base = {str(tmp_path / "out")!r}
            paths = [os.path.join(base, 'd%d' % i, 'sub') for i in range(6)]
            with multiprocessing.get_context('spawn').Pool(2) as pool:
                pool.map(os.makedirs, paths)
                pool.map(shutil.rmtree, [os.path.dirname(p) for p in paths[:3]])
                flags = pool.starmap(hasattr, [(os.rename, '__wrapped__')] * 2)
            print(sorted(os.listdir(base)), flags)
    """
    script = tmp_path / "pool.py"
    script.write_text(__import__("textwrap").dedent(code))
    result = subprocess.run(
        [str(fsguard_python), str(script)],
        env=clean_env({"FSGUARD": "force"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['d3', 'd4', 'd5'] [True, True]"


def test_install_uninstall_restore_identity(fsguard_python: Path) -> None:
    code = """
        import os, shutil, fsguard, fsguard.patching
        def current():
            return (os.makedirs, os.rename, os.replace, shutil.rmtree, os.remove, os.unlink, os.mkdir, os.symlink,
                    os.link, os.rmdir)
        originals = current()
        ops = ['makedirs', 'rename', 'replace', 'rmtree', 'remove', 'rmdir', 'mkdir', 'symlink', 'link']
        assert fsguard.install() == ops
        assert os.rename is not originals[1] and os.rename.__wrapped__ is originals[1]
        assert all(a is not b and a.__wrapped__ is b for a, b in zip(current(), originals))
        assert fsguard.install() == ops   # idempotent
        assert os.rename.__wrapped__ is originals[1]
        fsguard.uninstall()
        assert all(a is b for a, b in zip(current(), originals))
        fsguard.patching.install(["remove"])   # one name, both attributes
        assert os.remove.__wrapped__ is originals[4] and os.unlink.__wrapped__ is originals[5]
        fsguard.patching.uninstall(["remove"])
        assert os.remove is originals[4] and os.unlink is originals[5]
        with fsguard.guarded(['rename']):
            assert os.rename is not originals[1] and os.replace is originals[2]
        assert os.rename is originals[1]
        fsguard.install(['replace'])
        with fsguard.guarded():
            pass
        assert fsguard.installed() == ['replace']   # the block restores only what it patched
        print('ok')
    """
    result = run_python(fsguard_python, code, {})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def _status(python: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    fsguard_cli = python.parent / "fsguard"
    return subprocess.run(
        [str(fsguard_cli), "status", *args], env=clean_env(env), capture_output=True, text=True, timeout=60
    )


def test_status_json_reports_launcher_and_settings(fsguard_python: Path) -> None:
    result = _status(fsguard_python, {"FSGUARD": "1", "FSGUARD_SETTLE_S": "5", **TORCHRUN_ENV}, "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["would_patch"] is True and info["enabled"] == "on"
    assert info["launch"]["launcher"] == "torchrun" and info["launch"]["rank"] == 1
    assert info["launch"]["world_size"] == 4
    assert info["operations"] == [
        "makedirs",
        "rename",
        "replace",
        "rmtree",
        "remove",
        "rmdir",
        "mkdir",
        "symlink",
        "link",
    ]
    assert info["pth"] and info["pth"][0].endswith("fsguard.pth")
    assert info["startup"] == {"file": info["pth"][0], "ran": "fsguard.pth"}  # 3.11: the .pth line started it
    settle = next(s for s in info["settings"] if s["name"] == "FSGUARD_SETTLE_S")
    assert settle == {
        "name": "FSGUARD_SETTLE_S",
        "value": "5",
        "default": "2.0",
        "effective": 5.0,
        "help": settle["help"],
    }
    assert info["problems"] == []
    assert info["launcher_process"] is None  # judged for a rank, not for the status command itself
    agent = _status(fsguard_python, {"FSGUARD": "1", **TORCHRUN_ENV}, "--json", "--command", "torchrun --nnodes 2 t.py")
    info = json.loads(agent.stdout)
    assert info["launcher_process"] is True and info["would_patch"] is False, info
    assert "launcher's own agent" in info["reason"]


def test_status_names_the_startup_file(fsguard_python: Path) -> None:
    """Which start-up file this interpreter runs, and whether it started fsguard in this process."""
    off = _status(fsguard_python, {}, "--json")
    info = json.loads(off.stdout)
    assert info["startup"] == {"file": info["pth"][0], "ran": None}
    human = _status(fsguard_python, {"FSGUARD": "1", **TORCHRUN_ENV})
    assert "startup:     fsguard.pth (ran in this process: fsguard.pth)" in human.stdout, human.stdout


def test_startup_file_by_python_version(tmp_path: Path) -> None:
    """PEP 829: a ``.start`` beside the ``.pth`` runs from 3.15; a ``.pth`` alone runs nothing from 3.18."""
    from fsguard.cli.status import startup_file

    pth = tmp_path / "fsguard.pth"
    pth.write_text("import os\n")
    assert startup_file([str(pth)], (3, 15))["file"] == str(pth)
    assert startup_file([str(pth)], (3, 18))["file"] is None
    (tmp_path / "fsguard.start").write_text("fsguard._boot:start\n")
    assert startup_file([str(pth)], (3, 14))["file"] == str(pth)
    assert startup_file([str(pth)], (3, 15))["file"] == str(tmp_path / "fsguard.start")
    assert startup_file([str(pth)], (3, 18))["file"] == str(tmp_path / "fsguard.start")


def test_status_lists_problems(fsguard_python: Path) -> None:
    result = _status(fsguard_python, {"FSGUARD": "1", "FSGUARD_OPS": "bogus", "FSGUARD_SETLE_S": "1"}, "--json")
    info = json.loads(result.stdout)
    assert info["would_patch"] is False and info["reason"] == "no distributed launcher detected"
    assert any("bogus" in p for p in info["problems"])
    assert any("FSGUARD_SETLE_S is not a known" in p for p in info["problems"])


def test_status_human_and_module_form(fsguard_python: Path) -> None:
    human = _status(fsguard_python, {"FSGUARD": "force"})
    assert human.returncode == 0
    assert "would patch: yes (FSGUARD=force)" in human.stdout
    assert "FSGUARD_LOCK_TIMEOUT" in human.stdout
    module = subprocess.run(
        [str(fsguard_python), "-m", "fsguard", "--version"], env=clean_env(), capture_output=True, text=True
    )
    assert module.stdout.strip().startswith("fsguard ")


def test_editable_install_has_the_pth(tmp_path: Path) -> None:
    """`pip install -e .` must also put fsguard.pth at the root of site-packages."""
    env_dir = tmp_path / "editable"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    root = Path(__file__).resolve().parent.parent
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(root)], check=True)
    info, _ = state(python, {"FSGUARD": "force", "PYTHONPATH": str(Path(__import__("wrapt").__file__).parent.parent)})
    assert info["patched"] == list(ALL_OPS)


def test_a_crashing_rule_warns_once_and_reraises_the_original(fsguard_python: Path, tmp_path: Path) -> None:
    code = f"""
        import os
        from fsguard import failure

        def broken(*args):
            raise RuntimeError("rule bug")

        failure.DECIDE["makedirs"] = broken
        os.mkdir({str(tmp_path / "d")!r})
        for _ in range(2):
            try:
                os.makedirs({str(tmp_path / "d")!r})
            except FileExistsError as error:
                print(type(error).__name__, error.errno, error.filename == {str(tmp_path / "d")!r})
    """
    result = run_python(fsguard_python, code, {"FSGUARD": "force"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["FileExistsError 17 True"] * 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("fsguard:")]
    assert len(lines) == 1 and "makedirs rule failed (RuntimeError: rule bug)" in lines[0], result.stderr


def test_busy_nests_and_uninstall_leaves_a_clean_state(fsguard_python: Path) -> None:
    code = """
        import fsguard
        from fsguard import config, locks, runtime, state
        with runtime.Busy():
            with runtime.Busy():
                pass
            assert runtime.busy()  # the inner block restored the outer's mark
        assert not runtime.busy()
        fsguard.install()
        assert state.STATE.serializer is not None and state.STATE.settings.serialize
        from fsguard import evidence, failure, oracle
        from fsguard.oracle.layers import HANDLER_LAYERS
        evidence.job_start(False)
        oracle.caller_handles(FileExistsError())
        failure.rules()
        failure.rule_failed("mkdir", RuntimeError("once"))
        assert evidence.FOUND.job_start is not None and HANDLER_LAYERS and failure.MADE.rules is not None
        assert failure.FAILED_RULES == {"mkdir"}
        fsguard.uninstall()
        s = state.STATE
        assert (s.serializer, s.originals, s.launch, failure.MADE.rules) == (None, {}, None, None)
        assert s.settings == config.Settings() and not state.STATE.settings.serialize
        assert (evidence.FOUND.job_start, HANDLER_LAYERS, failure.FAILED_RULES) == (None, {}, set())
        before = state.set_serializer(locks.serializer(config.load({"FSGUARD_SERIALIZE": "1"}), None))
        assert before is None and s.serializer is not None
        state.set_serializer(None)
        print("ok")
    """
    result = run_python(fsguard_python, code, {"FSGUARD": "force", "FSGUARD_SERIALIZE": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
