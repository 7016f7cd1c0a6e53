"""The Flow DSL: decorators that record a DAG of steps.

Pure Python (no Django import), so flow modules load anywhere, and every mistake is reported when the flow
is defined, before the compiler or the database sees it.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias, TypedDict, TypeVar, Unpack, cast, get_args, overload

from pgflow_django.flows.flow_control import Concurrency, InvalidLimit, Limit, RateLimit, limits_for
from pgflow_django.flows.slugs import (
    InvalidSlug,
    default_queue_name,
    shared_queue_problem,
    step_queue_name,
    validate_flow_slug,
    validate_slug,
    version_of,
)
from pgflow_django.flows.waits import (
    InvalidWait,
    WaitSpec,
    event_wait,
    sleep_wait,
    subflow_wait,
    waiting_handler,
)

StepType: TypeAlias = Literal["single", "map"]
QueueMode: TypeAlias = Literal["flow", "step", "routed"]
"""Where a flow's tasks go: ``flow`` one default queue for every step, ``step`` a private queue per step,
``routed`` the declared shared queue its route names for each step."""
WhenMode: TypeAlias = Literal["fail", "skip", "skip-cascade"]
"""What happens to a step whose condition is unmet (``when_unmet``) or whose attempts ran out."""
JsonObject: TypeAlias = dict[str, Any]
Handler: TypeAlias = Callable[..., Any]
StepRef: TypeAlias = Callable[..., Any] | str
"""A step named by its decorated function or by its slug."""

F = TypeVar("F", bound=Callable[..., Any])

WHEN_MODES: Final[tuple[str, ...]] = get_args(WhenMode)
MAX_INT: Final = 2**31 - 1
"""Options are PostgreSQL ``integer`` columns."""
MIN_PRIORITY: Final = -100
MAX_PRIORITY: Final = 100
"""Claim priorities, as Django's tasks framework bounds them: higher is claimed first, 0 is the default."""


class FlowDefinitionError(ValueError):
    """A flow or step definition the engine would refuse; raised when the decorator runs."""


def priority_problem(value: object) -> str | None:
    """Why ``value`` is not a claim priority (None when it is one): the one check of every priority."""
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_PRIORITY <= value <= MAX_PRIORITY:
        return (
            f"must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY} (higher is claimed first), "
            f"got {value!r}"
        )
    return None


@dataclass(frozen=True)
class FlowOptions:
    """Runtime defaults of every step of a flow; not part of the compiled shape, updated in place."""

    max_attempts: int = 3
    base_delay: int = 5
    timeout: int = 60
    priority: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "max_attempts": self.max_attempts,
            "base_delay": self.base_delay,
            "timeout": self.timeout,
            "priority": self.priority,
        }


@dataclass(frozen=True)
class StepOptions:
    """A step's runtime options; None falls back to the flow's value (``start_delay``: to 0).

    ``priority`` is the claim priority of the step's tasks in a run started without one."""

    max_attempts: int | None = None
    base_delay: int | None = None
    timeout: int | None = None
    start_delay: int | None = None
    priority: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        return {
            "max_attempts": self.max_attempts,
            "base_delay": self.base_delay,
            "timeout": self.timeout,
            "start_delay": self.start_delay,
            "priority": self.priority,
        }


@dataclass(frozen=True)
class StepDefinition:
    """One step as recorded by ``@flow.step`` / ``@flow.map``; shared unchanged by ``flow.copy``."""

    slug: str
    step_type: StepType
    deps: tuple[str, ...]
    handler: Handler = field(compare=False)
    index: int
    options: StepOptions = field(default_factory=StepOptions)
    required_input_pattern: JsonObject | None = field(default=None, hash=False)
    forbidden_input_pattern: JsonObject | None = field(default=None, hash=False)
    when_unmet: WhenMode = "skip"
    when_exhausted: WhenMode = "fail"
    atomic: bool = False
    accepts_context: bool = True
    """Whether the handler takes ``(input, ctx)``; otherwise it is called with the input alone."""
    limits: tuple[Limit, ...] = field(default=(), compare=False)
    """The step's ``concurrency=`` and ``rate_limit=`` (not part of the shape: updated in place)."""
    wait: WaitSpec | None = None
    """What an event or sleep step waits for; None for a step a worker's handler runs."""

    @property
    def is_root(self) -> bool:
        return not self.deps

    @property
    def is_map(self) -> bool:
        return self.step_type == "map"

    @property
    def runs_handler(self) -> bool:
        """Whether a worker runs this step (an event or sleep step completes without one)."""
        return self.wait is None

    def shape(self) -> dict[str, Any]:
        """This step's entry in the compiler's shape (docs/sql-api.md)."""
        return {
            "slug": self.slug,
            "step_type": self.step_type,
            "deps": list(self.deps),
            "when_unmet": self.when_unmet,
            "when_exhausted": self.when_exhausted,
            "required_input_pattern": self.required_input_pattern,
            "forbidden_input_pattern": self.forbidden_input_pattern,
            "options": self.options.as_dict(),
            "wait": None if self.wait is None else self.wait.shape(),
        }


