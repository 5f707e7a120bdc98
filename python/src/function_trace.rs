//! Python function tracing (`python_tracing`): CPython reports each call
//! and return of a Python function, and the traced ones go to the agent's
//! [`rankscope::Profiler::enter_function`] and
//! [`rankscope::Profiler::exit_function`]; with `python_tracing_c_functions`,
//! so do the calls of C functions (builtins, C extensions'). Two ways in,
//! by the interpreter's version:
//!
//! - `sys.monitoring` (3.12+): the starts, resumptions and throws into a
//!   function, and its returns, yields and unwinds, on every thread of
//!   the interpreter; a function that is not traced is disabled where it
//!   was seen, so it costs nothing after. C functions: each `CALL` whose
//!   callable is one, and its `C_RETURN` or `C_RAISE`;
//! - before 3.12, CPython's C-level profile hook, on the thread that
//!   starts tracing and on threads started after (`threading.setprofile`
//!   sets it on each as it starts); its `C_CALL`, `C_RETURN` and
//!   `C_EXCEPTION` for C functions.
//!
//! A Python function is its code object, known by its address: the object
//! is held alive while tracing lasts, so the address names no other. A C
//! function is its C implementation's address (the same for every bound
//! instance a method call makes), or a method descriptor's, held alive
//! likewise. Each is described (qualified name, file, first line) and
//! matched against the include and exclude filters once, under the
//! interpreter's lock, into a registry every thread shares; each thread
//! then caches its site (at most as many as the registry holds).

use std::cell::RefCell;
use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyModule, PyString};
use rustc_hash::FxHashMap;

use rankscope::FunctionSite;

/// CPython's profile function type (`Py_tracefunc`).
type ProfileFn = unsafe extern "C" fn(
    obj: *mut ffi::PyObject,
    frame: *mut ffi::PyFrameObject,
    what: c_int,
    arg: *mut ffi::PyObject,
) -> c_int;

extern "C" {
    /// Sets the calling thread's profile function (CPython's C API since
    /// 2.x, unchanged; outside the limited API, which has no profiling).
    fn PyEval_SetProfile(func: Option<ProfileFn>, arg: *mut ffi::PyObject);
}

/// `PyTrace_CALL`: a Python function is entered (or a generator resumed).
const TRACE_CALL: c_int = 0;
/// `PyTrace_RETURN`: it returns (or yields, or unwinds with an exception).
const TRACE_RETURN: c_int = 3;
/// `PyTrace_C_CALL`: a C function is called (its object is the argument).
const TRACE_C_CALL: c_int = 4;
/// `PyTrace_C_EXCEPTION`: it raised.
const TRACE_C_EXCEPTION: c_int = 5;
/// `PyTrace_C_RETURN`: it returned.
const TRACE_C_RETURN: c_int = 6;

/// Whether the tracing that runs traces C functions too.
static C_FUNCTIONS: AtomicBool = AtomicBool::new(false);

/// The most code objects described while tracing lasts; past it, new
/// functions are not traced (their time is their caller's own).
const MAX_FUNCTIONS: usize = 200_000;

/// Which tracing the threads' hooks belong to: 0 while none runs. A hook
/// that finds another unsets itself.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The next tracing's generation: each tracing its own, from 1.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// What every thread's hook shares while tracing runs.
static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// The tracing that runs: its profiler, filters and functions described.
struct Registry {
    generation: u64,
    profiler: rankscope::Profiler,
    filters: Arc<Filters>,
    functions: FxHashMap<usize, Function>,
    /// The `sys.monitoring` tool id it runs as (3.12+); none: the C hook.
    monitoring: Option<u8>,
}

/// One function (a code object, or a C function), described.
struct Function {
    /// Its site, where it is traced.
    site: Option<Arc<Site>>,
    /// Its code object or C function, held alive, so that its key names
    /// it alone.
    _object: Py<PyAny>,
}

/// Where a traced function is ([`FunctionSite`], owned).
struct Site {
    name: String,
    file: String,
    line: u32,
}

/// What is traced: C functions or not, the modules or qualified names to
/// trace alone, and those never to.
#[derive(Debug)]
pub(crate) struct Filters {
    c_functions: bool,
    include: Vec<String>,
    exclude: Vec<String>,
}

