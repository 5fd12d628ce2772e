"""The handler rule (``fsguard/oracle/``), in-process, one row per sentence of its README paragraph:
**fsguard absorbs only a would-be crash**: an error that would leave its thread's top frame, or reach only
handlers that pass it on (re-raise, convert, exit); every other handler decides, and anything fsguard cannot
read is left to the program.

Each row is a small program run in a thread of its own (so that the thread's top is the row's top, not
pytest's handlers): ``guarded()`` stands for the failing guarded call; it asks ``caller_handles`` what the
calling code does with the error, then raises it. ``None`` means a would-be crash (the rule's verdict stands);
a dict means the program decides (``deferred``), with the handler or the reason.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import errno
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from fsguard import oracle

SEEN: list[dict[str, Any] | None] = []


def guarded(error: type[OSError] = FileExistsError) -> None:
    """The guarded call that fails: what would fsguard decide here?"""
    failure = error(errno.EEXIST if error is FileExistsError else errno.ENOENT, os.strerror(errno.EEXIST), "run-0")
    SEEN.append(oracle.caller_handles(failure, sys._getframe(1)))
    raise failure


def outcome(program: Callable[[], Any]) -> dict[str, Any] | None:
    """``program`` in a thread of its own; what ``caller_handles`` said at its (first) failing call."""
    SEEN.clear()
    escaped: list[BaseException] = []
    hook = threading.excepthook
    threading.excepthook = threading.__excepthook__  # the default: a program-set hook decides (issue 45)
    try:
        thread = threading.Thread(target=program)
        thread.start()
        thread.join(30)
    finally:
        threading.excepthook = hook
    assert SEEN, f"the row made no guarded call (escaped: {escaped})"
    return SEEN[0]


# --- would-be crashes: absorbed --------------------------------------------------------------------------


def no_handler() -> None:
    guarded()


def reporting_and_reraising() -> None:
    try:
        guarded()
    except Exception:
        print("failed", file=sys.stderr)
        raise


def reraising_two_frames_up() -> None:
    def helper() -> None:
        guarded()

    try:
        helper()
    except OSError as error:
        raise error


def other_class() -> None:
    try:
        guarded()
    except (KeyError, FileNotFoundError):
        pass


def try_finally() -> None:
    try:
        guarded()
    finally:
        pass


def handler_around_another_statement() -> None:
    try:
        int("7")
    except ValueError:
        pass
    guarded()


def with_a_lock() -> None:
    with threading.Lock():
        guarded()


def with_a_file(tmp: list[str] = []) -> None:  # noqa: B006 - a path set by the test
    with open(os.devnull, "w") as log:
        guarded()
        log.write("x")


class Quiet:
    """A class-based context manager whose ``__exit__`` returns None: it cannot suppress."""

    def __enter__(self) -> Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def with_a_quiet_class() -> None:
    with Quiet():
        guarded()


@contextlib.contextmanager
def timed() -> Any:
    try:
        yield
    finally:
        pass


def with_a_contextmanager_that_passes_it_on() -> None:
    with timed():
        guarded()


class AlreadyExistsError(Exception):
    pass


def converting_handler_nobody_catches() -> None:
    """tensorboard <= 2.5's ``gfile.makedirs``: the converted error crashes the job."""

    def makedirs() -> None:
        try:
            guarded()
        except FileExistsError:
            raise AlreadyExistsError("Directory already exists") from None

    makedirs()


def exits() -> None:
    try:
        guarded()
    except OSError:
        sys.exit(1)


def suppress_of_another_class() -> None:
    with contextlib.suppress(FileNotFoundError):
        guarded()


def deep_reraising_stack() -> None:
    """Twenty frames, each reporting and re-raising: still a crash (no depth limit)."""

    def layer(n: int) -> None:
        try:
            guarded() if n == 0 else layer(n - 1)
        except Exception:
            raise

    layer(20)


class Engine:
    """ignite's engine (0.3.0): its handler hands the error to ``_handle_exception``, which re-raises it unless
    a handler for the "exception raised" event is registered."""

    def __init__(self, on_exception: bool) -> None:
        self._event_handlers: dict[str, list[Any]] = collections.defaultdict(list)
        if on_exception:
            self._event_handlers["exception_raised"].append(print)

    def _fire_event(self, name: str, error: BaseException) -> None:
        for handler in self._event_handlers[name]:
            handler(error, file=sys.stderr)

    def _handle_exception(self, e: BaseException) -> None:
        if "exception_raised" in self._event_handlers:
            self._fire_event("exception_raised", e)
        else:
            raise e

    def run(self) -> None:
        try:
            guarded()
        except BaseException as e:
            print("Engine run is terminating due to exception:", str(e), file=sys.stderr)
            self._handle_exception(e)


