//! Readings of a running process from Linux's `/proc`: what the benchmarks and `scalebench`
//! report of the servers they start (resident memory, CPU time).

/// Resident memory of process `pid` in bytes (`VmRSS`), if it can be read.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// CPU time (user + system) process `pid` has used so far, in seconds. `/proc/PID/stat`
/// counts it in clock ticks, which are 1/100 s on every Linux this runs on
/// (`getconf CLK_TCK`).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after its closing ')' do not.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// Stops a child process this program started: with `sigterm`, SIGTERM and up to `grace`
/// to exit (a clean shutdown, as an operator stops a server); then, or without it, kill -9.
/// Reaps it either way, so no zombie is left.
pub fn stop_child(child: &mut std::process::Child, sigterm: bool, grace: std::time::Duration) {
    if sigterm {
        let _ = std::process::Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_memory_and_cpu_time() {
        let me = std::process::id();
        assert!(super::rss_bytes(me).is_some_and(|b| b > 0));
        assert!(super::cpu_seconds(me).is_some());
        assert_eq!(super::rss_bytes(u32::MAX), None);
    }
}