impl Filters {
    /// Filters from the comma-separated settings; rankscope's own package
    /// is always excluded.
    pub(crate) fn new(include: Option<&str>, exclude: Option<&str>, c_functions: bool) -> Self {
        let list = |text: Option<&str>| -> Vec<String> {
            text.unwrap_or("")
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect()
        };
        let mut exclude = list(exclude);
        exclude.push("rankscope".into());
        Filters {
            c_functions,
            include: list(include),
            exclude,
        }
    }

    /// Whether the function of qualified name `name` is traced.
    pub(crate) fn traces(&self, name: &str) -> bool {
        let included = self.include.is_empty() || self.include.iter().any(|p| matches(p, name));
        included && !self.excludes(name)
    }

    /// Whether an exclusion matches the qualified name `name`.
    fn excludes(&self, name: &str) -> bool {
        self.exclude.iter().any(|p| matches(p, name))
    }
}

/// Whether `pattern` matches the qualified name `name`: itself and the
/// names below it (`pkg` matches `pkg.mod.f`).
fn matches(pattern: &str, name: &str) -> bool {
    name.strip_prefix(pattern)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// A thread's view of the tracing: its profiler and the sites of the code
/// objects it met, by address (`None`: not traced).
struct ThreadView {
    generation: u64,
    profiler: rankscope::Profiler,
    sites: FxHashMap<usize, Option<Arc<Site>>>,
}

thread_local! {
    static VIEW: RefCell<Option<ThreadView>> = const { RefCell::new(None) };
}

/// Starts tracing for `profiler` (in place of any other's): every thread
/// where the interpreter has `sys.monitoring`, else the calling thread and
/// those started from now on. Returns the tracing's token, for [`stop`].
pub(crate) fn start(
    py: Python<'_>,
    profiler: rankscope::Profiler,
    filters: Filters,
) -> PyResult<u64> {
    stop(py, None)?;
    let generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
    let sys = py.import("sys")?;
    let c_functions = filters.c_functions;
    let monitoring = match sys.hasattr("monitoring")? {
        true => Some(start_monitoring(&sys.getattr("monitoring")?, c_functions)?),
        false => None,
    };
    C_FUNCTIONS.store(c_functions, Ordering::Relaxed);
    *lock_registry() = Some(Registry {
        generation,
        profiler: profiler.clone(),
        filters: Arc::new(filters),
        functions: FxHashMap::default(),
        monitoring,
    });
    GENERATION.store(generation, Ordering::Relaxed);
    profiler.forget_function_calls();
    if monitoring.is_none() {
        py.import("threading")?
            .call_method1("setprofile", (wrap_pyfunction!(_trace_new_thread, py)?,))?;
        // SAFETY: the interpreter's lock is held (`py`); `profile` has the
        // signature CPython calls.
        unsafe { PyEval_SetProfile(Some(profile), std::ptr::null_mut()) };
    }
    Ok(generation)
}

/// Stops the tracing of `token` (any, without one): every thread's with
/// `sys.monitoring`; else the calling thread's hook and the new threads'
/// now, the other threads' at their next call. The code objects are let
/// go.
pub(crate) fn stop(py: Python<'_>, token: Option<u64>) -> PyResult<()> {
    let running = {
        let mut registry = lock_registry();
        match &*registry {
            Some(running) if token.is_none_or(|t| t == running.generation) => registry.take(),
            _ => None,
        }
    };
    let Some(running) = running else {
        return Ok(());
    };
    GENERATION.store(0, Ordering::Relaxed);
    match running.monitoring {
        Some(id) => stop_monitoring(&py.import("sys")?.getattr("monitoring")?, id)?,
        None => {
            // SAFETY: the interpreter's lock is held (`py`).
            unsafe { PyEval_SetProfile(None, std::ptr::null_mut()) };
            py.import("threading")?
                .call_method1("setprofile", (py.None(),))?;
        }
    }
    running.profiler.forget_function_calls();
    VIEW.with(|view| view.borrow_mut().take());
    // The code objects are dropped here, with the interpreter's lock held.
    drop(running);
    Ok(())
}

/// `threading.setprofile`'s function while tracing runs: a new thread's
/// first event sets the C hook on that thread in its place.
#[pyfunction]
fn _trace_new_thread(
    _frame: &Bound<'_, PyAny>,
    _event: &Bound<'_, PyAny>,
    _arg: &Bound<'_, PyAny>,
) {
    if GENERATION.load(Ordering::Relaxed) != 0 {
        // SAFETY: called by the interpreter, its lock held.
        unsafe { PyEval_SetProfile(Some(profile), std::ptr::null_mut()) };
    }
}

fn lock_registry() -> std::sync::MutexGuard<'static, Option<Registry>> {
    REGISTRY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The C hook (before 3.12).
unsafe extern "C" fn profile(
    _obj: *mut ffi::PyObject,
    frame: *mut ffi::PyFrameObject,
    what: c_int,
    arg: *mut ffi::PyObject,
) -> c_int {
    let c_call = match what {
        TRACE_CALL | TRACE_RETURN => false,
        TRACE_C_CALL | TRACE_C_RETURN | TRACE_C_EXCEPTION => true,
        _ => return 0,
    };
    if GENERATION.load(Ordering::Relaxed) == 0 {
        // Tracing stopped: this thread's hook goes.
        PyEval_SetProfile(None, std::ptr::null_mut());
        return 0;
    }
    if c_call {
        if C_FUNCTIONS.load(Ordering::Relaxed) {
            record_c_call(arg, what == TRACE_C_CALL);
        }
        return 0;
    }
    // A new reference, given back below.
    let code = ffi::PyFrame_GetCode(frame);
    if code.is_null() {
        return 0;
    }
    let key = code as usize;
    let describe = || describe_code(frame, code.cast(), key);
    record(key, describe, what == TRACE_CALL);
    ffi::Py_DecRef(code.cast());
    0
}

/// Records that the C function `callable` was called (or returned or
/// raised), if it is one and traced; returns whether it is (as [`record`]).
///
/// # Safety
/// The interpreter's lock is held; `callable` is live (or null).
unsafe fn record_c_call(callable: *mut ffi::PyObject, entered: bool) -> Option<bool> {
    let Some(key) = c_function_key(callable) else {
        return Some(false);
    };
    record(key, || describe_c_function(callable, key), entered)
}

/// The key of the C function `callable`: its C implementation's address
/// for a builtin function or method (every bound instance shares it), a
/// method descriptor's own; `None` for anything else (a Python function,
/// a class).
///
/// # Safety
/// The interpreter's lock is held; `callable` is live (or null).
unsafe fn c_function_key(callable: *mut ffi::PyObject) -> Option<usize> {
    if callable.is_null() {
        return None;
    }
    if ffi::PyCFunction_Check(callable) != 0 {
        return ffi::PyCFunction_GetFunction(callable).map(|f| f as usize);
    }
    let descriptor = std::ptr::addr_of_mut!(ffi::PyMethodDescr_Type);
    (ffi::PyObject_TypeCheck(callable, descriptor) != 0).then_some(callable as usize)
}

/// Records that the function of `key` was entered (or left), if it is
/// traced; returns whether it is, or `None` where that is not known: the
/// tracing stopped, the thread's locals are being torn down, or its view
/// is in use (a callback called by hand from code that `describe` ran).
/// `describe` describes the function, asked once per function and thread.
///
/// # Safety
/// The interpreter's lock is held, and `describe` may read the event's
/// live objects.
unsafe fn record(
    key: usize,
    describe: impl FnOnce() -> Option<Arc<Site>>,
    entered: bool,
) -> Option<bool> {
    let generation = GENERATION.load(Ordering::Relaxed);
    VIEW.try_with(|view| {
        let mut view = view.try_borrow_mut().ok()?;
        let view = match &mut *view {
            Some(view) if view.generation == generation => view,
            stale => stale.insert(thread_view(generation)?),
        };
        let ThreadView {
            profiler, sites, ..
        } = view;
        let described = match sites.get(&key) {
            Some(site) => site.as_ref(),
            None => {
                let site = describe();
                match sites.len() < MAX_FUNCTIONS {
                    true => sites.entry(key).or_insert(site).as_ref(),
                    // Past the registry's bound, nothing new is traced or kept.
                    false => None,
                }
            }
        };
        let Some(site) = described else {
            return Some(false);
        };
        match entered {
            true => profiler.enter_function(key, || FunctionSite {
                name: &site.name,
                file: &site.file,
                line: site.line,
            }),
            false => profiler.exit_function(key),
        }
        Some(true)
    })
    .ok()
    .flatten()
}

/// `types.CodeType`: the first argument of a Python function's event, checked
/// (a callback called by hand may be given anything).
static CODE_TYPE: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(std::ptr::null_mut());

/// `sys.monitoring.DISABLE`, once looked up.
static DISABLE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Whether a tracing disabled events where functions it does not trace
/// were seen (restarted at the next tracing's start).
static DISABLED: AtomicBool = AtomicBool::new(false);

/// One `sys.monitoring` callback: the events it is registered for, its
/// name, and its function, which CPython calls as a builtin of the fast
/// calling convention (`METH_FASTCALL`): the event's arguments as an array,
/// with no parsing between the interpreter and the recorder (PyO3's
/// argument handling cost more than the recording). Each returns a new
/// reference (`None`, or `DISABLE`) and never raises.
struct Monitor {
    events: &'static [&'static str],
    name: &'static CStr,
    callback: ffi::PyCFunctionFast,
}