def handed_to_a_method_that_reraises() -> None:
    Engine(on_exception=False).run()


def handed_to_a_method_that_swallows() -> None:
    Engine(on_exception=True).run()


class Accelerator:
    @contextlib.contextmanager
    def main_process_first(self) -> Any:
        yield  # the error thrown in here leaves the generator: passed on

    @contextlib.contextmanager
    def quietly(self) -> Any:
        try:
            yield
        except FileExistsError:
            pass


def with_a_contextmanager_method() -> None:
    accelerator = Accelerator()
    with accelerator.main_process_first():
        guarded()


def with_a_suppressing_contextmanager_method() -> None:
    accelerator = Accelerator()
    with accelerator.quietly():
        guarded()


# --- the program decides: deferred ------------------------------------------------------------------------


def claim_loop_through_a_helper() -> None:
    def make_run_dir(i: int) -> None:
        guarded()

    i = 0
    while i < 1:
        try:
            make_run_dir(i)
        except OSError as e:
            if e.errno != errno.EEXIST:
                raise
            i += 1


def broad_handler_far_up() -> None:
    def a() -> None:
        guarded()

    def b() -> None:
        a()

    try:
        b()
    except Exception:
        pass


def converted_and_caught() -> None:
    def makedirs() -> None:
        try:
            guarded()
        except FileExistsError:
            raise AlreadyExistsError("exists") from None

    try:
        makedirs()
    except AlreadyExistsError:
        pass


class Ignored:
    def __init__(self, *classes: type[BaseException]) -> None:
        self.classes = classes

    def __enter__(self) -> Ignored:
        return self

    def __exit__(self, kind: Any, *rest: object) -> bool:
        return kind is not None and issubclass(kind, self.classes)


def class_based_suppressing_manager() -> None:
    with Ignored(FileExistsError):
        guarded()


@contextlib.contextmanager
def ignoring(*classes: type[BaseException]) -> Any:
    try:
        yield
    except classes:
        pass


def contextmanager_object() -> None:
    cm = ignoring(FileExistsError)
    with cm:
        guarded()


class Claimer:
    def __init__(self) -> None:
        self.retry_on = (FileExistsError,)

    def claim(self) -> None:
        try:
            guarded()
        except self.retry_on:
            pass


def except_an_instance_attribute() -> None:
    Claimer().claim()


class Unreadable:
    @property
    def retry_on(self) -> tuple[type[BaseException], ...]:
        return (FileExistsError,)

    def claim(self) -> None:
        try:
            guarded()
        except self.retry_on:
            pass


def except_a_property() -> None:
    Unreadable().claim()


def except_star() -> None:
    exec(
        "try:\n    guarded()\nexcept* FileExistsError:\n    pass\n",
        {"guarded": guarded},
    )


def handler_twenty_frames_up() -> None:
    def layer(n: int) -> None:
        guarded() if n == 0 else layer(n - 1)

    try:
        layer(20)
    except FileExistsError:
        pass


def future_result() -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            pool.submit(guarded).result()
        except FileExistsError:
            pass


def asyncio_to_thread() -> None:
    async def main() -> None:
        try:
            await asyncio.to_thread(guarded)
        except FileExistsError:
            pass

    asyncio.run(main())


def coroutine_in_a_task() -> None:
    async def claim() -> None:
        guarded()

    async def main() -> None:
        try:
            await asyncio.wait_for(claim(), 5)
        except FileExistsError:
            pass

    asyncio.run(main())


def retry_loop_around_a_broad_handler() -> None:
    for _ in range(1):
        try:
            guarded()
        except Exception:
            continue


# --- issue 45: read, not passed over -------------------------------------------------------------------------


class TrainingArguments:
    """transformers 4.36's ``main_process_first``: two yields, one under try/finally, one in an else; every
    error passes on (the seed's case: ``save_on_each_node=True`` renames ``tmp-checkpoint-N`` inside it)."""

    world_size = 2
    is_local_main_process = True

    @contextlib.contextmanager
    def main_process_first(self, local: bool = True, desc: str = "work") -> Any:
        if self.world_size > 1:
            is_main_process = self.is_local_main_process
            try:
                if not is_main_process:
                    print("waiting for", desc, file=sys.stderr)
                yield
            finally:
                if is_main_process:
                    print("releasing", desc, file=sys.stderr)
        else:
            yield