class StepKeywords(TypedDict, total=False):
    """The options ``@flow.step()`` and ``@flow.map()`` take by keyword (all optional).

    ``slug`` (default: the function's name); ``depends_on``: step functions or slugs that must
    complete first; ``max_attempts``, ``base_delay``, ``timeout``, ``start_delay``: whole seconds or
    counts, None for the flow's value (``start_delay``: 0); ``priority``: the claim priority of the
    step's tasks (-100..100) in a run started without one, None for the flow's; ``if_`` /
    ``if_not``: JSON the step's input must contain / must not contain; ``when_unmet`` (default
    ``skip``) and ``when_exhausted`` (default ``fail``): ``fail``, ``skip`` or ``skip-cascade``;
    ``atomic``: the handler's ORM writes and its completion commit in one transaction;
    ``concurrency`` and ``rate_limit``: the step's own flow control (docs/flow-control.md).
    """

    slug: str | None
    depends_on: Iterable[StepRef] | StepRef
    max_attempts: int | None
    base_delay: int | None
    timeout: int | None
    start_delay: int | None
    priority: int | None
    if_: Mapping[str, Any] | None
    if_not: Mapping[str, Any] | None
    when_unmet: WhenMode
    when_exhausted: WhenMode
    atomic: bool
    concurrency: Concurrency | None
    rate_limit: RateLimit | str | None


class Retry(Exception):
    """Raised by a handler to choose the delay before its next attempt.

    The attempt still counts as failed (``max_attempts`` applies as for any error); only the
    ``base_delay * 2**attempts`` back-off is replaced by ``delay`` seconds.
    """

    def __init__(self, delay: int, message: str | None = None) -> None:
        if isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= MAX_INT:
            raise ValueError(f"Retry delay must be whole seconds from 0 to {MAX_INT}, got {delay!r}")
        self.delay = delay
        self.message = message or f"retry requested in {delay}s"
        super().__init__(self.message)


_FLOWS: weakref.WeakSet[Flow] = weakref.WeakSet()
"""Every live flow, to tell "a step of another flow" from "not a step at all" in errors."""