/// The callbacks of Python functions' events.
const PYTHON_MONITORS: [Monitor; 3] = [
    Monitor {
        events: &["PY_START", "PY_RESUME", "PY_THROW"],
        name: c"_monitor_enter",
        callback: monitor_enter,
    },
    Monitor {
        events: &["PY_RETURN", "PY_YIELD"],
        name: c"_monitor_return",
        callback: monitor_return,
    },
    Monitor {
        events: &["PY_UNWIND"],
        name: c"_monitor_unwind",
        callback: monitor_unwind,
    },
];

/// The callbacks of C functions' events (with `python_tracing_c_functions`).
const C_MONITORS: [Monitor; 2] = [
    Monitor {
        events: &["CALL"],
        name: c"_monitor_call",
        callback: monitor_call,
    },
    Monitor {
        events: &["C_RETURN", "C_RAISE"],
        name: c"_monitor_c_return",
        callback: monitor_c_return,
    },
];

/// `PY_START` and `PY_RESUME` (code, offset), and `PY_THROW` (code,
/// offset, exception), which cannot be disabled.
unsafe extern "C" fn monitor_enter(
    _module: *mut ffi::PyObject,
    args: *mut *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
) -> *mut ffi::PyObject {
    match nargs {
        // PY_THROW's third argument: it cannot be disabled.
        2 | 3 => monitored(*args, true, nargs == 2),
        _ => none(),
    }
}

