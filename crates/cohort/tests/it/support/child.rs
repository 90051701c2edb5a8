//! Tests that run this test binary again as a child process (a process of
//! their own: its peak memory, a kill): the test's name as libtest knows
//! it, the child's peak resident memory, and one run of a child that
//! reports a line of `key=value` fields.

/// The name libtest knows test `name` of `module` by (`module_path!()`
/// without the crate's name), for running it alone with `--exact`.
pub fn test_path(module: &str, name: &str) -> String {
    let module = module.split_once("::").map_or("", |(_, m)| m);
    format!("{module}::{name}")
}

/// `VmHWM` (peak resident set) of this process, KiB.
pub fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("/proc/self/status")
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("VmHWM")
}

/// What a child printed after its marker: `key=value` fields.
pub struct ChildLine(String);

impl ChildLine {
    /// Field `name` as a number.
    pub fn field(&self, name: &str) -> u64 {
        self.0
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {}", self.0))
    }
}

/// Runs test `test` (a [`test_path`]) of this binary alone in a child
/// process with `var=spec` in its environment, and returns what it printed
/// after `marker` on its first line that has it. Panics when the child
/// fails or prints no such line.
pub async fn run_child(
    test: String,
    var: &'static str,
    spec: String,
    marker: &'static str,
) -> ChildLine {
    let exe = std::env::current_exe().expect("the test binary");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(exe)
            .args(["--exact", test.as_str(), "--nocapture", "--test-threads=1"])
            .env(var, spec)
            .output()
            .expect("child")
    })
    .await
    .expect("join");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once(marker).map(|(_, rest)| rest.to_owned()))
        .unwrap_or_else(|| panic!("no {marker} line: {stdout}"));
    ChildLine(line)
}