class Flow:
    """A named DAG of steps; ``@flow.step()`` and ``@flow.map()`` add steps in definition order."""

    def __init__(
        self,
        slug: str,
        *,
        max_attempts: int = 3,
        base_delay: int = 5,
        timeout: int = 60,
        priority: int = 0,
        concurrency: Concurrency | None = None,
        rate_limit: RateLimit | str | None = None,
        version: str | None = None,
    ) -> None:
        self._slug = validate_flow_slug(slug)
        owner = f"flow {slug!r}"
        self._version = _version_name(owner, version)
        self._stored_slug = self._slug
        self._bound_key = ""
        """A bound version's ``version_key``, computed from the definition before binding."""
        self._options = FlowOptions(
            max_attempts=_int_option(owner, "max_attempts", max_attempts, 1),
            base_delay=_int_option(owner, "base_delay", base_delay, 0),
            timeout=_int_option(owner, "timeout", timeout, 1),
            priority=cast(int, _priority_option(owner, priority, optional=False)),
        )
        self._limits = _limits(owner, "", concurrency, rate_limit)
        self._steps: dict[str, StepDefinition] = {}
        self._fixed_reason: str | None = None
        """Why no step may be added any more (None: steps may be added)."""
        _FLOWS.add(self)

    @property
    def slug(self) -> str:
        """The flow's own slug; a version bound by compiling answers with its stored slug
        (``orders___v2``), the name its rows, queues and tasks carry."""
        return self._stored_slug

    @property
    def version_of(self) -> str:
        """The slug the flow was defined with, whichever version it is bound to."""
        return self._slug

    @property
    def version(self) -> str | None:
        """The version name given to ``Flow(..., version=)``, or None (the definition identifies it)."""
        return self._version

    @property
    def version_key(self) -> str:
        """What identifies this definition's version in ``pgflow.flows.version``: its name, or
        ``shape:`` and a digest of its shape (steps, dependencies, options, queue mode, route)."""
        if self._version is not None:
            return self._version
        if self._stored_slug != self._slug:
            return self._bound_key
        canonical = json.dumps(self.shape(), sort_keys=True, separators=(",", ":"))
        return "shape:" + hashlib.sha256(canonical.encode()).hexdigest()[:32]

    def bound_to(self, stored_slug: str) -> Flow:
        """This definition as the version the database stores under ``stored_slug``: the same steps and
        handlers, with the slug (and so the queues) of that version. The compiler returns the slug."""
        if stored_slug == self.slug:
            return self
        if version_of(stored_slug) != self._slug:
            raise ValueError(f"{stored_slug!r} is not a version of flow {self._slug!r}")
        twin = copy.copy(self)
        twin._bound_key = self.version_key
        twin._stored_slug = stored_slug
        twin._rebind()
        return twin

    def _rebind(self) -> None:
        """Recompute what a bound version derives from its slug (a step-queued flow's queues)."""

    @property
    def options(self) -> FlowOptions:
        return self._options

    @property
    def steps(self) -> Mapping[str, StepDefinition]:
        """Steps by slug, in definition order (read-only)."""
        return MappingProxyType(self._steps)

    @property
    def limits(self) -> tuple[Limit, ...]:
        """The flow's own limits, then each step's, in definition order (docs/flow-control.md)."""
        return self._limits + tuple(limit for step in self._steps.values() for limit in step.limits)

    def __repr__(self) -> str:
        return f"<Flow {self._slug!r}: {', '.join(self._steps) or 'no steps'}>"

    @overload
    def step(self, fn: F, /) -> F: ...

    @overload
    def step(self, fn: None = None, /, **options: Unpack[StepKeywords]) -> Callable[[F], F]: ...

    def step(self, fn: F | None = None, /, **options: Unpack[StepKeywords]) -> F | Callable[[F], F]:
        """Add a step that runs once per run: a root step receives the flow input, a dependent one
        ``{dep_slug: output}``. Takes the options of :class:`StepKeywords`; returns the function unchanged."""
        if fn is not None and not callable(fn):
            raise FlowDefinitionError(
                f"flow {self._slug!r}: step() takes its options by keyword, e.g. @flow.step(slug={fn!r})"
            )
        _check_keywords("step", options)

        def decorate(handler: F) -> F:
            self._add(handler, "single", (), options)
            return handler

        return decorate if fn is None else decorate(fn)

    def map(self, *, array: StepRef | None = None, **options: Unpack[StepKeywords]) -> Callable[[F], F]:
        """Add a step that runs one task per element of an array: the output of ``array`` (its only
        dependency), or the flow input when ``array`` is None. Its output is the list of task outputs.
        Takes the options of :class:`StepKeywords` besides ``array``."""
        _check_keywords("map", options)

        def decorate(handler: F) -> F:
            self._add(handler, "map", () if array is None else (array,), options)
            return handler

        return decorate

    def wait_for_event(
        self,
        slug: str,
        *,
        event: str,
        depends_on: Iterable[StepRef] | StepRef = (),
        key: str | None = None,
        timeout: int | None = None,
        when_timeout: WhenMode = "fail",
        if_: Mapping[str, Any] | None = None,
        if_not: Mapping[str, Any] | None = None,
        when_unmet: WhenMode = "skip",
    ) -> str:
        """Add a step that waits for the event ``event`` sent to its run (``send_event(event,
        run_id=...)``) or, with ``key`` (a JSON path into the flow input such as ``"$.order_id"``), sent
        with that value (``send_event(event, key=...)``). No worker holds it while it waits. Its output
        is the event's payload. After ``timeout`` seconds it fails; ``when_timeout`` (``fail``, ``skip``,
        ``skip-cascade``) decides what follows, as ``when_exhausted`` does. Returns the step's slug."""
        owner = f"step {slug!r} of flow {self._slug!r}"
        seconds = _int_option(owner, "timeout", timeout, 1, optional=True)
        when = _when(owner, "when_timeout", when_timeout)
        try:
            wait = event_wait(owner, event, key, seconds)
        except InvalidWait as exc:
            raise FlowDefinitionError(str(exc)) from None
        options: StepKeywords = {
            "slug": slug,
            "depends_on": depends_on,
            "if_": if_,
            "if_not": if_not,
            "when_unmet": when_unmet,
            "when_exhausted": when,
        }
        return self._add(waiting_handler(owner, wait), "single", (), options, wait=wait)

    def sleep(
        self,
        slug: str,
        *,
        depends_on: Iterable[StepRef] | StepRef = (),
        seconds: int | None = None,
        until: str | None = None,
        if_: Mapping[str, Any] | None = None,
        if_not: Mapping[str, Any] | None = None,
        when_unmet: WhenMode = "skip",
    ) -> str:
        """Add a step that completes ``seconds`` after it starts, or at the ISO-8601 timestamp found at
        ``until`` (a JSON path into the step's input, such as ``"$.charge.refund_after"``), with no worker
        holding it meanwhile. Its output is ``{"slept_until": <time>}``. Returns the step's slug."""
        owner = f"step {slug!r} of flow {self._slug!r}"
        try:
            wait = sleep_wait(owner, _int_option(owner, "seconds", seconds, 0, optional=True), until)
        except InvalidWait as exc:
            raise FlowDefinitionError(str(exc)) from None
        options: StepKeywords = {
            "slug": slug,
            "depends_on": depends_on,
            "if_": if_,
            "if_not": if_not,
            "when_unmet": when_unmet,
        }
        return self._add(waiting_handler(owner, wait), "single", (), options, wait=wait)

    def subflow(
        self,
        slug: str,
        *,
        flow: Flow | str,
        depends_on: Iterable[StepRef] | StepRef = (),
        array: StepRef | None = None,
        if_: Mapping[str, Any] | None = None,
        if_not: Mapping[str, Any] | None = None,
        when_unmet: WhenMode = "skip",
        when_exhausted: WhenMode = "fail",
    ) -> str:
        """Add a step that starts a run of ``flow`` (a ``Flow``, or a compiled flow's slug) with the
        step's input and completes with that run's output; with ``array`` (a step), one child run per
        element of that step's output, completing with their outputs in element order, like a map.
        A failed child fails the step (``when_exhausted`` applies); its own retries happen inside it.
        No worker holds the step while its children run. Returns the step's slug."""
        owner = f"step {slug!r} of flow {self._slug!r}"
        child: Flow | None = flow if isinstance(flow, Flow) else None
        if child is None and not isinstance(flow, str):
            raise FlowDefinitionError(
                f"{owner}: flow= must be a Flow or a flow's slug, got {type(flow).__name__}"
            )
        try:
            child_slug = child.slug if child is not None else validate_flow_slug(cast(str, flow))
        except InvalidSlug as exc:
            raise FlowDefinitionError(f"{owner}: flow= {exc}") from None
        if child is self or child_slug == self._slug:
            raise FlowDefinitionError(f"{owner}: a flow cannot start itself as a child flow")
        options: StepKeywords = {
            "slug": slug,
            "depends_on": depends_on,
            "if_": if_,
            "if_not": if_not,
            "when_unmet": when_unmet,
            "when_exhausted": when_exhausted,
        }
        wait = subflow_wait(child_slug, child)
        step_type: StepType = "single" if array is None else "map"
        return self._add(
            waiting_handler(owner, wait), step_type, () if array is None else (array,), options, wait=wait
        )

    def child_flows(self) -> tuple[Flow, ...]:
        """The flows this flow's subflow steps were given as ``Flow`` objects, in step order."""
        found: dict[str, Flow] = {}
        for step in self._steps.values():
            if step.wait is not None and isinstance(step.wait.child, Flow):
                found.setdefault(step.wait.child.slug, step.wait.child)
        return tuple(found.values())

    def copy(self, *, slug: str) -> Flow:
        """The same DAG and options under another slug: a side-by-side deployment (versions of one slug
        need no copy: compiling a changed definition adds a version)."""
        twin = Flow(slug, version=self._version, **_options_of(self))
        twin._limits = self._limits
        twin._steps = dict(self._steps)
        return twin

    @property
    def queue_mode(self) -> QueueMode:
        """``flow``: every step's tasks go to the flow's default queue, ``lower(slug)``."""
        return "flow"

    def queue_for(self, ref: StepRef) -> str:
        """The queue a step's tasks are sent to and its workers poll."""
        self._resolve(ref, None)
        return default_queue_name(self.slug)

    def route(self) -> dict[str, str]:
        """Every step's queue, in definition order: what the compiler persists as the flow's routing."""
        return {slug: self.queue_for(slug) for slug in self._steps}

    def shape(self) -> dict[str, Any]:
        """The complete ordered definition that ``pgflow.ensure_flow_compiled`` compares (docs/sql-api.md)."""
        return {
            "options": self._options.as_dict(),
            "queue_mode": self.queue_mode,
            "route": self.route(),
            "steps": [definition.shape() for definition in self._steps.values()],
        }

    def get_step(self, ref: StepRef) -> StepDefinition:
        """The step named by its function or slug; the error lists the valid slugs."""
        return self._steps[self._resolve(ref, None)]

    def step_slug(self, ref: StepRef) -> str:
        """The slug of the step named by its function or slug."""
        return self._resolve(ref, None)

    def effective_options(self, ref: StepRef) -> StepOptions:
        """A step's options with the flow's defaults filled in, as the engine applies them."""
        own = self.get_step(ref).options
        return StepOptions(
            max_attempts=self._options.max_attempts if own.max_attempts is None else own.max_attempts,
            base_delay=self._options.base_delay if own.base_delay is None else own.base_delay,
            timeout=self._options.timeout if own.timeout is None else own.timeout,
            start_delay=0 if own.start_delay is None else own.start_delay,
            priority=self._options.priority if own.priority is None else own.priority,
        )

    def _add(
        self,
        handler: Handler,
        step_type: StepType,
        array: tuple[StepRef, ...],
        options: StepKeywords,
        *,
        wait: WaitSpec | None = None,
    ) -> str:
        """Validate everything first, then record the step, so a refused step leaves the flow unchanged."""
        if self._fixed_reason is not None:
            raise FlowDefinitionError(self._fixed_reason)
        if not callable(handler):
            raise FlowDefinitionError(
                f"flow {self._slug!r}: a step handler must be a function, got {type(handler).__name__}"
            )
        slug = options.get("slug")
        if slug is None:
            step_slug = validate_slug(
                getattr(handler, "__name__", None),
                f"flow {self._slug!r}: step slug (the function's name)",
                "pass slug='...' to the decorator",
            )
        else:
            step_slug = validate_slug(slug, f"flow {self._slug!r}: step slug")
        owner = f"step {step_slug!r} of flow {self._slug!r}"
        if step_slug in self._steps:
            raise FlowDefinitionError(f"{owner} is defined twice; give the second one another slug=")
        twin = next((slug for slug in self._steps if slug.lower() == step_slug.lower()), None)
        if twin is not None:
            raise FlowDefinitionError(
                f"{owner} differs only in case from step {twin!r}; queue names are lowercase, so give it "
                "another slug="
            )
        deps = tuple(
            sorted({self._resolve(ref, step_slug) for ref in _refs(options.get("depends_on", ())) + array})
        )
        if step_type == "map" and len(deps) > 1:
            raise FlowDefinitionError(
                f"{owner} is a map with {len(deps)} dependencies ({', '.join(deps)}); a map has at most "
                "one: pass array=<step> to map over that step's output, or nothing to map over the flow input"
            )
        step_options = StepOptions(
            max_attempts=_int_option(owner, "max_attempts", options.get("max_attempts"), 1, optional=True),
            base_delay=_int_option(owner, "base_delay", options.get("base_delay"), 0, optional=True),
            timeout=_int_option(owner, "timeout", options.get("timeout"), 1, optional=True),
            start_delay=_int_option(owner, "start_delay", options.get("start_delay"), 0, optional=True),
            priority=_priority_option(owner, options.get("priority"), optional=True),
        )
        definition = StepDefinition(
            slug=step_slug,
            step_type=step_type,
            deps=deps,
            handler=handler,
            index=len(self._steps),
            options=step_options,
            required_input_pattern=_pattern(owner, "if_", options.get("if_"), deps),
            forbidden_input_pattern=_pattern(owner, "if_not", options.get("if_not"), deps),
            when_unmet=_when(owner, "when_unmet", options.get("when_unmet", "skip")),
            when_exhausted=_when(owner, "when_exhausted", options.get("when_exhausted", "fail")),
            atomic=_flag(owner, "atomic", options.get("atomic", False)),
            accepts_context=handler_accepts_context(owner, handler),
            limits=_limits(owner, step_slug, options.get("concurrency"), options.get("rate_limit")),
            wait=wait,
        )
        self._steps[step_slug] = definition
        return step_slug

    def _resolve(self, ref: object, dependent: str | None) -> str:
        """Turn a step function or slug into this flow's slug; ``dependent`` names who asks, for errors."""
        asker = f"step {dependent!r} of flow {self._slug!r}" if dependent else f"flow {self._slug!r}"
        known = ", ".join(self._steps) or "none yet"
        if isinstance(ref, str):
            if ref in self._steps:
                return ref
            if ref == dependent:
                raise FlowDefinitionError(
                    f"{asker} depends on itself; a step can only depend on earlier steps"
                )
            raise FlowDefinitionError(
                f"{asker}: {ref!r} is not a step of this flow; define it before the steps that depend on it "
                f"(steps: {known})"
            )
        if not callable(ref):
            raise FlowDefinitionError(
                f"{asker}: a step is named by its function or its slug, got {type(ref).__name__}"
            )
        name = getattr(ref, "__name__", repr(ref))
        mine = [definition.slug for definition in self._steps.values() if definition.handler is ref]
        if len(mine) == 1:
            return mine[0]
        if mine:
            raise FlowDefinitionError(
                f"{asker}: function {name!r} is used by steps {', '.join(mine)}; name the step by its slug"
            )
        others = sorted(
            flow.slug
            for flow in list(_FLOWS)
            if flow is not self and any(definition.handler is ref for definition in flow._steps.values())
        )
        if others:
            raise FlowDefinitionError(
                f"{asker}: function {name!r} is a step of flow {', '.join(map(repr, others))}, not of this "
                f"flow; depend on a step of flow {self._slug!r} (steps: {known})"
            )
        raise FlowDefinitionError(
            f"{asker}: function {name!r} is not a step of this flow; decorate it with "
            f"@{self._slug}.step() before the steps that depend on it (steps: {known})"
        )