/// `PY_RETURN` and `PY_YIELD` (code, offset, value).
unsafe extern "C" fn monitor_return(
    _module: *mut ffi::PyObject,
    args: *mut *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
) -> *mut ffi::PyObject {
    match nargs {
        3 => monitored(*args, false, true),
        _ => none(),
    }
}

/// `PY_UNWIND` (code, offset, exception), which cannot be disabled.
unsafe extern "C" fn monitor_unwind(
    _module: *mut ffi::PyObject,
    args: *mut *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
) -> *mut ffi::PyObject {
    match nargs {
        3 => monitored(*args, false, false),
        _ => none(),
    }
}

/// `CALL` (code, offset, callable, arg0): a call, recorded where the
/// callable is a C function (a Python function's start is its own event).
/// Never disabled: the same place may call a C function next time.
unsafe extern "C" fn monitor_call(
    _module: *mut ffi::PyObject,
    args: *mut *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
) -> *mut ffi::PyObject {
    match nargs {
        4 => monitored_c_call(*args.add(2), true),
        _ => none(),
    }
}

/// `C_RETURN` and `C_RAISE` (code, offset, callable, arg0): the call of a
/// C function ended.
unsafe extern "C" fn monitor_c_return(
    _module: *mut ffi::PyObject,
    args: *mut *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
) -> *mut ffi::PyObject {
    match nargs {
        4 => monitored_c_call(*args.add(2), false),
        _ => none(),
    }
}

