//! A real headless Chromium driven over the DevTools protocol through
//! `--remote-debugging-pipe` (the browser reads commands on fd 3 and writes
//! replies and events on fd 4, each message JSON ended by a NUL byte): load
//! a page, evaluate JavaScript in it, collect its console errors and
//! exceptions, take a screenshot.
//!
//! The browser is Debian's `chromium`, which `scripts/test.sh` installs; a
//! missing browser fails the test that needs it.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The browser, with one page open.
pub struct Browser {
    child: Child,
    commands: File,
    replies: BufReader<File>,
    next_id: u64,
    session: String,
    /// Every event received, in order.
    pub events: Vec<Value>,
    _profile: tempfile::TempDir,
}

fn pipe() -> (File, File) {
    let mut fds = [0; 2];
    // Close-on-exec: only the two ends moved to fds 3 and 4 reach the browser.
    // SAFETY: `fds` has room for the two descriptors pipe2(2) writes.
    assert_eq!(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) },
        0,
        "pipe2"
    );
    // SAFETY: both descriptors were just made and are owned by nobody else.
    unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
}

impl Browser {
    /// Starts Chromium (`RANKSCOPE_CHROMIUM`, else `chromium` on the PATH)
    /// with an empty profile and opens a page `width` pixels wide.
    pub fn launch(width: u32) -> Browser {
        let binary = std::env::var("RANKSCOPE_CHROMIUM").unwrap_or_else(|_| "chromium".into());
        let profile = tempfile::tempdir().unwrap();
        let (their_commands, commands) = pipe();
        let (replies, their_replies) = pipe();
        let (read_fd, write_fd) = (their_commands.into_raw_fd(), their_replies.into_raw_fd());
        let mut command = Command::new(&binary);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-pipe",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and
        // exec. The ends are first copied above fd 10 so that placing one on
        // 3 or 4 cannot overwrite the other.
        unsafe {
            command.pre_exec(move || {
                let high = |fd| libc::fcntl(fd, libc::F_DUPFD, 10);
                let (read, write) = (high(read_fd), high(write_fd));
                if read < 0 || write < 0 || libc::dup2(read, 3) < 0 || libc::dup2(write, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap_or_else(|e| {
            panic!("starting {binary} (scripts/test.sh installs Debian's chromium): {e}")
        });
        // SAFETY: the child has its copies; ours are closed here.
        unsafe {
            libc::close(read_fd);
            libc::close(write_fd);
        }
        let mut browser = Browser {
            child,
            commands,
            replies: BufReader::new(replies),
            next_id: 0,
            session: String::new(),
            events: Vec::new(),
            _profile: profile,
        };
        let target = browser.call(None, "Target.createTarget", json!({ "url": "about:blank" }));
        let target_id = target["targetId"].as_str().unwrap().to_string();
        let attached = browser.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_string();
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            browser.page(domain, json!({}));
        }
        browser.page(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": false }),
        );
        browser
    }

    /// Sends a command (to the page's session when `session` is given) and
    /// returns its result; events that arrive meanwhile are kept.
    fn call(&mut self, session: Option<String>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands
            .write_all(&bytes)
            .expect("the browser reads its commands");
        loop {
            let mut buffer = Vec::new();
            let read = self
                .replies
                .read_until(0, &mut buffer)
                .expect("reading the browser");
            assert!(read > 0, "the browser closed its pipe during {method}");
            buffer.pop();
            let reply: Value = serde_json::from_slice(&buffer).expect("DevTools JSON");
            if reply["id"] == json!(id) {
                assert!(reply["error"].is_null(), "{method}: {}", reply["error"]);
                return reply["result"].clone();
            }
            if reply.get("method").is_some() {
                self.events.push(reply);
            }
        }
    }

    /// A command to the page.
    pub fn page(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.call(Some(session), method, params)
    }

    /// Loads `path` and waits (at most a minute: a bound, not a timing
    /// check) until `ready` evaluates to true in it.
    pub fn open(&mut self, path: &Path, ready: &str) {
        let url = format!("file://{}", path.canonicalize().unwrap().display());
        self.page("Page.navigate", json!({ "url": url }));
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.eval(ready) != json!(true) {
            assert!(
                Instant::now() < deadline,
                "{url}: `{ready}` never became true"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The value of the JavaScript expression `expression` in the page.
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.page(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true }),
        );
        assert!(
            result["exceptionDetails"].is_null(),
            "{expression}: {}",
            result["exceptionDetails"]
        );
        result["result"]["value"].clone()
    }

    /// Console errors, uncaught exceptions and error log entries so far.
    pub fn errors(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| {
                let params = &e["params"];
                match e["method"].as_str() {
                    Some("Runtime.exceptionThrown") => true,
                    Some("Runtime.consoleAPICalled") => params["type"] == "error",
                    Some("Log.entryAdded") => params["entry"]["level"] == "error",
                    _ => false,
                }
            })
            .map(|e| e.to_string())
            .collect()
    }

    /// A PNG of the whole page, written to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let shot = self.page(
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true }),
        );
        let png = base64_decode(shot["data"].as_str().unwrap());
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 (the DevTools screenshot encoding).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        other => panic!("not base64: {other}"),
    };
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'=').map(value).collect();
    digits
        .chunks(4)
        .flat_map(|chunk| {
            let bits = chunk
                .iter()
                .enumerate()
                .fold(0u32, |acc, (i, &d)| acc | u32::from(d) << (18 - 6 * i));
            let bytes = [(bits >> 16) as u8, (bits >> 8) as u8, bits as u8];
            bytes.into_iter().take(chunk.len() - 1).collect::<Vec<u8>>()
        })
        .collect()
}