class _FixedRouteFlow(Flow):
    """A flow made from a plain one with a queue fixed for each step; its steps can no longer change."""

    _queues: Mapping[str, str]

    def __init__(self, flow: Flow) -> None:
        super().__init__(flow.slug, version=flow.version, **_options_of(flow))
        self._limits = flow._limits

    def _fix(
        self, steps: Mapping[str, StepDefinition], queues: Mapping[str, str], how: str, call: str
    ) -> None:
        self._steps = dict(steps)
        self._queues = MappingProxyType(dict(queues))
        self._fixed_reason = (
            f"flow {self.slug!r} is {how}: its steps were fixed by {call.partition('(')[0]}(); define every "
            f"step on the plain flow first, then call {call}"
        )

    @property
    def step_queues(self) -> Mapping[str, str]:
        """Each step's queue by step slug, in definition order (read-only)."""
        return self._queues

    def queue_for(self, ref: StepRef) -> str:
        return self._queues[self._resolve(ref, None)]


class StepQueuedFlow(_FixedRouteFlow):
    """A flow whose every step has a private generated queue and its own worker pool.

    Made by ``with_step_queues(flow)``; its steps are fixed at that moment. The DAG, handlers and
    options are the flow's own; only the routing differs, and it is part of the concrete slug's identity.
    """

    def __init__(self, flow: Flow) -> None:
        super().__init__(flow)
        if not flow.steps:
            raise FlowDefinitionError(
                f"with_step_queues(flow {flow.slug!r}): the flow has no steps; define its steps first"
            )
        self._steps = dict(flow.steps)
        queues: dict[str, str] = {}
        for definition in self._steps.values():
            try:
                queues[definition.slug] = step_queue_name(self.slug, definition.slug, definition.index)
            except InvalidSlug as exc:
                raise FlowDefinitionError(f"with_step_queues: {exc}") from None
        self._fix(self._steps, queues, "step-queued", "with_step_queues(flow)")

    def __repr__(self) -> str:
        return f"<StepQueuedFlow {self.slug!r}: {', '.join(self._steps)}>"

    def _rebind(self) -> None:
        self._queues = MappingProxyType(
            {step.slug: step_queue_name(self.slug, step.slug, step.index) for step in self._steps.values()}
        )

    @property
    def queue_mode(self) -> QueueMode:
        """``step``: each step's tasks go to that step's private queue."""
        return "step"

    def copy(self, *, slug: str) -> StepQueuedFlow:
        """The same step-queued flow under another slug, with the queues generated for that slug."""
        return StepQueuedFlow(Flow.copy(self, slug=slug))