/// A `sys.monitoring` event of the Python function of `code`: `entered`
/// (a start, resumption or throw) or left (a return, yield or unwind).
/// Returns `DISABLE` for a function seen and not traced where the event
/// allows it (`local`), else `None`: never on a panic (a bug, caught here
/// and not raised into the program) or where nothing is known.
///
/// # Safety
/// Called by the interpreter, its lock held, `code` live: the callbacks
/// read it from their arguments once their count is checked.
unsafe fn monitored(code: *mut ffi::PyObject, entered: bool, local: bool) -> *mut ffi::PyObject {
    let is_code = ffi::Py_TYPE(code) == CODE_TYPE.load(Ordering::Relaxed);
    if !is_code || GENERATION.load(Ordering::Relaxed) == 0 {
        return none();
    }
    let key = code as usize;
    // SAFETY: the current frame is the event's, `code` its code object.
    let describe = || unsafe { describe_code(ffi::PyEval_GetFrame(), code, key) };
    let traced = std::panic::catch_unwind(|| record(key, describe, entered));
    let py = Python::assume_attached();
    match DISABLE.get(py) {
        Some(disable) if local && matches!(traced, Ok(Some(false))) => {
            DISABLED.store(true, Ordering::Relaxed);
            disable.clone_ref(py).into_ptr()
        }
        _ => none(),
    }
}

/// A `sys.monitoring` event of a call of `callable` (or its end), recorded
/// where it is a C function. Returns `None`.
///
/// # Safety
/// Called by the interpreter, its lock held, `callable` live.
unsafe fn monitored_c_call(callable: *mut ffi::PyObject, entered: bool) -> *mut ffi::PyObject {
    if GENERATION.load(Ordering::Relaxed) != 0 {
        let _ = std::panic::catch_unwind(|| record_c_call(callable, entered));
    }
    none()
}

/// A new reference to `None`.
fn none() -> *mut ffi::PyObject {
    // SAFETY: `None` is immortal; the reference is the caller's.
    unsafe {
        let none = ffi::Py_None();
        ffi::Py_IncRef(none);
        none
    }
}

/// The function objects of `monitors`, made once: their method
/// definitions must outlive them, so they are leaked (five, once a
/// process).
fn callbacks<'py>(
    py: Python<'py>,
    monitors: &'static [Monitor],
    made: &'static PyOnceLock<Vec<Py<PyAny>>>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let made = made.get_or_try_init(py, || {
        monitors
            .iter()
            .map(|monitor| {
                let definition = Box::leak(Box::new(ffi::PyMethodDef {
                    ml_name: monitor.name.as_ptr(),
                    ml_meth: ffi::PyMethodDefPointer {
                        PyCFunctionFast: monitor.callback,
                    },
                    ml_flags: ffi::METH_FASTCALL,
                    ml_doc: std::ptr::null(),
                }));
                // Their module: rankscope's, which is never traced.
                let module = PyString::new(py, "rankscope._rankscope");
                // SAFETY: the lock is held (`py`); `definition` lives for
                // the rest of the process; the function holds `module`.
                unsafe {
                    let function =
                        ffi::PyCFunction_NewEx(definition, std::ptr::null_mut(), module.as_ptr());
                    Bound::from_owned_ptr_or_err(py, function).map(Bound::unbind)
                }
            })
            .collect::<PyResult<Vec<_>>>()
    })?;
    Ok(made.iter().map(|f| f.bind(py).clone()).collect())
}

/// The tool ids tried for `sys.monitoring`: the profiler's, then the two
/// no tool claims by convention.
const TOOL_IDS: [u8; 3] = [2, 3, 4];

/// Starts tracing through `sys.monitoring` (C functions too, with
/// `c_functions`); returns the tool id it took.
fn start_monitoring(monitoring: &Bound<'_, PyAny>, c_functions: bool) -> PyResult<u8> {
    let mut taken = None;
    for id in TOOL_IDS {
        if monitoring.call_method1("get_tool", (id,))?.is_none() {
            monitoring.call_method1("use_tool_id", (id, "rankscope"))?;
            taken = Some(id);
            break;
        }
    }
    let Some(id) = taken else {
        return Err(PyRuntimeError::new_err(format!(
            "python_tracing: sys.monitoring tool ids {TOOL_IDS:?} are all in use by other tools"
        )));
    };
    let registered = register_callbacks(monitoring, id, c_functions);
    if registered.is_err() {
        // The id goes back: a later start (or another tool) may take it.
        let _ = monitoring.call_method1("free_tool_id", (id,));
    }
    registered.map(|()| id)
}