class Trainer:
    def __init__(self) -> None:
        self.args = TrainingArguments()

    def save(self) -> None:
        with self.args.main_process_first(desc="renaming model checkpoint folder to true location"):
            guarded()


def transformers_main_process_first() -> None:
    Trainer().save()


ENABLE_PROFILE = False


@contextlib.contextmanager
def _profile() -> Any:
    """torch 2.13's ``torch.distributed.checkpoint.utils._profile``: two yields, neither in an except."""
    if ENABLE_PROFILE:
        print("profiling", file=sys.stderr)
        try:
            yield
        finally:
            print("stats", file=sys.stderr)
    else:
        yield


def dcp_profile() -> None:
    with _profile():
        guarded()


@contextlib.contextmanager
def timed_helper() -> Any:
    try:
        yield
    finally:
        print("done", file=sys.stderr)


@timed_helper()
def timed_decorated() -> None:
    guarded()


class Logged(contextlib.ContextDecorator):
    def __enter__(self) -> Logged:
        return self

    def __exit__(self, *exc: object) -> None:
        print("left", file=sys.stderr)


@Logged()
def logged_decorated() -> None:
    guarded()


def finally_return_helper() -> bool:
    """A "never raises" helper: the finally's return swallows the error."""
    made = False
    try:
        guarded()
        made = True
    finally:
        return made  # noqa: B012


@ignoring(FileExistsError)
def ignoring_decorated() -> None:
    guarded()


class Ignoring(contextlib.ContextDecorator):
    def __init__(self, *classes: type[BaseException]) -> None:
        self.classes = classes

    def __enter__(self) -> Ignoring:
        return self

    def __exit__(self, kind: Any, *rest: object) -> bool:
        return kind is not None and issubclass(kind, self.classes)


@Ignoring(FileExistsError)
def context_decorator_suppressing() -> None:
    guarded()


QUIET = True


def conditional_manager() -> None:
    with contextlib.suppress(FileExistsError) if QUIET else contextlib.nullcontext():
        guarded()


def conditional_manager_passing() -> None:
    """Even where the branch taken passes: only the last branch used to be read."""
    with contextlib.nullcontext() if QUIET else contextlib.suppress(FileExistsError):
        guarded()


def supervised_thread() -> None:
    hook = threading.excepthook
    threading.excepthook = lambda args: None  # type: ignore[assignment]
    try:
        guarded()
    finally:
        threading.excepthook = hook


def finally_break_in_a_loop() -> None:
    for _ in range(1):
        try:
            guarded()
        finally:
            break  # noqa: B012


def manager_rebound_in_its_block() -> None:
    cm: Any = contextlib.suppress(FileExistsError)
    with cm:
        cm = contextlib.nullcontext()
        guarded()


def exit_stack() -> None:
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.nullcontext())
        guarded()


@contextlib.contextmanager
def two_ways() -> Any:
    if QUIET:
        try:
            yield
        except OSError:
            pass
    else:
        yield


def multi_yield_one_suppressing() -> None:
    with two_ways():
        guarded()


def multi_yield_object_at_its_yield() -> None:
    """``with cm:`` of a started generator: read at the yield it is suspended at (its frame's f_lasti)."""
    global QUIET
    QUIET = False
    try:
        cm = two_ways()
        with cm:
            guarded()
    finally:
        QUIET = True


