//! Python function tracing (`python_tracing`): CPython's C-level profile
//! hook reports each call and return of a Python function on the threads
//! it is set on (the thread that starts the session, and threads started
//! after, through `threading.setprofile`), and hands the traced ones to
//! the agent's [`rankscope::Profiler::enter_function`] and
//! [`rankscope::Profiler::exit_function`]. C functions are not traced.
//!
//! A function is its code object, known by its address: the object is held
//! alive while tracing lasts, so the address names no other. Each code
//! object is described (qualified name, file, first line) and matched
//! against the include and exclude filters once, under the interpreter's
//! lock, into a registry every thread shares; each thread then caches
//! whether it is traced. The hook runs with the interpreter's lock held, as
//! every profile function does, so the registry's mutex is never contended.

use std::cell::RefCell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::ffi;
use pyo3::prelude::*;
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

/// The most code objects described while tracing lasts; past it, new
/// functions are not traced (their time is their caller's own).
const MAX_FUNCTIONS: usize = 200_000;

/// Which tracing the threads' hooks belong to: 0 while none runs. A hook
/// that finds another unsets itself.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// What every thread's hook shares while tracing runs.
static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// The tracing that runs: its profiler, filters and functions described.
struct Registry {
    generation: u64,
    profiler: rankscope::Profiler,
    filters: Filters,
    functions: FxHashMap<usize, Function>,
}

/// One code object, described.
struct Function {
    /// Its site, where it is traced.
    site: Option<Arc<Site>>,
    /// Held alive, so that its address names it alone.
    _code: Py<PyAny>,
}

/// Where a traced function is ([`FunctionSite`], owned).
struct Site {
    name: String,
    file: String,
    line: u32,
}

/// The modules or qualified names to trace alone, and those never to.
pub(crate) struct Filters {
    include: Vec<String>,
    exclude: Vec<String>,
}