/// Registers the callbacks of tool `id` (C functions' too, with
/// `c_functions`) and turns its events on.
fn register_callbacks(monitoring: &Bound<'_, PyAny>, id: u8, c_functions: bool) -> PyResult<()> {
    let py = monitoring.py();
    let _ = DISABLE.get_or_try_init(py, || monitoring.getattr("DISABLE").map(Bound::unbind))?;
    // A static type of the interpreter's: it outlives every module.
    let code_type = py.import("types")?.getattr("CodeType")?;
    CODE_TYPE.store(code_type.as_ptr().cast(), Ordering::Relaxed);
    let events = monitoring.getattr("events")?;
    let event = |name: &str| -> PyResult<u64> { events.getattr(name)?.extract() };
    static PYTHON_CALLBACKS: PyOnceLock<Vec<Py<PyAny>>> = PyOnceLock::new();
    static C_CALLBACKS: PyOnceLock<Vec<Py<PyAny>>> = PyOnceLock::new();
    let mut registered = vec![(&PYTHON_MONITORS[..], &PYTHON_CALLBACKS)];
    if c_functions {
        registered.push((&C_MONITORS[..], &C_CALLBACKS));
    }
    let mut set = 0;
    for (monitors, made) in registered {
        for (monitor, callback) in monitors.iter().zip(callbacks(py, monitors, made)?) {
            for name in monitor.events {
                monitoring.call_method1("register_callback", (id, event(name)?, &callback))?;
                set |= event(name)?;
            }
        }
    }
    // Functions an earlier tracing disabled (other filters) report again;
    // not otherwise, as this undoes other tools' disabling too.
    if DISABLED.swap(false, Ordering::Relaxed) {
        monitoring.call_method0("restart_events")?;
    }
    monitoring.call_method1("set_events", (id, set))?;
    Ok(())
}

/// Stops tracing through `sys.monitoring` as tool `id`.
fn stop_monitoring(monitoring: &Bound<'_, PyAny>, id: u8) -> PyResult<()> {
    monitoring.call_method1("set_events", (id, 0))?;
    monitoring.call_method1("free_tool_id", (id,))?;
    Ok(())
}

/// The thread's view of tracing `generation`, where it still runs.
fn thread_view(generation: u64) -> Option<ThreadView> {
    let registry = lock_registry();
    let registry = registry.as_ref().filter(|r| r.generation == generation)?;
    Some(ThreadView {
        generation,
        profiler: registry.profiler.clone(),
        sites: FxHashMap::default(),
    })
}

/// An attribute of `object` that is text.
fn text(object: &Bound<'_, PyAny>, attribute: &str) -> Option<String> {
    object.getattr(attribute).ok()?.extract::<String>().ok()
}

/// Describes the function of `key` into the registry, if it is not there
/// yet, `site` reading its object `object` (with the filters); returns its
/// site where it is traced. The registry's lock is not held while Python
/// objects are read: a read may run Python code (a collection's
/// finalisers) and hand the interpreter's lock to a thread whose hook then
/// takes this one.
#[cold]
#[inline(never)]
fn describe(
    key: usize,
    object: Bound<'_, PyAny>,
    site: impl FnOnce(&Filters) -> Option<Arc<Site>>,
) -> Option<Arc<Site>> {
    let (generation, filters) = {
        let registry = lock_registry();
        let registry = registry.as_ref()?;
        if let Some(function) = registry.functions.get(&key) {
            return function.site.clone();
        }
        if registry.functions.len() >= MAX_FUNCTIONS {
            return None;
        }
        (registry.generation, Arc::clone(&registry.filters))
    };
    let site = site(&filters);
    let mut registry = lock_registry();
    let registry = registry.as_mut().filter(|r| r.generation == generation)?;
    let function = registry.functions.entry(key).or_insert(Function {
        site,
        _object: object.unbind(),
    });
    function.site.clone()
}

