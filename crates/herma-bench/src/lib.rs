//! What the harnesses share: the binaries they start (`sibling`), a gateway process pinned to
//! core 0 and the address it logged (`spawn_gateway`), the CLI (`run_cli`) and a process's CPU
//! time (`cpu_ns`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub type Result<T> = std::result::Result<T, String>;

/// A gateway process under test.
pub struct Gateway {
    pub child: Child,
    pub base: String,
}

impl Gateway {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn taskset_available() -> bool {
    Command::new("taskset")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Starts `program args…` on core 0 (when `taskset` exists) and waits for the line naming its
/// address (`… listening on http://ADDR`).
pub fn spawn_gateway(program: &Path, args: &[&str], env: &[(&str, String)]) -> Result<Gateway> {
    let mut cmd = if taskset_available() {
        let mut c = Command::new("taskset");
        c.arg("-c").arg("0").arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.args(args).stdout(Stdio::null()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting {}: {e}", program.display()))?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let base = loop {
        let line = lines
            .next()
            .ok_or_else(|| format!("{} exited before listening", program.display()))?
            .map_err(|e| e.to_string())?;
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
        }
    };
    // Keep draining its output so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok(Gateway { child, base })
}

/// CPU time the process has spent, in nanoseconds (all threads).
pub fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| {
            s.split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

pub fn run_cli(herma: &Path, args: &[&str], database: &str) -> Result<String> {
    let out = Command::new(herma)
        .args(args)
        .env("HERMA_DATABASE_URL", database)
        .env("HERMA_LOG", "warn")
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "herma {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn sibling(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = exe.parent().ok_or("no exe dir")?.join(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found: cargo build --release -p herma-cli -p herma-bench",
            path.display()
        ))
    }
}

/// A `/proc/PID/status` memory field in MiB (`VmRSS`, `VmHWM`).
pub fn memory_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}