def with_step_queues(flow: Flow) -> StepQueuedFlow:
    """Deploy ``flow`` with a private queue per step (``flow__step``, or ``flow__<index>`` past 47
    characters), so each step gets its own workers (``pgflow_worker --flow F --step S``) and a backlog
    in one step never delays another. Every generated name is checked here, before any database access."""
    if not isinstance(flow, Flow):
        raise FlowDefinitionError(f"with_step_queues() takes a Flow, got {type(flow).__name__}")
    if isinstance(flow, StepQueuedFlow):
        raise FlowDefinitionError(f"flow {flow.slug!r} is already step-queued")
    return StepQueuedFlow(flow)


class RoutedFlow(_FixedRouteFlow):
    """A flow whose steps go to explicit shared queues: several steps, flows and versions may share one.

    Made by ``route_flow(flow, queues={...})``; its steps are fixed at that moment. A worker polls one
    shared queue for every flow it is given (``pgflow_worker --queue Q --flow A --flow B``).
    """

    def __init__(self, flow: Flow, queues: Mapping[str, str]) -> None:
        super().__init__(flow)
        owner = f"route_flow(flow {flow.slug!r})"
        if not isinstance(queues, Mapping):
            raise FlowDefinitionError(
                f"{owner}: queues must be a mapping {{step_slug: queue_name}}, got {type(queues).__name__}"
            )
        if not flow.steps:
            raise FlowDefinitionError(f"{owner}: the flow has no steps; define its steps first")
        steps = list(flow.steps)
        unknown = sorted(str(key) for key in queues if key not in flow.steps)
        missing = [slug for slug in steps if slug not in queues]
        if unknown or missing:
            parts = ([f"unknown step(s) {', '.join(map(repr, unknown))}"] if unknown else []) + (
                [f"no queue for {', '.join(map(repr, missing))}"] if missing else []
            )
            raise FlowDefinitionError(
                f"{owner}: {'; '.join(parts)}; give every step exactly one queue (steps: {', '.join(steps)})"
            )
        for slug in steps:
            problem = shared_queue_problem(queues[slug])
            if problem is not None:
                raise FlowDefinitionError(f"{owner}: queue {queues[slug]!r} of step {slug!r} {problem}")
            if queues[slug] == default_queue_name(flow.slug):
                raise FlowDefinitionError(
                    f"{owner}: queue {queues[slug]!r} of step {slug!r} is the flow's own default queue name, "
                    "reserved for the plain flow; choose another shared queue name"
                )
        self._fix(
            flow.steps, {slug: queues[slug] for slug in steps}, "routed", "route_flow(flow, queues=...)"
        )

    def __repr__(self) -> str:
        return f"<RoutedFlow {self.slug!r}: {', '.join(f'{s}->{q}' for s, q in self._queues.items())}>"

    @property
    def queue_mode(self) -> QueueMode:
        """``routed``: each step's tasks go to the shared queue its route names."""
        return "routed"

    @property
    def queues(self) -> tuple[str, ...]:
        """The distinct shared queues of the route, in first-use order."""
        return tuple(dict.fromkeys(self._queues.values()))

    def steps_on(self, queue: str) -> tuple[str, ...]:
        """The steps routed to ``queue``, in definition order."""
        return tuple(slug for slug, name in self._queues.items() if name == queue)

    def copy(self, *, slug: str) -> RoutedFlow:
        """The same DAG and route under another slug: a new version, which may share the queues."""
        return RoutedFlow(Flow.copy(self, slug=slug), self._queues)