/// Describes the Python function of the code object `code`, of key `key`.
///
/// # Safety
/// The interpreter's lock is held; `code` is live, and `frame` is its live
/// frame or null.
unsafe fn describe_code(
    frame: *mut ffi::PyFrameObject,
    code: *mut ffi::PyObject,
    key: usize,
) -> Option<Arc<Site>> {
    // Attached as PyO3 counts it, so that the objects read here (an
    // attribute's error) are freed at once, not at its next call.
    Python::attach(|py| {
        let code = Bound::from_borrowed_ptr(py, code);
        let frame = Bound::from_borrowed_ptr_or_opt(py, frame.cast::<ffi::PyObject>());
        describe(key, code.clone(), |filters| {
            let qualname = text(&code, "co_qualname")
                .or_else(|| text(&code, "co_name"))
                .unwrap_or_else(|| "(unnamed)".into());
            let module = frame
                .and_then(|frame| frame.getattr("f_globals").ok())
                .and_then(|globals| globals.get_item("__name__").ok())
                .and_then(|name| name.extract::<String>().ok());
            let name = qualified(module, qualname);
            filters.traces(&name).then(|| {
                Arc::new(Site {
                    file: text(&code, "co_filename").unwrap_or_default(),
                    line: code
                        .getattr("co_firstlineno")
                        .ok()
                        .and_then(|line| line.extract::<u32>().ok())
                        .unwrap_or(0),
                    name,
                })
            })
        })
    })
}

/// Describes the C function `callable`, of key `key`: `module.qualname`
/// where it says its module (`time.sleep`, `builtins.len`), else its
/// qualified name (`list.append`); in no file.
///
/// # Safety
/// The interpreter's lock is held; `callable` is live.
unsafe fn describe_c_function(callable: *mut ffi::PyObject, key: usize) -> Option<Arc<Site>> {
    // Attached as PyO3 counts it (as in `describe_code`).
    Python::attach(|py| {
        let callable = Bound::from_borrowed_ptr(py, callable);
        describe(key, callable.clone(), |filters| {
            let qualname = text(&callable, "__qualname__")
                .or_else(|| text(&callable, "__name__"))
                .unwrap_or_else(|| "(unnamed C function)".into());
            // A method of a C type says no module; its type's (a method
            // descriptor's class, a bound method's object's) is checked
            // against the exclusions too: rankscope's own methods.
            let owner = match callable.getattr("__objclass__") {
                Ok(class) => Some(class),
                Err(_) => callable
                    .getattr("__self__")
                    .ok()
                    .filter(|owner| !owner.is_instance_of::<PyModule>())
                    .map(|owner| owner.get_type().into_any()),
            };
            let owner = owner.and_then(|class| text(&class, "__module__"));
            let excluded =
                owner.is_some_and(|owner| filters.excludes(&format!("{owner}.{qualname}")));
            let name = qualified(text(&callable, "__module__"), qualname);
            (filters.traces(&name) && !excluded).then(|| {
                Arc::new(Site {
                    name,
                    file: String::new(),
                    line: 0,
                })
            })
        })
    })
}

/// `module.qualname`, or the qualified name alone without a module.
fn qualified(module: Option<String>, qualname: String) -> String {
    match module {
        Some(module) => format!("{module}.{qualname}"),
        None => qualname,
    }
}

#[cfg(test)]
mod tests {
    use super::Filters;

    #[test]
    fn a_pattern_matches_itself_and_the_names_below_it() {
        let filters = Filters::new(Some("app, lib.Model"), Some("app.noisy"), false);
        assert!(filters.traces("app.main"));
        assert!(filters.traces("app"));
        assert!(filters.traces("lib.Model.forward"));
        assert!(
            !filters.traces("application.main"),
            "a prefix of a word is no match"
        );
        assert!(!filters.traces("lib.other"));
        assert!(!filters.traces("app.noisy.f"), "excluded over included");
        assert!(!filters.traces("rankscope.stage"), "never rankscope's own");
        assert!(Filters::new(None, None, false).traces("anything.at_all"));
    }
}