ROWS: dict[str, tuple[Callable[[], Any], str | None]] = {
    # absorbed (a would-be crash): expected None
    "no handler": (no_handler, None),
    "reporting and re-raising": (reporting_and_reraising, None),
    "raise error, two frames up": (reraising_two_frames_up, None),
    "a clause of other classes": (other_class, None),
    "try/finally": (try_finally, None),
    "a handler around another statement": (handler_around_another_statement, None),
    "with threading.Lock()": (with_a_lock, None),
    "with open(...)": (with_a_file, None),
    "a class-based manager whose __exit__ returns None": (with_a_quiet_class, None),
    "a @contextmanager with try/finally": (with_a_contextmanager_that_passes_it_on, None),
    "a converting handler nobody catches": (converting_handler_nobody_catches, None),
    "sys.exit in the handler": (exits, None),
    "suppress of another class": (suppress_of_another_class, None),
    "twenty re-raising frames": (deep_reraising_stack, None),
    "handed to a method that re-raises it (ignite)": (handed_to_a_method_that_reraises, None),
    "with a @contextmanager method that passes it on": (with_a_contextmanager_method, None),
    "transformers 4.36's main_process_first (two yields)": (transformers_main_process_first, None),
    "torch 2.13 DCP's _profile (two yields)": (dcp_profile, None),
    "a @contextmanager with try/finally as a decorator": (timed_decorated, None),
    "a ContextDecorator whose __exit__ returns None, as a decorator": (logged_decorated, None),
    "a conditional manager, either branch passing": (conditional_manager_passing, "?"),
    "with cm: of a two-yield @contextmanager, at its passing yield": (multi_yield_object_at_its_yield, None),
    # deferred (the program decides): expected the handler (or "?" for a reason only)
    "a claim loop through a helper (errno idiom)": (claim_loop_through_a_helper, "except OSError"),
    "a broad handler two frames up": (broad_handler_far_up, "except Exception"),
    "a converting handler whose new class is caught": (converted_and_caught, "except AlreadyExistsError"),
    "with Ignored(FileExistsError)": (class_based_suppressing_manager, "with Ignored(FileExistsError)"),
    "cm = ignoring(...); with cm:": (contextmanager_object, "with cm"),
    "except self.retry_on (instance attribute)": (except_an_instance_attribute, "except self.retry_on"),
    "except self.retry_on (a property)": (except_a_property, "except self.retry_on"),
    "except*": (except_star, "?"),
    "a handler twenty frames up": (handler_twenty_frames_up, "except FileExistsError"),
    "a ThreadPoolExecutor future's result()": (future_result, "except BaseException"),
    "asyncio.to_thread": (asyncio_to_thread, "except BaseException"),
    "asyncio.wait_for of a coroutine": (coroutine_in_a_task, "?"),
    "a broad handler in a retry loop": (retry_loop_around_a_broad_handler, "except Exception"),
    "handed to a method that swallows it": (handed_to_a_method_that_swallows, "except BaseException"),
    "finally: return in a helper": (finally_return_helper, "finally"),
    "finally: break in a loop": (finally_break_in_a_loop, "?"),
    "@ignoring(FileExistsError) (a @contextmanager as a decorator)": (ignoring_decorated, "with self._recreate_cm()"),
    "@Ignoring(FileExistsError) (a ContextDecorator)": (context_decorator_suppressing, "with self._recreate_cm()"),
    "with (suppress(E) if c else nullcontext())": (conditional_manager, "?"),
    "a program-set threading.excepthook (a supervised thread)": (supervised_thread, "?"),
    "a manager's name rebound inside its block": (manager_rebound_in_its_block, "?"),
    "ExitStack": (exit_stack, "?"),
    "a two-yield @contextmanager, one yield suppressing": (multi_yield_one_suppressing, "with two_ways()"),
    "with a @contextmanager method that swallows it": (
        with_a_suppressing_contextmanager_method,
        "with accelerator.quietly()",
    ),
}


@pytest.mark.parametrize("name", list(ROWS))
def test_rule_row(name: str) -> None:
    program, expected = ROWS[name]
    found = outcome(program)
    if expected is None:
        assert found is None, found
        return
    assert found is not None, "absorbed: expected the program to decide"
    if expected == "?":
        assert found.get("reason"), found
    else:
        assert found.get("handler") == expected, found
    assert found.get("frame") or found.get("reason"), found


# --- the main thread's sys.excepthook: torch's reporting hook passes on ------------------------------------

TORCH_HOOK = """
import errno, os, sys
import torch.distributed as dist
from fsguard import oracle

{before}
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # sets torch's [rank0]: hook
assert sys.excepthook.__name__ == "_distributed_excepthook", sys.excepthook
error = FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), "run-0")
print(repr(oracle.caller_handles(error, sys._getframe(0))))
dist.destroy_process_group()
"""


@pytest.mark.parametrize(
    ("before", "expected"),
    [
        ("", "None"),  # torch's hook over the default: it only reports, the error ends the process
        ("sys.excepthook = lambda *a: None", "a program-set sys.excepthook decides"),  # torch's over the program's
    ],
)
def test_torchs_process_group_excepthook_reports_and_passes_on(before: str, expected: str) -> None:
    """``init_process_group`` puts torch's ``_distributed_excepthook`` (a ``[rankN]:`` prefix, then the hook it
    replaced) in ``sys.excepthook`` in every torchrun job: it decides nothing; the hook it wraps still does."""
    import subprocess

    pytest.importorskip("torch.distributed")
    code = TORCH_HOOK.format(before=before)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSGUARD")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout.strip().splitlines()[-1], done.stdout