def route_flow(flow: Flow, *, queues: Mapping[str, str]) -> RoutedFlow:
    """Route each step of ``flow`` to an explicit shared queue: every step exactly once, names in
    lowercase letters, digits and single underscores, at most 47 characters. Several steps, flows and
    versions may name the same queue; its workers run ``pgflow_worker --queue Q --flow F ...``. Every
    name is checked here, before any database access."""
    if not isinstance(flow, Flow):
        raise FlowDefinitionError(f"route_flow() takes a Flow, got {type(flow).__name__}")
    if isinstance(flow, StepQueuedFlow | RoutedFlow):
        raise FlowDefinitionError(
            f"flow {flow.slug!r} already has a route ({flow.queue_mode}); route the plain flow instead"
        )
    return RoutedFlow(flow, queues)


def descendant_flows(flow: Flow) -> list[Flow]:
    """The flows ``flow`` starts as child flows (given as ``Flow`` objects), transitively, each listed
    before every flow that starts it: the order to compile them in. A cycle is refused: a flow may
    not start itself, directly or through others."""
    ordered: list[Flow] = []
    done: set[str] = set()

    def visit(current: Flow, path: tuple[str, ...]) -> None:
        for child in current.child_flows():
            if child.slug in path:
                cycle = " -> ".join((*path[path.index(child.slug) :], child.slug))
                raise FlowDefinitionError(
                    f"flow {flow.slug!r}: its child flows form a cycle ({cycle}); a flow cannot start "
                    "itself, directly or through other flows"
                )
            if child.slug not in done:
                visit(child, (*path, child.slug))
                done.add(child.slug)
                ordered.append(child)

    visit(flow, (flow.slug,))
    return ordered