impl Filters {
    /// Filters from the comma-separated settings; rankscope's own package
    /// is always excluded.
    pub(crate) fn new(include: Option<&str>, exclude: Option<&str>) -> Self {
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
            include: list(include),
            exclude,
        }
    }

    /// Whether the function of qualified name `name` is traced: `pattern`
    /// matches itself and the names below it (`pkg` matches `pkg.mod.f`).
    pub(crate) fn traces(&self, name: &str) -> bool {
        let matches = |pattern: &String| {
            name.strip_prefix(pattern.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        };
        (self.include.is_empty() || self.include.iter().any(matches))
            && !self.exclude.iter().any(matches)
    }
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

/// Starts tracing the calling thread and the threads started from now on,
/// for `profiler`.
pub(crate) fn start(
    py: Python<'_>,
    profiler: rankscope::Profiler,
    filters: Filters,
) -> PyResult<()> {
    stop(py)?;
    let generation = GENERATION.load(Ordering::Relaxed).wrapping_add(1).max(1);
    *lock_registry() = Some(Registry {
        generation,
        profiler: profiler.clone(),
        filters,
        functions: FxHashMap::default(),
    });
    GENERATION.store(generation, Ordering::Relaxed);
    profiler.forget_function_calls();
    py.import("threading")?
        .call_method1("setprofile", (wrap_pyfunction!(_trace_new_thread, py)?,))?;
    // SAFETY: the interpreter's lock is held (`py`); `profile` has the
    // signature CPython calls.
    unsafe { PyEval_SetProfile(Some(profile), std::ptr::null_mut()) };
    Ok(())
}

/// Stops tracing: the calling thread's hook and the new threads' now, the
/// other threads' at their next call. The code objects are let go.
pub(crate) fn stop(py: Python<'_>) -> PyResult<()> {
    let running = lock_registry().take();
    let Some(running) = running else {
        return Ok(());
    };
    GENERATION.store(0, Ordering::Relaxed);
    // SAFETY: the interpreter's lock is held (`py`).
    unsafe { PyEval_SetProfile(None, std::ptr::null_mut()) };
    py.import("threading")?
        .call_method1("setprofile", (py.None(),))?;
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

/// The C hook.
unsafe extern "C" fn profile(
    _obj: *mut ffi::PyObject,
    frame: *mut ffi::PyFrameObject,
    what: c_int,
    _arg: *mut ffi::PyObject,
) -> c_int {
    if what != TRACE_CALL && what != TRACE_RETURN {
        return 0;
    }
    let generation = GENERATION.load(Ordering::Relaxed);
    if generation == 0 {
        // Tracing stopped: this thread's hook goes.
        PyEval_SetProfile(None, std::ptr::null_mut());
        return 0;
    }
    // A new reference, given back below.
    let code = ffi::PyFrame_GetCode(frame);
    if code.is_null() {
        return 0;
    }
    let key = code as usize;
    // A thread-local being torn down records nothing.
    let _ = VIEW.try_with(|view| {
        let mut view = view.borrow_mut();
        let view = match &mut *view {
            Some(view) if view.generation == generation => view,
            stale => match thread_view(generation) {
                Some(fresh) => stale.insert(fresh),
                None => return,
            },
        };
        let ThreadView {
            profiler, sites, ..
        } = view;
        let described = sites
            .entry(key)
            // SAFETY: the interpreter's lock is held; `frame` and `code`
            // are the live objects of this event.
            .or_insert_with(|| unsafe { describe(frame, code.cast(), key) });
        let Some(site) = described else {
            return;
        };
        match what {
            TRACE_CALL => profiler.enter_function(key, || FunctionSite {
                name: &site.name,
                file: &site.file,
                line: site.line,
            }),
            _ => profiler.exit_function(key),
        }
    });
    ffi::Py_DecRef(code.cast());
    0
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

/// Describes the code object at `key` into the registry, if it is not
/// there yet; returns its site where it is traced.
///
/// # Safety
/// The interpreter's lock is held; `frame` and `code` are live.
#[cold]
#[inline(never)]
unsafe fn describe(
    frame: *mut ffi::PyFrameObject,
    code: *mut ffi::PyObject,
    key: usize,
) -> Option<Arc<Site>> {
    let mut registry = lock_registry();
    let registry = registry.as_mut()?;
    if let Some(function) = registry.functions.get(&key) {
        return function.site.clone();
    }
    if registry.functions.len() >= MAX_FUNCTIONS {
        return None;
    }
    let py = Python::assume_attached();
    let code = Bound::from_borrowed_ptr(py, code);
    let frame = Bound::from_borrowed_ptr(py, frame.cast::<ffi::PyObject>());
    let text = |object: &Bound<'_, PyAny>, attribute: &str| -> Option<String> {
        object.getattr(attribute).ok()?.extract::<String>().ok()
    };
    let qualname = text(&code, "co_qualname")
        .or_else(|| text(&code, "co_name"))
        .unwrap_or_else(|| "(unnamed)".into());
    let module = frame
        .getattr("f_globals")
        .ok()
        .and_then(|globals| globals.get_item("__name__").ok())
        .and_then(|name| name.extract::<String>().ok());
    let name = match module {
        Some(module) => format!("{module}.{qualname}"),
        None => qualname,
    };
    let site = registry.filters.traces(&name).then(|| {
        Arc::new(Site {
            file: text(&code, "co_filename").unwrap_or_default(),
            line: code
                .getattr("co_firstlineno")
                .ok()
                .and_then(|line| line.extract::<u32>().ok())
                .unwrap_or(0),
            name,
        })
    });
    registry.functions.insert(
        key,
        Function {
            site: site.clone(),
            _code: code.unbind(),
        },
    );
    site
}

#[cfg(test)]
mod tests {
    use super::Filters;

    #[test]
    fn a_pattern_matches_itself_and_the_names_below_it() {
        let filters = Filters::new(Some("app, lib.Model"), Some("app.noisy"));
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
        assert!(Filters::new(None, None).traces("anything.at_all"));
    }
}