def _check_keywords(decorator: str, options: Mapping[str, object]) -> None:
    """An unknown option is a TypeError, as for any keyword a function lacks; it lists the valid ones."""
    unknown = sorted(set(options) - StepKeywords.__optional_keys__)
    if unknown:
        raise TypeError(
            f"{decorator}() got an unexpected keyword argument {unknown[0]!r}; it takes "
            + ", ".join(sorted(StepKeywords.__optional_keys__))
        )


def _limits(owner: str, step_slug: str, concurrency: object, rate_limit: object) -> tuple[Limit, ...]:
    try:
        return limits_for(owner, step_slug, concurrency, rate_limit)
    except InvalidLimit as exc:
        raise FlowDefinitionError(str(exc)) from None


def _version_name(owner: str, value: object) -> str | None:
    """A version name as ``pgflow.flows.version`` takes it: 1 to 80 printable characters, and not
    ``shape:...`` (the digests that identify unnamed versions)."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= 80
        or not value.isprintable()
        or value.startswith("shape:")
    ):
        raise FlowDefinitionError(
            f"{owner}: version must be a name of 1 to 80 printable characters not starting with 'shape:' "
            f'(e.g. version="2026-12"), got {value!r}'
        )
    return value


def _options_of(flow: Flow) -> dict[str, Any]:
    """A flow's runtime options as ``Flow(...)`` keywords (its limits are carried separately)."""
    return dict(flow.options.as_dict())


def _refs(depends_on: Iterable[StepRef] | StepRef) -> tuple[StepRef, ...]:
    """``depends_on=validate`` and ``depends_on="validate"`` mean a one-element list, not its characters."""
    if isinstance(depends_on, str) or callable(depends_on):
        return (depends_on,)
    return tuple(depends_on)


@overload
def _int_option(owner: str, name: str, value: object, minimum: int) -> int: ...


@overload
def _int_option(owner: str, name: str, value: object, minimum: int, *, optional: bool) -> int | None: ...


def _int_option(owner: str, name: str, value: object, minimum: int, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_INT:
        raise FlowDefinitionError(
            f"{owner}: {name} must be a whole number from {minimum} to {MAX_INT}"
            f"{' (or None for the default)' if optional else ''}, got {value!r}"
        )
    return value


def _priority_option(owner: str, value: object, *, optional: bool) -> int | None:
    if value is None and optional:
        return None
    problem = priority_problem(value)
    if problem is not None:
        raise FlowDefinitionError(
            f"{owner}: priority {problem}{' (or None for the flow default)' if optional else ''}"
        )
    return cast(int, value)


def _when(owner: str, name: str, value: object) -> WhenMode:
    if value not in WHEN_MODES:
        raise FlowDefinitionError(f"{owner}: {name} must be one of {', '.join(WHEN_MODES)}, got {value!r}")
    return cast(WhenMode, value)


def _flag(owner: str, name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise FlowDefinitionError(f"{owner}: {name} must be True or False, got {value!r}")
    return value


def _pattern(owner: str, name: str, value: object, deps: tuple[str, ...]) -> JsonObject | None:
    """A JSON-containment condition on the step input; a dependent step's input is ``{dep_slug: output}``."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise FlowDefinitionError(
            f"{owner}: {name} must be a JSON object (a dict) matched against the step input, "
            f"got {type(value).__name__}"
        )
    try:
        pattern: JsonObject = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise FlowDefinitionError(f"{owner}: {name} is not JSON-serialisable: {exc}") from None
    unknown = sorted(set(pattern) - set(deps)) if deps else []
    if unknown:
        raise FlowDefinitionError(
            f"{owner}: {name} names {', '.join(map(repr, unknown))}, which this step does not depend on; "
            f"its input is {{dep_slug: output}}, so use keys among: {', '.join(deps)}"
        )
    return pattern


def handler_accepts_context(owner: str, handler: Handler) -> bool:
    """Whether to call ``handler(input, ctx)`` or ``handler(input)``; refuse handlers that fit neither."""
    try:
        parameters = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    required = [p.name for p in positional if p.default is p.empty]
    required += [p.name for p in parameters if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    if len(required) > 2 or not (positional or variadic) or len(required) > len(positional):
        raise FlowDefinitionError(
            f"{owner}: the handler must take (input) or (input, ctx), but its parameters are "
            f"({', '.join(p.name for p in parameters)})"
        )
    return variadic or len(positional) >= 2
